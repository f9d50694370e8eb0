"""Whole files written atomically, and never over a file the command read.

A file is written to a temporary beside it (same directory, so the rename cannot cross a file
system), flushed and fsynced, renamed over the target with ``os.replace``, and the directory is
fsynced so the rename itself survives a crash. A reader sees the old file or the new one, never a
half: a full disk, an exception or a SIGTERM (the command line turns it into one) leaves the old
file where it was, and no temporary behind. The files of one command that belong together (a
report, a gate's result) are written as a set (``write_set``): all written before any is renamed.

Before a byte is written the target is checked: it must not be a file this process read or
declared as an input (``harness.core.inputfile``), by identity, so a symlink or hard link to an
input is caught too; it must not be a run's file unless the run writes it (``harness.core.runfiles``);
and an existing target must be a regular file, as ``os.replace`` over a FIFO
or ``/dev/null`` would put a file where the device or pipe was.

A temporary is named ``.critpath-PID-RANDOM.tmp``: its length does not grow with the target's (a
target of 250 bytes still has a temporary that fits NAME_MAX). Its writer holds an flock on it
until the rename, so the next writer into that directory removes one that a SIGKILL left, and
never a live writer's, whatever pid namespace either runs in (``harness.core.temps``). A target
named like critpath's own bookkeeping (``.critpath-claim``) is refused, and every file is written
only into a directory no other process holds (``harness.core.claim.writing_into``).

Appended files (``results.jsonl``) are not written here: they grow one fsynced line at a time
(``harness.core.store.append_record``). A text appended to a summary file (``append_text``) is
read, extended and replaced whole.
"""
from __future__ import annotations

import errno
import json
import math
import os
import stat
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator, Mapping, Optional

from harness.core.claim import held_above, refuse_links_below, writing_into
from harness.core.inputfile import declare_inputs, input_at, kind
from harness.core.options import CannotRun, UsageError
from harness.core.runfiles import run_file_refusal
from harness.core.signals import stop_signals_deferred
from harness.core.temps import discard, new_temp, reserved, sweep_stale


class NonFiniteError(CannotRun):
    """A document to be written as JSON holds an infinite or NaN number; the message names the
    file and the field."""


NAME_MAX = 255  # bytes in one file name (Linux, macOS): a name is cut by bytes, not characters


def fit_name(name: str, max_bytes: int = NAME_MAX) -> str:
    """``name`` cut to at most ``max_bytes`` of UTF-8, never inside a character: 85 CJK characters
    are 255 bytes, so a cut by characters still fails with ENAMETOOLONG."""
    return name.encode("utf-8", "surrogateescape")[:max_bytes].decode("utf-8", "ignore")


def check_target(path: Path, updates: bool = False, run_writer: bool = False) -> None:
    """UsageError when ``path`` may not be written: an input of this command, a file of a run
    written by anything but that run (``runfiles``), or an existing file that is not a regular one.
    A missing path is fine. ``updates``: the command's own state document, which it reads and
    writes back by design (gate-power's power.json), may be replaced. ``run_writer``: the files'
    own writer writes them (``store.RunDir`` its run's files; a gate its result, ``write_set``'s
    ``owned``)."""
    path = Path(path)
    if reserved(path.name):
        # Written over a live holder's claim file, it would let a second process claim the directory.
        raise UsageError(f"{path}: {path.name} is a name critpath keeps for its own bookkeeping (a directory's claim, "
                         "a writer's temporary), never an output's; choose another output path")
    above = held_above(path.parent)
    if above is not None:
        refuse_links_below(above, path.parent)
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.islink(path):  # dangling: the rename would put a file where the link was
            raise UsageError(f"{path} is a symbolic link to nothing; give the path of a new or a regular file") from None
        _refuse_run_file(path, run_writer)  # a new fingerprint.json beside a run's records is the run's too
        return
    except OSError as exc:
        raise _naming(exc, path) from None
    if os.path.islink(path):
        # The rename replaces the link, not what it points at (/dev/stdout, a CI step summary):
        # the output would land where nobody looks and the link would be gone.
        raise UsageError(f"{path} is a symbolic link (to {os.readlink(path)}); the output would replace the link, "
                         "not what it points at: give the path it points at, or a new file")
    seen = input_at(st)
    if seen is not None and not updates:
        same = "" if Path(seen) == path else f" (it is {seen})"
        raise UsageError(f"{path} is an input of this command{same}; choose another output path")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path} is {kind(st.st_mode)}, not a regular file, and writing it would replace it "
                         "with one; give the path of a new or a regular file")
    _refuse_run_file(path, run_writer)


