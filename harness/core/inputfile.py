"""Opening an input so that its kind and its size are checked before a byte of it is parsed.

A reader that calls ``read_bytes()`` on whatever path it is given can be pointed at ``/dev/zero``
(it grows without bound), at a FIFO (``open`` waits for a writer forever) or at a multi-gigabyte
file. Every input critpath reads (results, run.json, profiles, rules, gate configs, baselines,
nccl-tests logs, traces) is opened here: it must be a regular file, it is opened without waiting
(``O_NONBLOCK``, so a FIFO is refused rather than waited on), and a whole read is bounded by a
limit that each reader declares and that the error names.

Every file opened here is remembered by its identity (device and inode), and so is every file a
command declares as its input before it reads it (``declare_inputs``): ``harness.core.atomic``
refuses to write over any of them, whatever path the output is given by (the same path, a
symlink, a hard link). A command need not list its inputs for that to hold.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO, Iterable, Optional

from harness.core.options import CannotRun

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class InputFileError(CannotRun):
    """An input that is not a regular file, is larger than its reader's limit, or cannot be opened;
    the message starts with the path."""


# (st_dev, st_ino) -> the path it was read by, for every input this process has opened or declared.
_INPUTS: dict[tuple[int, int], Path] = {}


def kind(mode: int) -> str:
    """What a file that is not a regular one is, in words: "a FIFO", "a directory"."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _remember(st: os.stat_result, path: Path) -> None:
    _INPUTS.setdefault((st.st_dev, st.st_ino), path)


def declare_inputs(paths: Iterable[Path]) -> None:
    """Input files a command knows before it reads them (a run's: ``store.run_inputs``)."""
    for path in map(Path, paths):
        try:
            st = os.stat(path)
        except OSError:
            continue  # what cannot be read is not an input; its reader says why
        if stat.S_ISREG(st.st_mode):
            _remember(st, path)


def input_at(st: os.stat_result) -> Optional[Path]:
    """The path an input with this identity was read by, or None when it is none."""
    return _INPUTS.get((st.st_dev, st.st_ino))


def open_regular(path: Path, what: str) -> BinaryIO:
    """``path`` opened for binary reading, or InputFileError when it is not a regular file.
    FileNotFoundError and NotADirectoryError pass through: each reader words "absent" its own way."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):  # absent, as a path below a file is
        raise
    except OSError as exc:
        raise InputFileError(f"{path}: cannot open the {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(f"{path}: {kind(st.st_mode)}, not a regular file: a {what} is read from a file")
        _remember(st, path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: Path, what: str, max_bytes: int) -> bytes:
    """The whole of ``path`` when it is a regular file of at most ``max_bytes``; InputFileError
    naming the limit otherwise (a file that grows while it is read is caught too)."""
    with open_regular(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        raw = f.read(max_bytes + 1) if size <= max_bytes else b""
    if size > max_bytes or len(raw) > max_bytes:
        raise InputFileError(f"{path}: {max(size, len(raw))} bytes; a {what} is at most {max_bytes} bytes")
    return raw
