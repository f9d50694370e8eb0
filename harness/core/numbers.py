"""The one grammar of a number critpath reads from text, and the one check of a number it reads
from a parsed file.

Python's ``int()`` and ``float()`` are lenient in ways a benchmark's input must not be: they read
'٣' (Arabic-Indic three) and '３' (full-width) as 3, ``1_000`` as 1000, ``' 5'`` and ``'+5'`` as
5, ``'08'`` as 8, and ``float('1e400')`` as inf. A case ID that reads ``size_bytes=٣`` as 3 names
a case nobody wrote; one that reads ``1_000`` gives two IDs for one case. Every number from the
command line, a case ID, the environment or a text field goes through ``parse_int`` or
``parse_float``: ASCII digits, an optional leading ``-``, no ``_``, no space, no leading zero on an
integer, finite, inside the range its reader declares, and an error that names the source.

A number that a parser has already typed (JSON, YAML) goes through ``check_int`` or
``check_float``: a bool is not a number (``True`` is 1 in Python), NaN and infinities are refused,
and an integer field refuses 100.9 rather than truncating it.
"""
from __future__ import annotations

import math
import re
import sys
from typing import Optional

from harness.core.echo import shown

# Every integer critpath holds fits a signed 64 bits, as its JSON and YAML readers require.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# Longer text is refused before int() or float() sees it: int() of 4,300 digits raises, and a
# megabyte of digits is a typo or an attack, not a number.
MAX_NUMBER_CHARS = 64

# No '-0': it reads as 0, so fault_rank=-0 and fault_rank=0 would be two IDs of one case.
_INT = re.compile(r"0|-?[1-9][0-9]*", re.ASCII)
# No leading zero on the integer part: 04.0 and 4.0 would be two spellings of one case key. The
# exponent may carry a '+', because repr() writes 1e+16 so, and case IDs are written with repr().
_FLOAT = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", re.ASCII)


class NumberError(ValueError):
    """A number that is not one by critpath's grammar or lies outside its range; the message starts
    with the source it was read from (a case ID's key, an option, a variable, a file's field)."""


def _range(low: Optional[float], high: Optional[float]) -> str:
    if low is not None and high is not None:
        return f"from {low:g} to {high:g}" if isinstance(low, float) or isinstance(high, float) else f"from {low} to {high}"
    if low is not None:
        return f"at least {low}"
    return f"at most {high}"


def _in_range(value, low, high, source: str) -> None:
    if (low is not None and value < low) or (high is not None and value > high):
        raise NumberError(f"{source}: {shown(value)} is outside the range it may take ({_range(low, high)})")


def parse_int(text: str, source: str, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """``text`` as an integer by critpath's grammar, within [low, high] and 64 bits."""
    if not isinstance(text, str) or len(text) > MAX_NUMBER_CHARS or not _INT.fullmatch(text):
        if text == "-0":
            raise NumberError(f"{source}: {shown(text)} is a negative zero; write 0")
        if isinstance(text, str) and re.fullmatch(r"-?0[0-9]+", text, re.ASCII):
            raise NumberError(f"{source}: {shown(text)} has a leading zero; write {text.lstrip('-').lstrip('0') or '0'}"
                              " (an integer with a leading zero is octal in some readers)")
        raise NumberError(f"{source}: expected an integer (ASCII digits, no '_', '+' or spaces), got {shown(text)}")
    value = int(text, 10)
    _in_range(value, INT64_MIN if low is None else low, INT64_MAX if high is None else high, source)
    return value


def parse_float(text: str, source: str, low: Optional[float] = None, high: Optional[float] = None) -> float:
    """``text`` as a finite number by critpath's grammar (``12``, ``-0.5``, ``1e-6``), within [low, high]."""
    if not isinstance(text, str) or len(text) > MAX_NUMBER_CHARS or not _FLOAT.fullmatch(text):
        raise NumberError(f"{source}: expected a number (ASCII digits, '.', an exponent; no '_', spaces, leading "
                          f"'+' or leading zero), got {shown(text)}")
    value = float(text)
    if not math.isfinite(value):
        raise NumberError(f"{source}: {shown(text)} is not a finite number")
    if underflows(text, value):
        raise NumberError(f"{source}: {underflow_text(text)}")
    if value == 0 and text.startswith("-"):
        # -0.0 == 0.0, yet repr() writes '-0.0': one case would have two IDs
        raise NumberError(f"{source}: {shown(text)} is a negative zero; write 0")
    _in_range(value, low, high, source)
    return value


def underflows(text: str, value: float) -> bool:
    """Whether float ``text`` names a nonzero number that ``value`` (what float() read) cannot
    hold: float() reads 1e-400 as 0.0 and 1e-310 as a subnormal that has lost digits."""
    return abs(value) < sys.float_info.min and _names_nonzero(text)


def underflow_text(text: str) -> str:
    """What is said of such text, wherever it was read."""
    return f"{shown(text)} is too small to hold (underflows); write 0 or a magnitude of at least {sys.float_info.min!r}"


def _names_nonzero(text: str) -> bool:
    """Whether float text by the grammar above has a nonzero digit before its exponent."""
    mantissa = re.split(r"[eE]", text, maxsplit=1)[0]
    return any(ch in "123456789" for ch in mantissa)


def check_int(value: object, source: str, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """A parsed value that must be an integer: not a bool, not a float (100.9 is not truncated),
    within [low, high] and 64 bits."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise NumberError(f"{source}: expected an integer, got {shown(value)}")
    _in_range(value, INT64_MIN if low is None else low, INT64_MAX if high is None else high, source)
    return value


def check_float(value: object, source: str, low: Optional[float] = None, high: Optional[float] = None) -> float:
    """A parsed value that must be a finite number (an int is one): not a bool, not NaN or an
    infinity, within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NumberError(f"{source}: expected a number, got {shown(value)}")
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise NumberError(f"{source}: {shown(value)} is outside 64 bits")
    if not math.isfinite(value):
        raise NumberError(f"{source}: {shown(value)} is not a finite number")
    _in_range(value, low, high, source)
    return float(value)
