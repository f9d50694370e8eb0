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

A claim covers the tree below its directory. A claim, or a file written into a directory this
process does not hold, is refused while another live process holds any directory above it (its
parents up to the root, the path resolved first, so a link to a held directory is no way round):
``run --out G/inner`` while ``run --out G`` runs would write into G's tree. The other way round, a
claim is refused while another live process holds a directory below it, found by a walk of at
most ``BELOW_DEPTH`` levels and ``BELOW_DIRS`` directories (a larger tree is looked into that far
and no further: an --out is most often a fresh directory, or a command's own). The claim is taken
first and the tree looked at after, so of two claims made at once in one tree one at least is
refused. A claim file is asked with a shared lock, given up at once: a claim of that directory in
that instant is refused, as one made while a file is written there is.

The processes a holder started itself are not refused: the gate holds its --out and starts
workers and runs that claim directories below it (as gate-power does its gates, and history its
runs). A directory above is theirs to write below when the pid its claim file names, on this
host and in this process's PID namespace (two containers of one pod can share a host name, a
volume and pid numbers), is this process's parent, or the parent of a parent (``/proc``, at most ``MAX_ANCESTRY``
steps up; without ``/proc``, the parent only). A process the holder did not start has no such
ancestor, so it cannot pass by accident. Nothing is handed down in the environment: a variable
would be inherited by whatever the holder starts, so it would say no more than this does, and a
gate of an older commit (gate-power runs its gates from the base's tree) would hand nothing down
while its newer side's workers must still write below its --out.

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
from harness.core.procstat import PPID_FIELD, stat_fields
from harness.core.scale import PID_MAX
from harness.core.temps import CLAIM_FILE, is_abandoned_temp, reserved, sweep_stale
from harness.core.walk import WalkError, walk_bounded

# What a claim critpath writes holds: six fields (pid, host, command, argv, started_at and
# pid_namespace), argv the longest (a command line of many --case),
# a list of strings in an object. Read at most this much of the file; anything else is not one.
MAX_CLAIM_BYTES = 1 << 16
CLAIM_LIMITS = JsonLimits(keys=6, values=MAX_CLAIM_BYTES, depth=2)
# The fields a holder is named by, and their types (the pid is judged apart: "which is not a pid").
CLAIM_FIELDS = {"pid": object, "host": str, "command": str, "started_at": str}
# Below a claim, how far other holders are looked for: a gate-power's measurement holds its gates'
# workers' rounds six levels down (gates/cell/trial/side/gen/round), a history a run per commit.
BELOW_DEPTH = 8
BELOW_DIRS = 4096
# How many parents of this process may be the holder above it that started it: gate-power, its
# gate, a worker are three; a shell, a terminal, a session manager and init a few more.
MAX_ANCESTRY = 64


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
                _remove_if_empty(self.path)  # one that holds what the command wrote is kept
        finally:
            os.close(self.fd)
            self.fd = -1
            _HELD.pop(_key(self.path), None)


_HELD: dict[str, Claim] = {}  # this process's claims, by directory: claiming one twice is a no-op


def _key(path: Path) -> str:
    return os.path.realpath(path)


_KIND_OF_MODE = {stat.S_IFREG: "a file", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
                 stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}


def _non_directory_kind(path: Path) -> Optional[str]:
    """What ``path`` is when it exists as anything but a directory (a link to one counts as one);
    None when it is a directory or is missing."""
    try:
        own = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(own):
        return None
    if not stat.S_ISLNK(own):
        return _KIND_OF_MODE.get(stat.S_IFMT(own), "something else")
    try:
        target = os.stat(path).st_mode
    except OSError:
        return "a dangling link"
    if stat.S_ISDIR(target):
        return None
    return "a link to " + _KIND_OF_MODE.get(stat.S_IFMT(target), "something else")


def refuse_non_directory(path: Path, advice: str) -> None:
    """UsageError naming what ``path``, or the nearest of its parents in the way, is when it exists
    as anything but a directory; mkdir's own refusal would say only "File exists" or "Not a
    directory", which names neither the kind nor the remedy."""
    for candidate in (path, *path.parents):
        kind = _non_directory_kind(candidate)
        if kind is not None:
            where = "" if candidate == path else f" (its parent {candidate})"
            raise UsageError(f"{path}{where}: is {kind}, not a directory; {advice}")


def claim_dir(path: Path, command: str, option: str = "--out") -> Claim:
    """Create ``path`` if it is missing and hold it until ``release`` (or the ``with`` block's end,
    or the process's); DirectoryClaimed naming the holder when another live process holds it.
    ``option``: the command's option that named the directory, which a refusal says to change."""
    path = Path(path)
    advice = f"choose another {option}"
    held = _HELD.get(_key(path))
    if held is not None:
        return replace(held, fresh=False)
    if reserved(path.name):
        raise UsageError(f"{path}: {path.name} is a name critpath keeps for its own bookkeeping; {advice}")
    above = held_above(path.parent)
    if above is not None:
        refuse_links_below(above, path.parent)
    refuse_held_above(path, advice)  # before anything is made below it
    made = not path.exists()
    refuse_non_directory(path, advice)
    path.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            fd = _open_claim(path / CLAIM_FILE)
        except (OSError, UsageError):
            if made:  # a claim file that cannot be made (a name past PATH_MAX) leaves no empty directory
                _remove_if_empty(path)
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            refusal = _in_use(path, fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise DirectoryClaimed(f"{refusal}; wait for it, or {advice}") from None
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
                                 .isoformat(timespec="seconds"), "pid_namespace": pid_namespace()}).encode() + b"\n")
    except OSError as exc:
        # A full disk: no claim file stays behind (nor the directory, if this made it), and the
        # error names the file that could not be written.
        claim.release()
        raise OSError(exc.errno, f"could not claim {path}: {path / CLAIM_FILE}: {exc.strerror or exc}") from None
    try:
        # Again now that it is held: a claim above made since the first look, or one below, is
        # refused here, and a claim made after this one's finds this one.
        refuse_held_above(path, advice)
        _refuse_held_below(path, advice)
    except DirectoryClaimed:
        claim.release()
        raise
    _HELD[_key(path)] = claim
    return claim


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass  # something is in it now: not ours to remove


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


