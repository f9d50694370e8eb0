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
from typing import Any, Union


class JsonFileError(ValueError):
    """JSON that cannot be read as data; the message starts with ``where:line:`` (or ``where:``)."""

    def __init__(self, message: str, where: str, line: int = 0) -> None:
        super().__init__(f"{where}:{line}: {message}" if line else f"{where}: {message}")
        self.where, self.line = where, line


class _Repeated(Exception):
    def __init__(self, key: str, keys: list) -> None:
        self.key, self.keys = key, keys


def _unique(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Repeated(key, [k for k, _ in pairs])
        out[key] = value
    return out


def _line_of_repeat(text: str) -> int:
    """The line of the first object that repeats a key. Found again with the pure-Python scanner,
    which, unlike the C one, says where each object starts; it runs only on text already refused."""
    starts: list[int] = []
    decoder = json.JSONDecoder(object_pairs_hook=_unique)

    def parse_object(s_and_end, *args):
        starts.append(s_and_end[1] - 1)  # the index just after "{"
        result = json.decoder.JSONObject(s_and_end, *args)
        starts.pop()
        return result

    decoder.parse_object = parse_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    try:
        decoder.decode(text)
    except _Repeated:
        return text.count("\n", 0, starts[-1]) + 1 if starts else 0
    except (ValueError, RecursionError):
        pass
    return 0


def loads_strict(text: Union[str, bytes], where: str) -> Any:
    """``text`` parsed as JSON, or JsonFileError naming ``where`` (a file name) and the line:
    not JSON, not UTF-8 (bytes), nested too deep, or an object with a key twice."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonFileError(f"not UTF-8 (byte offset {exc.start})", where) from None
    try:
        return json.loads(text, object_pairs_hook=_unique)
    except json.JSONDecodeError as exc:
        raise JsonFileError(f"not valid JSON ({exc.msg}, column {exc.colno})", where, exc.lineno) from None
    except RecursionError:
        raise JsonFileError("nested too deep to be read as data", where) from None
    except _Repeated as exc:
        others = ", ".join(dict.fromkeys(k for k in exc.keys if k != exc.key))
        raise JsonFileError(f"the key {json.dumps(exc.key)} appears twice in one object (whose other keys are "
                            f"{others or 'none'}); JSON readers keep the last silently, so the file is refused",
                            where, _line_of_repeat(text)) from None
