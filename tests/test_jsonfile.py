"""The one strict JSON reader: a repeated key is refused, naming it and its line."""
from __future__ import annotations

import pytest

from harness.core.jsonfile import JsonFileError, loads_strict


def test_json_reads_as_json():
    assert loads_strict('{"a": [1, 2.5, null, true], "b": {"c": "d"}}', "f.json") == \
        {"a": [1, 2.5, None, True], "b": {"c": "d"}}
    assert loads_strict(b'{"a": 1}', "f.json") == {"a": 1}


def test_a_repeated_key_is_refused_naming_the_key_and_the_line_of_its_object():
    text = '{\n "results": [\n  {"size": 8,\n   "in_place": {"time": 1.0, "nwrong": 3, "nwrong": 0}}\n ]\n}'
    with pytest.raises(JsonFileError, match=r'^f.json:4: the key "nwrong" appears twice in one object '
                                            r'\(whose other keys are time\)') as info:
        loads_strict(text, "f.json")
    assert (info.value.where, info.value.line) == ("f.json", 4)


def test_a_repeated_top_level_key_is_refused():
    with pytest.raises(JsonFileError, match=r'^f.json:1: the key "results" appears twice'):
        loads_strict('{"results": [1], "version": 3, "results": []}', "f.json")


@pytest.mark.parametrize("text, message", [
    ('{"a": 1,}', r"^f.json:1: not valid JSON \(Expecting property name enclosed in double quotes, column 9\)"),
    (b'{"a": "\xff"}', r"^f.json: not UTF-8 \(byte offset 7\)"),
    ("[" * 100_000 + "]" * 100_000, r"^f.json: nested too deep"),
])
def test_text_that_is_not_json_names_where(text, message):
    with pytest.raises(JsonFileError, match=message):
        loads_strict(text, "f.json")
