"""Reading JSON that critpath did not write itself (nccl-tests ``-J`` output, run directories) so
that an edit cannot pass as data.

``json.loads`` lets the last of two equal keys win: ``{"nwrong": 3, "nwrong": 0}`` reads as 0 wrong
elements, and a second ``"results"`` replaces the first without a word. ``loads_strict`` refuses
a repeated key, naming it and the line of the object that repeats it, and turns every other way
the text can fail (not JSON, not UTF-8, nested past the interpreter's limit) into the same
``JsonFileError`` starting with ``where:line:``. NaN and Infinity parse as Python's json parses
them: whether a value may be one is the reader's check, which names the field.
"""
from __future__ import annotations

import json
import json.scanner
import re
from typing import Any, Union

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


def loads_strict(text: Union[str, bytes], where: str) -> Any:
    """``text`` parsed as JSON, or JsonFileError naming ``where`` (a file name) and the line:
    not JSON, not UTF-8 (bytes), nested too deep, an object with a key twice, or an integer
    outside the signed 64-bit range."""
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
