"""The process's stdout and stderr, escaped for the terminal whatever is written to them.

A command prints paths, host names, profile names, case errors and other programs' output; any of
them can hold an escape sequence that retitles the terminal or a bidirectional override that
reorders the line. Escaping each print site was tried, and a site was always forgotten, so the
command line wraps both streams once (``escaped_streams``): every ``print``, argparse's messages
and a traceback go through ``for_terminal``. rich draws its own colours and cursor moves, which
must reach the terminal as they are: its consoles (``harness.core.console``) escape the text they
draw and write the result through ``trusted``, which only encodes.

Both encode with ``backslashreplace``: under ``LC_ALL=C`` a ``—`` or a U+200B reads ``\\u2014``
instead of ending the command with a UnicodeEncodeError.
"""
from __future__ import annotations

import codecs
import io
import os
import sys
from contextlib import contextmanager
from typing import Iterator, TextIO

from harness.core.escape import for_terminal


class _Encoded(io.TextIOBase):
    """``raw`` with what its encoding cannot hold written as ``\\uXXXX``; nothing else changed."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw
        encoding = getattr(raw, "encoding", None) or "utf-8"
        self._encoding = encoding
        self._utf8 = codecs.lookup(encoding).name == "utf-8"

    def write(self, text: str) -> int:
        if not self._utf8:
            text = text.encode(self._encoding, "backslashreplace").decode(self._encoding)
        try:
            self.raw.write(text)
        except BrokenPipeError:
            _reader_gone(self.raw)
        return len(text)

    def flush(self) -> None:
        try:
            self.raw.flush()
        except BrokenPipeError:
            _reader_gone(self.raw)

    def fileno(self) -> int:
        return self.raw.fileno()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:
        return self._encoding

    @property
    def errors(self) -> str:
        return "backslashreplace"

    @property
    def buffer(self):
        return self.raw.buffer


def _reader_gone(raw: TextIO) -> None:
    """The reader of ``raw`` left (``critpath gate ... | head -2``): what is still printed goes to
    /dev/null and the command carries on to its files. The BrokenPipeError ended a gate between
    its pairs and its gate.json, leaving a directory of sides without a verdict."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, raw.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # a stream with no descriptor (a test's capture): its writes fail no further


class EscapedStream(_Encoded):
    """``raw`` with every text escaped for the terminal; ``trusted`` writes to it unescaped."""

    def __init__(self, raw: TextIO) -> None:
        super().__init__(raw)
        self.trusted = _Encoded(raw)

    def write(self, text: str) -> int:
        super().write(for_terminal(text))
        return len(text)


@contextmanager
def escaped_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` escaped while the block runs (a no-op when they are
    already), and put back after, so a caller that swapped them (a test capturing output) gets its
    own back."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, EscapedStream):
        sys.stdout = EscapedStream(sys.stdout)
    if not isinstance(sys.stderr, EscapedStream):
        sys.stderr = EscapedStream(sys.stderr)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed pipe: the command line has said what it will
        sys.stdout, sys.stderr = saved
