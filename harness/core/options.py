"""Command-line value types shared by every command: each refuses what would break a run later;
the exit codes; the error a command raises when it cannot run on what it was given, and the line
that says so."""
from __future__ import annotations

import argparse
import math
import sys

from harness.core.escape import for_terminal
from harness.core.sizes import parse_sizes

# A bound no case needs; beyond it a timer's arithmetic overflows (threading.Timer, time.monotonic).
MAX_SECONDS = 7 * 24 * 3600.0


EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2  # every case ran and passed; a case failed; could not run


class CannotRun(ValueError):
    """The command cannot run on what it was given (options, environment, an input file): exit code
    2 with the message, which names the option, file or line. The command line catches this one
    class, so it imports none of the modules whose errors derive from it."""


class UsageError(CannotRun):
    """Bad options or environment."""


def print_error(command: str, message: object) -> None:
    """``critpath COMMAND: error: MESSAGE`` on stderr; the message may quote a file, a path or a
    case's error, so it is escaped for the terminal."""
    print(for_terminal(f"critpath {command}: error: {message}"), file=sys.stderr)


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


def comma_separated(text: str) -> tuple[str, ...]:
    """``a, b,,c`` -> ("a", "b", "c"): names (families, tools) or numbers still to be parsed."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def at_least(low: int):
    """An integer of ``low`` or more (--world >= 1, --warmup >= 0)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    parse.__name__ = "int"  # argparse names the type in "invalid int value: 'x'"
    return parse


def positive(kind):
    """A number of ``kind`` (int or float) above 0: a budget, a window, a count of rounds."""
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in "invalid float value: 'x'"
    return parse


def size_sweep(text: str) -> tuple[int, ...]:
    """A size sweep as nccl-tests writes it (``8:64M:x2``, ``1K:8K:+1K``, ``8,1K,1M``), in bytes."""
    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
