"""The checks every value read from nccl-tests output passes before it becomes part of a record.

nccl-tests prints counts as integers (``%d``, ``%ld``) and figures as finite decimals, so a value
that is not one (a fraction of a wrong element, a NaN time, ``1e400`` iterations, a string where a
number belongs, a boolean) was not written by nccl-tests: it is refused with the file, the line
or JSON record, and the field, never rounded or taken as absent. ``NcclTestsFormatError`` is the
one error of the importer; the command turns it into exit 2.
"""
from __future__ import annotations

import math
from typing import Any, Optional

# The figures nccl-tests prints, declared where a stored record's printed digits are held too
from harness.core.imported import DECIMAL as _DECIMAL
from harness.core.numbers import NumberError, parse_int
from harness.nccltests.limits import MAX_COUNT, MAX_TEXT_CHARS

# -J writes every double as "%lf": six decimals, each off by at most half the last
JSON_PRINTED_HALF_ULP = 5e-7


class NcclTestsFormatError(ValueError):
    """Input that is not nccl-tests output; the message names file and line (or JSON field)."""


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (list, dict)):
        return f"{'a list' if isinstance(value, list) else 'an object'}"
    return repr(value)


def _in_range(value: float, where: str, low: Optional[float], high: Optional[float], what: str) -> None:
    if low is not None and value < low:
        raise NcclTestsFormatError(f"{where}: {value:g} is less than {low:g}, not {what}")
    if high is not None and value > high:
        raise NcclTestsFormatError(f"{where}: {value:g} is more than {high:g}, not {what}")


def json_integer(value: Any, where: str, low: int = 0, high: int = MAX_COUNT,
                 what: str = "a count") -> int:
    """A JSON integer in [low, high]: 8 and 8.0 both are (JSON does not tell them apart), 8.5 is not;
    1e20 is a whole number past what nccl-tests can print (``MAX_COUNT``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NcclTestsFormatError(f"{where}: {_kind(value)} is not an integer ({what})")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise NcclTestsFormatError(f"{where}: {value!r} is not an integer ({what})")
    _in_range(value, where, low, high, what)
    return int(value)


def json_number(value: Any, where: str, low: Optional[float] = 0.0, above: bool = False,
                what: str = "a figure", high: Optional[float] = None) -> float:
    """A finite JSON number >= low (> low when ``above``), and at most ``high``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NcclTestsFormatError(f"{where}: {_kind(value)} is not a number ({what})")
    number = float(value)
    if not math.isfinite(number):
        raise NcclTestsFormatError(f"{where}: {value!r} is not a finite number ({what})")
    if above and low is not None and number <= low:
        raise NcclTestsFormatError(f"{where}: {number:g} is not more than {low:g} ({what})")
    _in_range(number, where, low, high, what)
    return number


def json_text(value: Any, where: str, what: str = "a name", empty: bool = True, most: int = MAX_TEXT_CHARS) -> str:
    """A JSON string of at most ``most`` characters: what nccl-tests copies through a buffer of its
    own or NCCL's (harness/nccltests/limits.py); a longer one was not written by it."""
    if not isinstance(value, str):
        raise NcclTestsFormatError(f"{where}: {_kind(value)} is not a string ({what})")
    if not empty and not value.strip():
        raise NcclTestsFormatError(f"{where}: an empty string is not {what}")
    if len(value) > most:
        raise NcclTestsFormatError(f"{where}: a string of {len(value)} characters is not {what}: nccl-tests "
                                   f"writes at most {most} there (harness/nccltests/limits.py)")
    return value


# nccl-tests' jsonBool writes a flag as the string "true" or "false" (src/util.cu)
_JSON_FLAGS = {"true": True, "false": False}


def json_flag(value: Any, where: str, also: tuple[str, ...] = ()) -> Any:
    """A flag as nccl-tests writes it, "true" or "false", or a JSON boolean; anything else ("False",
    "0", 1) is refused, not read as one or the other. ``also``: the other words a field may hold
    besides a flag (average_bus_bandwidth.okay is "unchecked" when no bound was set), returned as they are."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _JSON_FLAGS:
        return _JSON_FLAGS[value]
    if isinstance(value, str) and value in also:
        return value
    words = [f'"{w}"' for w in (*_JSON_FLAGS, *also)]
    raise NcclTestsFormatError(f"{where}: {_kind(value)} is not a flag as nccl-tests writes one "
                               f"({', '.join(words[:-1])} or {words[-1]})")


def _shown(token: str) -> str:
    return repr(token) if len(token) <= 40 else f"{token[:20]!r}... ({len(token)} characters)"


def text_integer(token: str, where: str, field: str, low: int = 0, high: int = MAX_COUNT) -> int:
    """A count as nccl-tests prints it, by critpath's one grammar of an integer (``parse_int``):
    ASCII digits, no sign, point, exponent, underscore or leading zero ("08" and "00" are no
    counts nccl-tests prints: its "%d" pads with spaces), in [low, high]."""
    try:
        return parse_int(token, f"{where}: {field}", low, high)
    except NumberError as exc:
        raise NcclTestsFormatError(str(exc)) from None


def text_number(token: str, where: str, field: str, low: Optional[float] = 0.0, above: bool = False,
                high: Optional[float] = None) -> float:
    """A figure as nccl-tests prints it: a finite decimal (``nan``, ``inf`` and ``1e400`` are not)."""
    if not _DECIMAL.fullmatch(token):
        raise NcclTestsFormatError(f"{where}: {field} is {_shown(token)}, not a number")
    number = float(token)
    if not math.isfinite(number):
        raise NcclTestsFormatError(f"{where}: {field} is {token!r}, not a finite number")
    if low is not None and (number < low or (above and number <= low)):
        bound = f"more than {low:g}" if above else f"at least {low:g}"
        raise NcclTestsFormatError(f"{where}: {field} is {token}, not {bound}")
    if high is not None and number > high:
        raise NcclTestsFormatError(f"{where}: {field} is {token}, more than {high:g} (harness/nccltests/limits.py)")
    return number
