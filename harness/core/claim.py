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
from dataclasses import dataclass, replace
from pathlib import Path

from harness.core.atomic import is_stale_temp, sweep_stale
from harness.core.options import UsageError

CLAIM_FILE = ".critpath-claim"


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
        return sorted(p for p in self.path.iterdir() if p.name != CLAIM_FILE and not is_stale_temp(p.name))

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
    made = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    while True:
        fd = _open_claim(path / CLAIM_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise DirectoryClaimed(f"{path} is in use by {holder}; wait for it, or choose another --out") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path / CLAIM_FILE).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file as we opened it: take the new one
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                             "argv": sys.argv, "started_at": _dt.datetime.now(_dt.timezone.utc)
                             .isoformat(timespec="seconds")}).encode() + b"\n")
    claim = Claim(path, fd, made)
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


def _read_holder(fd: int) -> str:
    """The holder as its claim file names it; the holder writes it just after it locks, so a
    claim refused in between reads nothing yet."""
    try:
        data = json.loads(os.pread(fd, 1 << 16, 0) or b"{}")
        argv = " ".join(str(a) for a in data.get("argv") or [])
        return (f"critpath {data['command']} (pid {data['pid']} on {data['host']}, started {data['started_at']}"
                + (f": {argv}" if argv else "") + ")")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "another critpath process (it has not written its name yet)"


@atexit.register
def _release_all() -> None:
    for claim in list(_HELD.values()):
        claim.release()
