"""Reading JSON that critpath did not write itself (nccl-tests ``-J`` output, run directories) so
that an edit cannot pass as data.

``json.loads`` lets the last of two equal keys win: ``{"nwrong": 3, "nwrong": 0}`` reads as 0 wrong
elements, and a second ``"results"`` replaces the first without a word. ``loads_strict`` refuses
a repeated key, naming it and the line of the object that repeats it, and turns every other way
the text can fail (not JSON, not UTF-8, nested past the interpreter's limit) into the same
``JsonFileError`` starting with ``where:line:``. NaN and Infinity parse as Python's json parses
them: whether a value may be one is the reader's check, which names the field.

A byte cap alone does not bound what parsing costs: 55 MB of a record with 4 million keys took
1.3 GB, 60 MB of floats 750 MB. A reader passes ``JsonLimits`` (how many keys, values and levels
its document may hold), and text past one is refused before it is parsed.
"""
from __future__ import annotations

import json
import json.scanner
import re
from dataclasses import dataclass
from typing import Any, Optional, Union

# Every integer critpath reads fits a signed 64 bits: numpy and pandas hold no larger, and an int
# past it made every reader of the record crash (OverflowError) instead of one refusing it.
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
_INT64_DIGITS = len(str(INT64_MAX))


class JsonFileError(ValueError):
    """JSON that cannot be read as data; the message starts with ``where:line:`` (or ``where:``)."""

    def __init__(self, message: str, where: str, line: int = 0) -> None:
        super().__init__(f"{where}:{line}: {message}" if line else f"{where}: {message}")
        self.where, self.line, self.why = where, line, message


class _OutOfRange(Exception):
    def __init__(self, digits: str) -> None:
        self.digits = digits


def _int64(digits: str) -> int:
    # the length first: int() of a 5,000-digit string is itself refused (ValueError) by Python
    if len(digits.lstrip("-")) > _INT64_DIGITS or not INT64_MIN <= int(digits) <= INT64_MAX:
        raise _OutOfRange(digits)
    return int(digits)


def _where_number(text: str, digits: str) -> tuple[int, str]:
    """The line of the first integer ``digits`` in ``text`` and the key it is the value of ("" for
    an element of a list): found only for text already refused."""
    match = re.search(r"(?<![0-9.eE+-])" + re.escape(digits) + r"(?![0-9.eE])", text)
    if not match:
        return 0, ""
    key = re.search(r'"((?:[^"\\]|\\.)*)"\s*:\s*$', text[max(0, match.start() - 300):match.start()])
    return text.count("\n", 0, match.start()) + 1, key.group(1) if key else ""


