"""Opening an input so that its kind and its size are checked before a byte of it is parsed.

A reader that calls ``read_bytes()`` on whatever path it is given can be pointed at ``/dev/zero``
(it grows without bound), at a FIFO (``open`` waits for a writer forever) or at a multi-gigabyte
file. Every input critpath reads (results, run.json, profiles, rules, gate configs, baselines,
nccl-tests logs, traces) is opened here: it must be a regular file, it is opened without waiting
(``O_NONBLOCK``, so a FIFO is refused rather than waited on), and a whole read is bounded by a
limit that each reader declares and that the error names.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from harness.core.options import CannotRun

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class InputFileError(CannotRun):
    """An input that is not a regular file, is larger than its reader's limit, or cannot be opened;
    the message starts with the path."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


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
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputFileError(f"{path}: {_kind(mode)}, not a regular file: a {what} is read from a file")
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
