"""An output directory claimed by one process at a time: ``claim_dir(path, command)``.

Every command that writes a directory (``--out`` of run, gate, compare, history, report, import,
model, gate-power) claims it before it looks inside: an exclusive ``flock`` on ``.critpath-claim``
there, held until the process exits. Checking first and creating after let two processes both see
an empty directory and both write it; the lock is taken in one system call, so one of two wins
and the other is refused at once, naming the holder (pid, host, command, when it started).

The kernel drops the lock when its process dies, SIGKILL included, so a stale claim never blocks a
retry: the next claim takes the same file over. A holder removes the file when it is done (and the
directory too, if it made it and left it empty); a claim that finds its file gone or replaced in
between tries again, so two processes never hold two files of one path.

The claim file is opened without following a symlink, and one that is not a regular file of one
link is refused, never truncated: a ``.critpath-claim`` planted as a link to a results file (or to
any file the user can write) must not have it overwritten with the claim's JSON.

A refusal says what is known: the lock is held (the kernel says so), and who the file names as
its holder, with whether that pid runs here. The file is what its last writer put there, so a lock
held by a process that is not critpath (or that locked it before writing its name) is not
reported as the file's holder.

Files written into a directory go through ``writing_into`` (``harness.core.atomic`` calls it for
every file): into a directory this process holds, but never through a symbolic link below it (a
``plots`` planted as a link to elsewhere); into any other directory only while no other process
holds it, with a shared lock on its claim file while the file is written, so a command that
writes one file (``export --out``) is refused by a live holder and refuses a claimer meanwhile.
"""
from __future__ import annotations

import atexit
import datetime as _dt
import errno
import fcntl
import json
import os
import socket
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Optional

from harness.core.jsonfile import JsonFileError, JsonLimits, loads_strict
from harness.core.options import UsageError
from harness.core.scale import PID_MAX
from harness.core.temps import CLAIM_FILE, is_abandoned_temp, reserved, sweep_stale

# What a claim critpath writes holds: six fields, argv the longest (a command line of many --case),
# a list of strings in an object. Read at most this much of the file; anything else is not one.
MAX_CLAIM_BYTES = 1 << 16
CLAIM_LIMITS = JsonLimits(keys=6, values=MAX_CLAIM_BYTES, depth=2)
# The fields a holder is named by, and their types (the pid is judged apart: "which is not a pid").
CLAIM_FIELDS = {"pid": object, "host": str, "command": str, "started_at": str}


class DirectoryClaimed(UsageError):
    """Another live process holds the directory; the message names it."""


@dataclass
class Claim:
    """A held directory; as a context manager it is given up when the block ends, unless this
    process held it already before (a run's directory that its acceptance then writes into)."""

    path: Path  # the directory
    fd: int
    made_dir: bool  # this claim created the directory: removed again when left empty
    fresh: bool = True  # False: the process held it before; release() leaves it to the first

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    @property
    def file(self) -> Path:
        return self.path / CLAIM_FILE

    def contents(self) -> list[Path]:
        """What the directory holds besides the claim and the temporaries of dead writers (removed
        here): a command that needs it empty asks this, and a retry after a kill finds it empty."""
        sweep_stale(self.path)
        return sorted(p for p in self.path.iterdir() if p.name != CLAIM_FILE and not is_abandoned_temp(p))

    def release(self) -> None:
        """Give the directory up: the claim file goes, then the lock (in that order, so no
        other process can lock a file that is about to be removed)."""
        if self.fd < 0 or not self.fresh:
            return
        try:
            self.file.unlink(missing_ok=True)
            if self.made_dir:
                try:
                    self.path.rmdir()
                except OSError:
                    pass  # it holds what the command wrote: kept
        finally:
            os.close(self.fd)
            self.fd = -1
            _HELD.pop(_key(self.path), None)


_HELD: dict[str, Claim] = {}  # this process's claims, by directory: claiming one twice is a no-op


def _key(path: Path) -> str:
    return os.path.realpath(path)


def claim_dir(path: Path, command: str) -> Claim:
    """Create ``path`` if it is missing and hold it until ``release`` (or the ``with`` block's end,
    or the process's); DirectoryClaimed naming the holder when another live process holds it."""
    path = Path(path)
    held = _HELD.get(_key(path))
    if held is not None:
        return replace(held, fresh=False)
    if reserved(path.name):
        raise UsageError(f"{path}: {path.name} is a name critpath keeps for its own bookkeeping; choose another --out")
    above = held_above(path.parent)
    if above is not None:
        refuse_links_below(above, path.parent)
    made = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    while True:
        fd = _open_claim(path / CLAIM_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            refusal = _in_use(path, fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise DirectoryClaimed(f"{refusal}; wait for it, or choose another --out") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path / CLAIM_FILE).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file as we opened it: take the new one
    claim = Claim(path, fd, made)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                                 "argv": sys.argv, "started_at": _dt.datetime.now(_dt.timezone.utc)
                                 .isoformat(timespec="seconds")}).encode() + b"\n")
    except OSError as exc:
        # A full disk: no claim file stays behind (nor the directory, if this made it), and the
        # error names the file that could not be written.
        claim.release()
        raise OSError(exc.errno, f"could not claim {path}: {path / CLAIM_FILE}: {exc.strerror or exc}") from None
    _HELD[_key(path)] = claim
    return claim