def _refuse_run_file(path: Path, run_writer: bool) -> None:
    refusal = "" if run_writer else run_file_refusal(path)
    if refusal:
        raise UsageError(refusal)


def check_creatable(path: Path) -> None:
    """UsageError when no file can be made at ``path`` because of its directory: missing, not a
    directory, or closed to this user. For an output a command writes only after minutes of work
    (a gate's ``--markdown``): checked first, the refusal costs nothing and loses nothing."""
    path = Path(path)
    directory = path.parent
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        raise UsageError(f"{path}: its directory {directory} does not exist; create it, or give a file "
                         "in a directory that exists") from None
    except NotADirectoryError:
        raise UsageError(f"{path}: its directory {directory} is below a file, not a directory") from None
    except OSError as exc:
        raise UsageError(f"{path}: its directory {directory} cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path}: its directory {directory} is a file, not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"{path}: its directory {directory} is not writable by this user")


def check_targets(paths: Iterable[Path]) -> None:
    """``check_target`` of every file a command is about to write, before it writes the first: a
    refusal then leaves nothing half written."""
    for path in paths:
        check_target(path)


@contextmanager
def atomic_file(path: Path, mode: str = "wb", updates: bool = False, run_writer: bool = False) -> Iterator[IO]:
    """A file object that becomes ``path`` when the block ends without an error; on an error the
    target is left as it was and the temporary removed. ``mode`` is "wb" or "w" (UTF-8 text);
    ``updates`` and ``run_writer`` as for ``check_target``."""
    path = Path(path)
    check_target(path, updates, run_writer)
    with writing_into(path.parent) as confirm:
        sweep_stale(path.parent)
        tmp, fd = _temp_beside(path)
        try:
            # The temporary's lock lives as long as this file object: it is closed after the rename.
            with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""})) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
                _install(tmp, path, confirm, updates, run_writer)
            _fsync_dir(path.parent)
        except OSError as exc:
            discard(tmp)
            # A full disk: keep whatever was there before, and name the file.
            raise _naming(exc, path) from exc
        except BaseException:
            discard(tmp)
            raise


def write_set(files: Mapping[Path, bytes], owned: Iterable[Path] = ()) -> None:
    """Every file of ``files`` (path: bytes) written, or none of them: each into a temporary beside
    it, fsynced, and only when all are written are they renamed, one after the other. A failure
    before the renames (a full disk, a refused target) removes the temporaries and leaves every
    target as it was, so the files of one command (a report's markdown, HTML and plots; a gate's
    JSON, JUnit and markdown) are never half of one run and half of another. ``owned``: the files
    of ``files`` their own writer writes (a gate its result, ``runfiles``); every other one is
    checked as any output is."""
    paths = [Path(p) for p in files]
    owned = {Path(p) for p in owned}
    for path in paths:
        check_target(path, run_writer=path in owned)
    staged: list[tuple[Path, Path, int]] = []  # target, temporary, its locked fd
    with ExitStack() as held:
        confirms = {d: held.enter_context(writing_into(d)) for d in dict.fromkeys(p.parent for p in paths)}
        try:
            for directory in confirms:
                sweep_stale(directory)
            for path, data in zip(paths, files.values()):
                tmp, fd = _temp_beside(path)
                staged.append((path, tmp, fd))
                try:
                    left = memoryview(data)
                    while left:  # a write may take less than all of it
                        left = left[os.write(fd, left):]
                    os.fsync(fd)
                except OSError as exc:
                    raise _naming(exc, path) from exc
            with stop_signals_deferred():  # all renamed, or none: a signal waits for the last
                for path, tmp, _ in staged:
                    try:
                        _install(tmp, path, confirms[path.parent], run_writer=path in owned)
                    except OSError as exc:
                        raise _naming(exc, path) from exc
            for directory in confirms:
                _fsync_dir(directory)
        except BaseException:
            for _, tmp, _ in staged:
                discard(tmp)  # one renamed already is gone from this name: nothing to remove
            raise
        finally:
            for _, _, fd in staged:
                os.close(fd)


