"""A command whose reader left (``critpath gate ... 2>&1 | head -2``) carries on to its files: the
BrokenPipeError of its next print ended a gate between its pairs and its gate.json."""
from __future__ import annotations

import io
import os

from harness.core.streams import EscapedStream


def test_writes_after_the_reader_left_are_dropped_not_raised():
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first line
    raw = io.TextIOWrapper(io.FileIO(w, "w"), line_buffering=True)
    stream = EscapedStream(raw)
    try:
        assert stream.write("look 1\n") == len("look 1\n")
        stream.trusted.write("\x1b[1mlook 2\x1b[0m\n")  # rich's own writes too
        stream.flush()
        assert os.fstat(w).st_rdev == os.stat(os.devnull).st_rdev  # what is left goes to /dev/null
    finally:
        raw.close()