def _open_claim(file: Path) -> int:
    """The claim file, opened for the lock: never through a symlink, never a FIFO or device (no
    wait on one either), never a file with another name (a hard link)."""
    try:
        fd = os.open(file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"{file} is a symbolic link, not a claim critpath made; remove it") from None
        raise OSError(exc.errno, f"could not claim {file.parent}: {file}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} links"
        raise UsageError(f"{file} is {what}, not a claim critpath made; remove it")
    return fd


def _in_use(directory: Path, fd: int) -> str:
    return (f"{directory} is in use: another process holds the lock on {directory / CLAIM_FILE}; "
            + _named_holder(fd))


def _named_holder(fd: int) -> str:
    """Who the claim file names, and whether that pid runs on this host: the holder writes its
    name just after it locks, and a process that is not critpath may hold the lock."""
    try:
        data = loads_strict(os.pread(fd, MAX_CLAIM_BYTES, 0), CLAIM_FILE, CLAIM_LIMITS)
    except (OSError, JsonFileError):
        data = None
    if (not isinstance(data, dict) or any(k not in data or not isinstance(data[k], t) for k, t in CLAIM_FIELDS.items())
            or not isinstance(data.get("argv", []), list)):
        return "the file names no holder (one that has only just locked it, or one that is not critpath)"
    argv = " ".join(str(a) for a in data.get("argv", []))
    pid, host = data["pid"], data["host"]
    named = (f"the file names critpath {data['command']} (pid {pid} on {host}, started {data['started_at']}"
             + (f": {argv}" if argv else "") + ")")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < PID_MAX:
        return f"{named}, which is not a pid"
    if host != socket.gethostname():
        return f"{named}, on another host"
    if _alive(pid):
        return f"{named}, which is running"
    return f"{named}, but no process {pid} runs here: the lock is held by a process the file does not name"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: alive
    return True


def held_above(directory: Path) -> Optional[Path]:
    """The nearest of ``directory`` and its parents (as written, links not resolved) that this
    process holds; None when it holds none of them."""
    if not _HELD:
        return None
    at = Path(os.path.abspath(directory))
    return next((a for a in (at, *at.parents) if _key(a) in _HELD), None)


def refuse_links_below(top: Path, directory: Path) -> None:
    """UsageError naming the first symbolic link between ``top`` (a directory this process holds)
    and ``directory``: what is written there would land outside the directory that was claimed."""
    at = Path(os.path.abspath(top))
    for part in Path(os.path.abspath(directory)).relative_to(at).parts:
        at = at / part
        if os.path.islink(at):
            raise UsageError(f"{at} is a symbolic link (to {os.readlink(at)}); critpath writes below {top} only "
                             "into directories, never through a link to elsewhere: remove it")


def _shared(directory: Path) -> Optional[int]:
    """A shared lock on ``directory``'s claim file, or None when it has none (a link or a file
    that is not regular is no claim critpath made: ``claim_dir`` refuses it to a claimer);
    DirectoryClaimed when another process holds the directory."""
    try:
        fd = os.open(Path(directory) / CLAIM_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        refusal = _in_use(directory, fd) if exc.errno in (errno.EWOULDBLOCK, errno.EACCES) else None
        os.close(fd)
        if refusal is None:
            raise
        raise DirectoryClaimed(f"{refusal}; wait for it, or write elsewhere") from None
    return fd


@contextmanager
def writing_into(directory: Path) -> Iterator[Callable[[], None]]:
    """While a file is written into ``directory``: refused when another process holds it, or when
    it lies below a directory this process holds through a symbolic link. Yields a check to call
    just before the file takes its name: a claim made while it was written refuses it too."""
    directory = Path(directory)
    above = held_above(directory)
    if above is not None:
        refuse_links_below(above, directory)
        yield lambda: None
        return
    fd = _shared(directory)

    def confirm() -> None:
        if fd is None:
            late = _shared(directory)
            if late is not None:
                os.close(late)

    try:
        yield confirm
    finally:
        if fd is not None:
            os.close(fd)


@atexit.register
def _release_all() -> None:
    for claim in list(_HELD.values()):
        claim.release()