def _temp_beside(path: Path) -> tuple[Path, int]:
    """A new temporary in ``path``'s directory, locked (``temps.new_temp``); an error names ``path``."""
    try:
        return new_temp(path.parent)
    except OSError as exc:
        raise _naming(exc, path) from None


def _install(tmp: Path, path: Path, confirm: Callable[[], None], updates: bool = False,
             run_writer: bool = False) -> None:
    """The written temporary ``tmp`` renamed to ``path``, checked once more just before."""
    check_target(path, updates, run_writer)  # an input read while it was written, or a FIFO made meanwhile
    confirm()  # a claim of the directory made while it was written
    os.replace(tmp, path)


def _naming(exc: OSError, path: Path) -> OSError:
    # A file cannot be made where its directory is missing: ENOENT's own words name no directory.
    missing = exc.errno == errno.ENOENT and not path.parent.is_dir()
    reason = f"its directory {path.parent} does not exist" if missing else exc.strerror or exc
    return OSError(exc.errno, f"could not write {path}: {reason}")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: Path, data: bytes, updates: bool = False, run_writer: bool = False) -> None:
    with atomic_file(path, "wb", updates, run_writer) as f:
        f.write(data)


def write_text(path: Path, text: str, updates: bool = False) -> None:
    """``text`` as UTF-8; a lone surrogate is an error here, so callers escape their text for its
    sink first (``harness.core.escape``)."""
    write_bytes(path, text.encode("utf-8"), updates)


def write_json(path: Path, data, indent: int = 2, sort_keys: bool = True, updates: bool = False,
               run_writer: bool = False) -> None:
    """``data`` as strict JSON (``strict_json``) into ``path``."""
    write_bytes(path, json_bytes(path, data, indent, sort_keys), updates, run_writer)


def json_bytes(path: Path, data, indent: int = 2, sort_keys: bool = True) -> bytes:
    """What ``write_json`` writes into ``path``: for a file written in a set (``write_set``)."""
    return (strict_json(data, path, indent, sort_keys) + "\n").encode("utf-8")


def strict_json(data, where, indent: Optional[int] = 2, sort_keys: bool = True) -> str:
    """``data`` as JSON text: ASCII-only, so any string (a lone surrogate too) gives valid UTF-8,
    and never ``Infinity`` or ``NaN``, which are not JSON and which many readers refuse. A
    non-finite number is a NonFiniteError naming ``where`` (the file) and the field: a writer that
    may hold one says why with ``finite_or_null`` first."""
    bad = non_finite(data)
    if bad:
        field, value = bad[0]
        raise NonFiniteError(f"{where}: field {field} is {value}, which JSON cannot hold"
                             + (f" ({len(bad) - 1} more such field(s))" if len(bad) > 1 else ""))
    return json.dumps(data, indent=indent, sort_keys=sort_keys, allow_nan=False, ensure_ascii=True)


def non_finite(data, at: str = "") -> list[tuple[str, float]]:
    """(field, value) of every infinite or NaN number in ``data``, the field as ``a.b[2].c``."""
    if isinstance(data, dict):
        return [found for k, v in data.items() for found in non_finite(v, f"{at}.{k}" if at else str(k))]
    if isinstance(data, (list, tuple)):
        return [found for i, v in enumerate(data) for found in non_finite(v, f"{at}[{i}]")]
    return [(at, data)] if isinstance(data, float) and not math.isfinite(data) else []


def finite_or_null(data):
    """``data`` with every infinite or NaN number as null, and the fields that were, so a writer
    can say why they are null next to them."""
    def clean(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value
    return clean(data), [field for field, _ in non_finite(data)]


def append_text(path: Path, text: str) -> None:
    """``text`` added at the end of ``path`` (a CI step summary collects several steps): the old
    content and the new are written whole into a temporary that replaces it, so a kill leaves the
    old file as it was, never half a step."""
    write_bytes(path, appended(path, text))


def appended(path: Path, text: str) -> bytes:
    """What ``append_text`` writes into ``path``: its content, then ``text``."""
    path = Path(path)
    check_target(path)
    try:
        old = path.read_bytes()  # a regular file: check_target refused anything else
    except FileNotFoundError:
        old = b""
    return old + text.encode("utf-8")


def refuse_inputs(out: Path, inputs: Iterable[Path]) -> None:
    """Refuse ``out`` before anything is read when it is one of ``inputs`` (by identity), which
    stay declared, so any later write over one of them is refused as well."""
    declare_inputs(inputs)
    check_target(out)