def remove_abandoned(directory: Path) -> bool:
    """Remove ``directory``'s claim file when no process holds its lock: one a SIGKILLed holder
    left (a gate's worker, killed when the gate stops or gives up on it), which blocks nobody but
    is clutter in what the killer keeps. Only a regular file of one link is removed, and only while
    this call holds its lock, so a live holder's claim is never touched. True when one was."""
    file = Path(directory) / CLAIM_FILE
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # none there, or a link, which is not critpath's to remove
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: its holder lives
        if os.stat(file, follow_symlinks=False).st_ino != st.st_ino:
            return False  # replaced meanwhile: a new claim's
        file.unlink()
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def claim_state(directory: Path) -> str:
    """What ``directory``'s claim says of the command that claimed it: "held" (it runs), "left"
    (its claim stayed behind: it was killed), or "" (none: it released it when it ended, or never
    claimed it). Read only: the lock is tried shared and given back at once."""
    try:
        fd = os.open(Path(directory) / CLAIM_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return "held"
    finally:
        os.close(fd)  # closing gives a lock taken back
    return "left"


def _in_use(directory: Path, fd: int) -> str:
    return (f"{directory} is in use: another process holds the lock on {directory / CLAIM_FILE}; "
            + _named_holder(fd))


def _holder(fd: int) -> Optional[dict]:
    """What the claim file says of its holder, when it is a claim critpath wrote; else None."""
    try:
        data = loads_strict(os.pread(fd, MAX_CLAIM_BYTES, 0), CLAIM_FILE, CLAIM_LIMITS)
    except (OSError, JsonFileError):
        return None
    if (not isinstance(data, dict) or any(k not in data or not isinstance(data[k], t) for k, t in CLAIM_FIELDS.items())
            or not isinstance(data.get("argv", []), list)):
        return None
    return data


def _named_holder(fd: int) -> str:
    """Who the claim file names, and whether that pid runs on this host: the holder writes its
    name just after it locks, and a process that is not critpath may hold the lock."""
    data = _holder(fd)
    if data is None:
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


def link_refused(path: Path, top: Path) -> str:
    """Why a symbolic link at ``path`` below ``top`` is not written through."""
    return (f"{path} is a symbolic link (to {os.readlink(path)}); critpath writes below {top} only into files and "
            "directories of its own, never through a link to elsewhere: remove it")


def refuse_links_below(top: Path, directory: Path) -> None:
    """UsageError naming the first symbolic link between ``top`` (a directory this process holds)
    and ``directory``: what is written there would land outside the directory that was claimed."""
    at = Path(os.path.abspath(top))
    for part in Path(os.path.abspath(directory)).relative_to(at).parts:
        at = at / part
        if os.path.islink(at):
            raise UsageError(link_refused(at, top))


def _lock_shared(directory: Path) -> tuple[Optional[int], bool]:
    """(fd, held): ``fd`` open on ``directory``'s claim file, None when it has none (a link or a
    file that is not regular is no claim critpath made: ``claim_dir`` refuses it to a claimer);
    ``held`` when another process holds the directory, else ``fd`` holds a shared lock on it."""
    try:
        fd = os.open(Path(directory) / CLAIM_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None, False
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None, False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
            return fd, True
        os.close(fd)
        raise
    return fd, False


def _shared(directory: Path) -> Optional[int]:
    """A shared lock on ``directory``'s claim file, or None when it has none; DirectoryClaimed
    when another process holds the directory."""
    fd, held = _lock_shared(directory)
    if held:
        refusal = _in_use(directory, fd)
        os.close(fd)
        raise DirectoryClaimed(f"{refusal}; wait for it, or write elsewhere")
    return fd


def _ancestry() -> Iterator[int]:
    """This process's parent, its parent's parent, ... (at most MAX_ANCESTRY, init not included)."""
    pid = os.getppid()
    for _ in range(MAX_ANCESTRY):
        if pid <= 1:
            return
        yield pid
        fields = stat_fields(pid)
        try:
            pid = int(fields[PPID_FIELD])
        except (TypeError, ValueError, IndexError):
            return  # no /proc (or the process just ended): the parent was all there is to know


def pid_namespace() -> Optional[str]:
    """This process's PID namespace (``pid:[inode]``), None where /proc does not say."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _started_by_holder(fd: int) -> bool:
    """The claim's holder (as its file names it, on this host and in this PID namespace) started
    this process: it is this process's parent or an ancestor of it. Pids of two namespaces (two
    containers of one pod share a host name and a volume) are different processes' numbers."""
    data = _holder(fd)
    if data is None or data["host"] != socket.gethostname() or data.get("pid_namespace") != pid_namespace():
        return False
    pid = data["pid"]
    return isinstance(pid, int) and not isinstance(pid, bool) and pid in _ancestry()


def _refuse_held(directory: Path, what: str, advice: str) -> None:
    """DirectoryClaimed when another live process, one that did not start this one, holds
    ``directory``: ``what`` says where it lies from the path asked for."""
    if _key(directory) in _HELD:
        return  # this process's own: no other process holds it
    fd, held = _lock_shared(directory)
    if fd is None:
        return
    try:
        if held and not _started_by_holder(fd):
            raise DirectoryClaimed(f"{what}: {_in_use(directory, fd)}; wait for it, or {advice}")
    finally:
        os.close(fd)


def refuse_held_above(path: Path, advice: str) -> None:
    """DirectoryClaimed when another live process holds a directory above ``path`` (resolved: the
    parents where its files would land, up to the root) and did not start this one. The one rule
    for "in or below another's claim": ``claim_dir`` and ``writing_into`` apply it, and so does a
    command that checks a file's path before minutes of work (a gate's ``--markdown``), where a
    refusal when the file is written would lose the work."""
    for above in Path(os.path.realpath(path)).parents:
        _refuse_held(above, f"{path} lies below another process's output", advice)


def _refuse_held_below(path: Path, advice: str) -> None:
    """DirectoryClaimed when another live process holds a directory below ``path``, within
    BELOW_DEPTH levels and BELOW_DIRS directories (a larger tree is looked into that far)."""
    try:
        for directory, names in walk_bounded(path, "a claim", BELOW_DEPTH, BELOW_DIRS, prune=True):
            if CLAIM_FILE in names and directory != path:
                _refuse_held(directory, f"{path} holds another process's output", advice)
    except WalkError:
        return  # past BELOW_DIRS: the rest is not looked into


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
    refuse_held_above(directory, "write elsewhere")
    fd = _shared(directory)

    def confirm() -> None:
        refuse_held_above(directory, "write elsewhere")
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
