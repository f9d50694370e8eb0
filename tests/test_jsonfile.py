"""The one strict JSON reader: a repeated key is refused, naming it and its line."""
from __future__ import annotations

import pytest

from harness.core.jsonfile import JsonFileError, loads_strict


def test_json_reads_as_json():
    assert loads_strict('{"a": [1, 2.5, null, true], "b": {"c": "d"}}', "f.json") == \
        {"a": [1, 2.5, None, True], "b": {"c": "d"}}
    assert loads_strict(b'{"a": 1}', "f.json") == {"a": 1}


def test_a_repeated_key_is_refused_naming_the_key_and_its_line():
    text = '{\n "results": [\n  {"size": 8,\n   "in_place": {"time": 1.0, "nwrong": 3, "x": "{\\"nwrong\\": 1}",\n' \
        '    "more": {"nwrong": 2},\n    "nwrong": 0}}\n ]\n}'
    with pytest.raises(JsonFileError, match=r'^f.json:6: the key "nwrong" appears twice in one object '
                                            r'\(the object opened on line 4\)') as info:
        loads_strict(text, "f.json")
    assert (info.value.where, info.value.line) == ("f.json", 6)


def test_a_repeated_top_level_key_is_refused():
    with pytest.raises(JsonFileError, match=r'^f.json:1: the key "results" appears twice in one object \(the '
                                            r'object opened on line 1\)'):
        loads_strict('{"results": [1], "version": 3, "results": []}', "f.json")


@pytest.mark.parametrize("text, message", [
    ('{"a": 1,}', r"^f.json:1: not valid JSON \(Expecting property name enclosed in double quotes, column 9\)"),
    (b'{"a": "\xff"}', r"^f.json: not UTF-8 \(byte offset 7\)"),
    ("[" * 100_000 + "]" * 100_000, r"^f.json: nested too deep"),
])
def test_text_that_is_not_json_names_where(text, message):
    with pytest.raises(JsonFileError, match=message):
        loads_strict(text, "f.json")


@pytest.mark.parametrize("digits", [str(2**63), str(-(2**63) - 1), "1" * 5000])
def test_an_integer_past_64_bits_is_refused_naming_its_key_and_line(digits):
    with pytest.raises(JsonFileError, match=r"^f.json:3: field size: the integer .* is outside the signed 64-bit"):
        loads_strict('{"a": 1,\n "b": [2,\n  {"size": %s}]}' % digits, "f.json")


def test_the_64_bit_extremes_are_integers():
    assert loads_strict(f"[{2**63 - 1}, {-(2**63)}]", "f.json") == [2**63 - 1, -(2**63)]


def test_a_record_line_or_run_json_with_a_key_twice_is_refused_by_the_store(tmp_path):
    from harness.core.store import ResultsFileError, iter_records, read_json

    results = tmp_path / "results.jsonl"
    results.write_text('{"schema": "critpath.record/1", "schema": "x"}\n')
    with pytest.raises(ResultsFileError, match=r'results\.jsonl:1: the key "schema" appears twice'):
        list(iter_records(results))
    meta = tmp_path / "run.json"
    meta.write_text('{\n "state": "running",\n "state": "finished"\n}\n')
    with pytest.raises(ResultsFileError, match=r'run\.json:3: the key "state" appears twice'):
        read_json(meta)