class _Repeated(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Repeated(key)
        out[key] = value
    return out


# Every ASCII digit made a 9, so that one substring search finds a run of _INT64_DIGITS digits
# (a regular expression takes 15 times as long on a record of 20,000 samples).
_DIGITS_AS_NINES = bytes.maketrans(b"0123456789", b"9" * 10)


def _may_hold_a_long_integer(text: str) -> bool:
    return b"9" * _INT64_DIGITS in text.encode("utf-8", "surrogatepass").translate(_DIGITS_AS_NINES)


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"\s*:?|[{}\[\]]')


def _start_of_repeat(text: str) -> int:
    """The index of the "{" of the first object that repeats a key (-1: not found). Found again with
    the pure-Python scanner, which, unlike the C one, says where each object starts; it runs only on
    text already refused."""
    starts: list[int] = []
    decoder = json.JSONDecoder(object_pairs_hook=_unique)

    def parse_object(s_and_end, *args):
        starts.append(s_and_end[1] - 1)  # s_and_end[1] is the index just after "{"
        result = json.decoder.JSONObject(s_and_end, *args)
        starts.pop()
        return result

    decoder.parse_object = parse_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    try:
        decoder.decode(text)
    except _Repeated:
        return starts[-1] if starts else -1
    except (ValueError, RecursionError):
        pass
    return -1


def _second_key(text: str, start: int, key: str) -> int:
    """The index of the second ``key`` of the object whose "{" is at ``start`` (-1: not found)."""
    depth, seen = 0, 0
    for match in _TOKENS.finditer(text, start):
        token = match.group()
        if token in "{[":
            depth += 1
        elif token in "}]":
            depth -= 1
            if depth == 0:
                break
        elif depth == 1 and token.endswith(":") and json.loads(token.rstrip(": \t\r\n")) == key:
            seen += 1
            if seen == 2:
                return match.start()
    return -1


def _line(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1 if index >= 0 else 0


@dataclass(frozen=True)
class JsonLimits:
    """How much one JSON document may hold, declared by its reader with why that much."""

    keys: int  # object keys in all (a key costs some 300 bytes parsed: 25 times its text)
    values: int  # list elements and object members in all (a float costs 32 bytes parsed)
    depth: int  # levels of nesting, the document itself the first


_QUOTE, _COLON, _COMMA = ord('"'), ord(":"), ord(",")
_OPEN, _CLOSE = (ord("["), ord("{")), (ord("]"), ord("}"))
_CHUNK_BYTES = 1 << 20  # what one pass over the text holds at a time: some 10 bytes a byte of text


def _structure(raw: bytes) -> tuple[int, int, int]:
    """(keys, values, depth) of JSON text, counted outside its strings, in one pass at numpy's speed
    and a chunk at a time. A character is outside every string when an even number of quotes comes
    before it, once the escaped ones are gone: an escaped backslash and an escaped quote are each
    made two characters that are neither."""
    import numpy as np  # only for text whose raw counts put it past a limit

    raw = raw.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    keys = values = depth = level = 0
    inside = 0  # 1 when the chunk before ended inside a string
    for start in range(0, len(raw), _CHUNK_BYTES):
        chunk = np.frombuffer(raw, np.uint8, min(_CHUNK_BYTES, len(raw) - start), start)
        # a uint8 sum wraps at 256 and keeps its parity, which is all that is asked of it
        outside = ((np.cumsum(chunk == _QUOTE, dtype=np.uint8) + inside) & 1) == 0
        keys += int(np.count_nonzero((chunk == _COLON) & outside))
        opens = np.isin(chunk, _OPEN) & outside
        levels = np.cumsum(opens.astype(np.int64) - (np.isin(chunk, _CLOSE) & outside)) + level
        depth = max(depth, int(levels.max(initial=level)))
        level = int(levels[-1]) if len(levels) else level
        values += int(np.count_nonzero((chunk == _COMMA) & outside)) + int(np.count_nonzero(opens))
        inside = 0 if outside[-1] else 1
    return keys, values, depth


def check_limits(raw: bytes, where: str, limits: JsonLimits) -> None:
    """JsonFileError when ``raw`` holds more keys, values or levels than ``limits``: what a reader
    given them refuses, so that a writer can hold what it writes to the same limits."""
    # A count over the raw text bounds each figure from above (a string may hold ':', ',' and
    # brackets too) at the speed of one pass in C; the strings are set aside, and the figures
    # counted exactly, only for text that one of those bounds puts past its limit.
    opened = raw.count(b"[") + raw.count(b"{")
    if raw.count(b":") <= limits.keys and raw.count(b",") + opened <= limits.values and opened <= limits.depth:
        return
    keys, values, depth = _structure(raw)
    if keys > limits.keys:
        raise JsonFileError(f"{keys} keys; at most {limits.keys} are read", where)
    if depth > limits.depth:  # before the values: a deep nest is a flood of lists, and reads as what it is
        raise JsonFileError(f"nested {depth} deep; at most {limits.depth} levels are read", where)
    if values > limits.values:
        # each comma and each list or object counted: list elements and object members, and an empty one
        raise JsonFileError(f"about {values} values (list elements and object members); at most {limits.values} "
                            "are read", where)


def loads_strict(text: Union[str, bytes], where: str, limits: Optional[JsonLimits] = None) -> Any:
    """``text`` parsed as JSON, or JsonFileError naming ``where`` (a file name) and the line:
    not JSON, not UTF-8 (bytes), nested too deep, an object with a key twice, an integer
    outside the signed 64-bit range, or (given ``limits``) more keys, values or levels than
    they allow."""
    if limits is not None:  # before decoding, which is a copy of the text
        check_limits(bytes(text) if isinstance(text, (bytes, bytearray)) else text.encode("utf-8", "surrogatepass"),
                      where, limits)
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonFileError(f"not UTF-8 (byte offset {exc.start})", where) from None
    # Checking each integer costs a Python call per number (5x on a record of 20,000 samples); an
    # integer outside 64 bits has at least 19 digits, so text without such a run needs no check.
    check = {"parse_int": _int64} if _may_hold_a_long_integer(text) else {}
    try:
        return json.loads(text, object_pairs_hook=_unique, **check)
    except json.JSONDecodeError as exc:
        raise JsonFileError(f"not valid JSON ({exc.msg}, column {exc.colno})", where, exc.lineno) from None
    except RecursionError:
        raise JsonFileError("nested too deep to be read as data", where) from None
    except _OutOfRange as exc:
        line, key = _where_number(text, exc.digits)
        shown = exc.digits if len(exc.digits) <= 40 else f"{exc.digits[:20]}... ({len(exc.digits)} digits)"
        raise JsonFileError(f"{'field ' + key + ': ' if key else ''}the integer {shown} is outside the signed "
                            f"64-bit range ({INT64_MIN} to {INT64_MAX}) that every reader holds", where, line) from None
    except _Repeated as exc:
        start = _start_of_repeat(text)
        line = _line(text, _second_key(text, start, exc.key)) if start >= 0 else 0
        opened = f" (the object opened on line {_line(text, start)})" if start >= 0 else ""
        raise JsonFileError(f"the key {json.dumps(exc.key)} appears twice in one object{opened}; JSON readers "
                            "keep the last silently, so the file is refused", where, line) from None
