"""Whole files written atomically, and never over a file the command read.

A file is written to a temporary beside it (same directory, so the rename cannot cross a file
system), flushed and fsynced, renamed over the target with ``os.replace``, and the directory is
fsynced so the rename itself survives a crash. A reader sees the old file or the new one, never a
half: a full disk, an exception or a SIGTERM (the command line turns it into one) leaves the old
file where it was, and no temporary behind.

Before a byte is written the target is checked: it must not be a file this process read or
declared as an input (``harness.core.inputfile``), by identity, so a symlink or hard link to an
input is caught too; and an existing target must be a regular file, as ``os.replace`` over a FIFO
or ``/dev/null`` would put a file where the device or pipe was.

A temporary is named ``.critpath-PID-RANDOM.tmp``: its length does not grow with the target's (a
target of 250 bytes still has a temporary that fits NAME_MAX), and the pid in it lets the next
writer into that directory remove one that a SIGKILL left (``sweep_stale``).

Appended files (``results.jsonl``) are not written here: they grow one fsynced line at a time
(``harness.core.store.append_record``). A text appended to a summary file (``append_text``) is
read, extended and replaced whole.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator

from harness.core.inputfile import declare_inputs, input_at, kind
from harness.core.options import UsageError

NAME_MAX = 255  # bytes in one file name (Linux, macOS): a name is cut by bytes, not characters


def fit_name(name: str, max_bytes: int = NAME_MAX) -> str:
    """``name`` cut to at most ``max_bytes`` of UTF-8, never inside a character: 85 CJK characters
    are 255 bytes, so a cut by characters still fails with ENAMETOOLONG."""
    return name.encode("utf-8", "surrogateescape")[:max_bytes].decode("utf-8", "ignore")


# This writer's temporaries, exactly as it names them. 0.x's (``.NAME.PID.RANDOM.tmp``) are not
# swept: that shape is loose enough to be a user's own file (``.thesis.2024.abcdef.tmp``).
_TEMP = re.compile(r"\.critpath-(\d+)-[0-9a-f]{8}\.tmp")


def check_target(path: Path, updates: bool = False) -> None:
    """UsageError when ``path`` may not be written: an input of this command, or an existing file
    that is not a regular one. A missing path is fine. ``updates``: the command's own state
    document, which it reads and writes back by design (gate-power's power.json), may be replaced."""
    path = Path(path)
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.islink(path):  # dangling: the rename would put a file where the link was
            raise UsageError(f"{path} is a symbolic link to nothing; give the path of a new or a regular file") from None
        return
    except OSError as exc:
        raise OSError(exc.errno, f"could not write {path}: {exc.strerror or exc}") from None
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


def is_stale_temp(name: str) -> bool:
    """A temporary of a writer that is no longer alive (a SIGKILL left it)."""
    match = _TEMP.fullmatch(name)
    return match is not None and not _alive(int(match.group(1)))


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: alive
    return True


def sweep_stale(directory: Path) -> None:
    """Remove the temporaries of dead writers in ``directory``; what cannot be removed stays."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if is_stale_temp(name):
            _discard(Path(directory) / name)


def _discard(path: Path) -> None:
    """Remove a temporary; never raises, so the error that made it go is the one reported."""
    try:
        os.unlink(path)
    except OSError:
        pass


@contextmanager
def atomic_file(path: Path, mode: str = "wb", updates: bool = False) -> Iterator[IO]:
    """A file object that becomes ``path`` when the block ends without an error; on an error the
    target is left as it was and the temporary removed. ``mode`` is "wb" or "w" (UTF-8 text);
    ``updates`` as for ``check_target``."""
    path = Path(path)
    check_target(path, updates)
    sweep_stale(path.parent)
    # O_EXCL and a random part: two writers of one target never share a temporary.
    tmp = path.with_name(f".critpath-{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 less the umask, as open() gives
    except OSError as exc:
        raise OSError(exc.errno, f"could not write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        check_target(path, updates)  # an input read while the block ran, or a FIFO made meanwhile
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        _discard(tmp)
        # A full disk: keep whatever was there before, and name the file.
        raise OSError(exc.errno, f"could not write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        _discard(tmp)
        raise


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: Path, data: bytes, updates: bool = False) -> None:
    with atomic_file(path, "wb", updates) as f:
        f.write(data)


def write_text(path: Path, text: str, updates: bool = False) -> None:
    """``text`` as UTF-8; a lone surrogate is an error here, so callers escape their text for its
    sink first (``harness.core.escape``)."""
    write_bytes(path, text.encode("utf-8"), updates)


def write_json(path: Path, data, indent: int = 2, sort_keys: bool = True, allow_nan: bool = True,
               updates: bool = False) -> None:
    """``data`` as JSON; ASCII-only, so any string (a lone surrogate too) gives valid UTF-8."""
    write_text(path, json.dumps(data, indent=indent, sort_keys=sort_keys, allow_nan=allow_nan, ensure_ascii=True)
               + "\n", updates)


def append_text(path: Path, text: str) -> None:
    """``text`` added at the end of ``path`` (a CI step summary collects several steps): the old
    content and the new are written whole into a temporary that replaces it, so a kill leaves the
    old file as it was, never half a step."""
    path = Path(path)
    check_target(path)
    try:
        old = path.read_bytes()  # a regular file: check_target refused anything else
    except FileNotFoundError:
        old = b""
    write_bytes(path, old + text.encode("utf-8"))


def refuse_inputs(out: Path, inputs: Iterable[Path]) -> None:
    """Refuse ``out`` before anything is read when it is one of ``inputs`` (by identity), which
    stay declared, so any later write over one of them is refused as well."""
    declare_inputs(inputs)
    check_target(out)
