"""critpath's own file names in an output directory, and the temporaries its writers leave.

Two kinds of file are critpath's bookkeeping rather than output: the claim file of a directory
(``.critpath-claim``, ``harness.core.claim``) and a writer's temporary
(``.critpath-PID-HEX8.tmp``, ``harness.core.atomic``). Both start with ``.critpath-``, a name no
command writes as an output (``reserved``): an output written over a live holder's claim file
would let a second process claim the directory.

A writer holds an ``flock`` on its temporary from the moment it exists until it is renamed or
removed. The next writer into the directory sweeps a temporary whose lock it can take: its writer
is gone (the kernel drops the lock with its process, SIGKILL included), whatever the pid in its
name says. A pid cannot say it: a live writer in another pid namespace looks dead from here, and a
dead writer's pid may since be a live unrelated process. The pid in the name only keeps two
processes' names apart.
"""
from __future__ import annotations

import fcntl
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Optional

PREFIX = ".critpath-"
CLAIM_FILE = PREFIX + "claim"

# This writer's temporaries, exactly as it names them. 0.x's (``.NAME.PID.RANDOM.tmp``) are not
# swept: that shape is loose enough to be a user's own file (``.thesis.2024.abcdef.tmp``).
_TEMP = re.compile(re.escape(PREFIX) + r"(\d+)-[0-9a-f]{8}\.tmp")


def reserved(name: str) -> bool:
    """A name critpath keeps for its own bookkeeping, never an output's."""
    return name.startswith(PREFIX)


def is_temp_name(name: str) -> bool:
    return _TEMP.fullmatch(name) is not None


def new_temp(directory: Path) -> tuple[Path, int]:
    """A new temporary in ``directory``, open for writing and locked for as long as the fd is
    open. O_EXCL and a random part: two writers never share one."""
    while True:
        tmp = Path(directory) / f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)  # less the umask, as open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # A sweep may have locked and removed it between the open and the lock: start again.
            if os.fstat(fd).st_nlink > 0:
                return tmp, fd
        except BaseException:
            os.close(fd)
            discard(tmp)
            raise
        os.close(fd)


def _abandoned(path: Path) -> Optional[int]:
    """An fd holding the lock of ``path`` when it is a temporary whose writer is gone; None when
    its writer holds it, or it is not a regular file critpath made (a link is nobody's temporary)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
    except OSError:
        pass  # EWOULDBLOCK: its writer holds it
    os.close(fd)
    return None


def is_abandoned_temp(path: Path) -> bool:
    """A temporary of a writer that is no longer alive (a SIGKILL left it)."""
    path = Path(path)
    if not is_temp_name(path.name):
        return False
    fd = _abandoned(path)
    if fd is None:
        return False
    os.close(fd)
    return True


def sweep_stale(directory: Path) -> None:
    """Remove the temporaries of dead writers in ``directory``; what cannot be removed stays."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in filter(is_temp_name, names):
        path = Path(directory) / name
        fd = _abandoned(path)
        if fd is None:
            continue
        try:
            # Still the file whose lock is held here: the name is not removed from under a writer.
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                discard(path)
        except OSError:
            pass
        finally:
            os.close(fd)


def discard(path: Path) -> None:
    """Remove a temporary; never raises, so the error that made it go is the one reported."""
    try:
        os.unlink(path)
    except OSError:
        pass
