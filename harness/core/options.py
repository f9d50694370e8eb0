"""Command-line value types shared by every command: each refuses what would break a run later."""
from __future__ import annotations

import argparse
import math

# A bound no case needs; beyond it a timer's arithmetic overflows (threading.Timer, time.monotonic).
MAX_SECONDS = 7 * 24 * 3600.0


def seconds(text: str) -> float:
    """A finite, positive number of seconds, at most a week: nan and inf are refused here, not as an
    OverflowError inside a case."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds in (0, {MAX_SECONDS:g}], got {text}")
    return value
