"""Whole files written atomically, and never over a file the command read.

A file is written to a temporary beside it (same directory, so the rename cannot cross a file
system), flushed and fsynced, renamed over the target with ``os.replace``, and the directory is
fsynced so the rename itself survives a crash. A reader sees the old file or the new one, never a
half: a full disk or a kill leaves the old file where it was, and no temporary behind.

Appended files (``results.jsonl``) are not written here: they grow one fsynced line at a time
(``harness.core.store.append_record``).
"""
from __future__ import annotations

import json
import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator

from harness.core.options import UsageError


@contextmanager
def atomic_file(path: Path, mode: str = "wb") -> Iterator[IO]:
    """A file object that becomes ``path`` when the block ends without an error; on an error the
    target is left as it was and the temporary removed. ``mode`` is "wb" or "w" (UTF-8 text)."""
    path = Path(path)
    # O_EXCL and a random part: two writers of one target never share a temporary.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 less the umask, as open() gives
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        # A full disk: keep whatever was there before, and name the file.
        raise OSError(exc.errno, f"could not write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: Path, data: bytes) -> None:
    with atomic_file(path, "wb") as f:
        f.write(data)


def write_text(path: Path, text: str) -> None:
    """``text`` as UTF-8; a lone surrogate is an error here, so callers escape their text for its
    sink first (``harness.core.escape``)."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, data, indent: int = 2, sort_keys: bool = True, allow_nan: bool = True) -> None:
    """``data`` as JSON; ASCII-only, so any string (a lone surrogate too) gives valid UTF-8."""
    write_text(path, json.dumps(data, indent=indent, sort_keys=sort_keys, allow_nan=allow_nan, ensure_ascii=True)
               + "\n")


def refuse_inputs(out: Path, inputs: Iterable[Path], option: str = "--out") -> None:
    """Refuse to write ``out`` over a file the command reads: the same file by device and inode,
    so a symlink or hard link to an input is caught as well as the input's own path."""
    try:
        target = os.stat(out)
    except FileNotFoundError:
        return  # a new file cannot be an input
    for path in inputs:
        try:
            seen = os.stat(path)
        except FileNotFoundError:
            continue
        if (seen.st_dev, seen.st_ino) == (target.st_dev, target.st_ino):
            same = "" if Path(path) == Path(out) else f" (it is {path})"
            raise UsageError(f"{option} {out} is an input of this command{same}; choose another {option}")
