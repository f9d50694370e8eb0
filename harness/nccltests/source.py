"""Opening an nccl-tests output: a regular file within the import's limits, read as it is parsed.

The text log is handed to the parser one line at a time, so only its rows are held however long
the log is; the ``-J`` JSON file is read whole, bounded by its own limit. Both are hashed as they
are read: the digest names the import's run (``nccl-tests-<stem>-<digest>``) without a second read.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import BinaryIO, Iterator

from harness.core.inputfile import open_regular
from harness.nccltests.limits import MAX_JSON_BYTES, MAX_LINE_BYTES, MAX_TEXT_BYTES, MAX_TEXT_LINES
from harness.nccltests.parse import Parsed, parse_json, parse_text
from harness.nccltests.values import NcclTestsFormatError

WHAT = "nccl-tests output"


class _Reader:
    """The file's lines as bytes, each at most MAX_LINE_BYTES, the whole at most ``limit``."""

    def __init__(self, f: BinaryIO, path: Path) -> None:
        self.f, self.path = f, path
        self.hasher = hashlib.sha256()
        self.read_bytes = 0
        self.lines = 0

    def _count(self, data: bytes, limit: int) -> bytes:
        self.hasher.update(data)
        self.read_bytes += len(data)
        if self.read_bytes > limit:
            raise NcclTestsFormatError(f"{self.path}: more than {limit} bytes; {WHAT} is at most {limit} bytes "
                                       "(harness/nccltests/limits.py)")
        return data

    def line(self, limit: int) -> bytes:
        raw = self.f.readline(MAX_LINE_BYTES + 1)
        self.lines += 1
        if len(raw) > MAX_LINE_BYTES:
            raise NcclTestsFormatError(f"{self.path}:{self.lines}: a line of more than {MAX_LINE_BYTES} bytes; "
                                       f"no line of {WHAT} is that long")
        return self._count(raw, limit)

    def rest(self, limit: int) -> bytes:
        return self._count(self.f.read(limit - self.read_bytes + 1), limit)

    @property
    def digest(self) -> str:
        return self.hasher.hexdigest()


# What ends a line of the log: LF, CRLF, or a lone CR (a log written on or for an old Mac, or a
# progress line a terminal overwrote). Only these: str.splitlines also breaks at a form feed, a
# vertical tab, \x1c-\x1e, U+0085, U+2028 and U+2029, which editors, sed, grep -n and awk do not
# count, so every line number after one would name another line than the user's tools show.
_LINE_END = re.compile(r"\r\n|\r|\n")


def _split_lines(text: str) -> list[str]:
    """``text``'s lines without their ends; the end of the last is no line of its own."""
    lines = _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def _text_lines(reader: _Reader) -> Iterator[str]:
    """The log's lines, each ended by LF, CRLF or a lone CR (_LINE_END), so line numbers are those
    ``sed -n Np`` and ``grep -n`` give (a lone CR aside), however the file is read; at most
    MAX_TEXT_LINES."""
    number = 0
    while raw := reader.line(MAX_TEXT_BYTES):
        for line in _split_lines(raw.decode("utf-8", errors="replace")):
            number += 1
            if number > MAX_TEXT_LINES:
                raise NcclTestsFormatError(f"{reader.path}:{number}: more than {MAX_TEXT_LINES} lines; {WHAT} (text) "
                                           f"is at most {MAX_TEXT_LINES} lines (harness/nccltests/limits.py)")
            yield line


# A UTF-8 byte order mark, which some editors and Windows tools put first. The text log reader
# reads past it (its header is found on any line), so the JSON reader does too.
BOM = b"\xef\xbb\xbf"
# -J writes an object, so "{" opens JSON. "[" opens a JSON array (JSON still, which gets the JSON
# reader's word on what it is) or a text log's first line: a launcher's tag (Open MPI's
# "[1,0]<stdout>:"), Open MPI's own "[host:pid] ..." messages, UCX's "[1712345678.123] [host]".
# No rule on the line tells them all apart, so such a file is JSON only if it parses as JSON.
JSON_OBJECT, JSON_ARRAY = b"{", b"["


def _is_json(f: BinaryIO) -> bool:
    """The first byte after a byte order mark that is not white space opens a JSON object, or an
    array that the whole file is (the file is regular, so it can be read again)."""
    first = True
    while chunk := f.read(1 << 16):
        if first:
            chunk, first = chunk.removeprefix(BOM), False
        if chunk.strip():
            opener = chunk.lstrip()[:1]
            f.seek(0)
            if opener == JSON_ARRAY:
                opener = JSON_OBJECT if _parses(f.read(MAX_JSON_BYTES + 1).removeprefix(BOM)) else b""
                f.seek(0)
            return opener == JSON_OBJECT
    f.seek(0)
    return False


def _parses(data: bytes) -> bool:
    """Whether ``data`` is one JSON document (more than MAX_JSON_BYTES is read cut short: not)."""
    try:
        json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return True


def read_output(path: Path) -> tuple[Parsed, str]:
    """The output at ``path`` parsed (its collective not yet detected), and its SHA-256."""
    path = Path(path)
    try:
        f = open_regular(path, WHAT)
    except OSError as exc:  # absent, or unreadable: InputFileError (a FIFO, a device) is a CannotRun
        raise NcclTestsFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size > max(MAX_JSON_BYTES, MAX_TEXT_BYTES):  # refused before a byte is read, even to tell its kind
            raise NcclTestsFormatError(f"{path}: {size} bytes; {WHAT} is at most {MAX_JSON_BYTES} bytes (JSON) "
                                       f"or {MAX_TEXT_BYTES} (text) (harness/nccltests/limits.py)")
        json_file = _is_json(f)
        limit = MAX_JSON_BYTES if json_file else MAX_TEXT_BYTES
        if size > limit:  # refused before it is read; a file that grows as it is read is caught by _Reader
            raise NcclTestsFormatError(f"{path}: {size} bytes; {WHAT} ({'JSON' if json_file else 'text'}) is at "
                                       f"most {limit} bytes (harness/nccltests/limits.py)")
        reader = _Reader(f, path)
        if json_file:
            whole = reader.rest(MAX_JSON_BYTES).removeprefix(BOM)  # hashed as read, mark and all
            parsed = parse_json(whole.decode("utf-8", errors="replace"), str(path))
        else:
            parsed = parse_text(_text_lines(reader), str(path))
        return parsed, reader.digest
