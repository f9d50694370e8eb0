"""An nccl-tests header, text or -J JSON, held to its rows and to what nccl-tests can print: each
refusal is built by editing one field of a real public log (tests/fixtures/nccl_tests), and a
refused import leaves no run directory behind."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_tests"
H100_TEXT = FIXTURES / "all_reduce_h100.txt"
H100_JSON = FIXTURES / "all_reduce_h100.json"
HEADER = 3  # "# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 8(factor) ... validation: 1 ..."
FIRST_ROW = 18  # "           8             2     float     sum      -1    22.00 ..."
WRONG_COLUMNS = (8, 12)  # the words of a row that hold out-of-place and in-place #wrong


def _import(tmp_path: Path, path: Path) -> int:
    return main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")])


def _refused(tmp_path: Path, capsys, path: Path) -> str:
    assert _import(tmp_path, path) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and not (tmp_path / "run").exists(), err
    return err


def _text(tmp_path: Path, old: str = "", new: str = "", unchecked: bool = False) -> Path:
    """The H100 log with ``old`` replaced by ``new`` (once), and every #wrong N/A when ``unchecked``."""
    text = H100_TEXT.read_text()
    if old:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    if unchecked:
        lines = text.splitlines(keepends=True)
        for i, line in enumerate(lines):
            words = line.split()
            if words and words[0].isdigit():
                for column in WRONG_COLUMNS:
                    assert words[column] == "0"
                    words[column] = "N/A"
                lines[i] = "  ".join(words) + "\n"
        text = "".join(lines)
    path = tmp_path / "all_reduce.txt"
    path.write_text(text)
    return path


def _json(tmp_path: Path, edit) -> Path:
    data = json.loads(H100_JSON.read_text())
    edit(data)
    path = tmp_path / "all_reduce.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def _records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]


# 1: validation (-c) against #wrong: N/A exactly where nccl-tests does not check

def test_validation_0_beside_counted_wrong_is_refused_naming_the_header_and_the_row(tmp_path, capsys):
    path = _text(tmp_path, "validation: 1", "validation: 0")
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:{HEADER}: validation 0, but line {FIRST_ROW} prints out-of-place #wrong 0:" in err, err


def test_validation_1_beside_n_a_wrong_is_refused(tmp_path, capsys):
    # all_reduce checks both sides whenever validation is on: nccl-tests cannot print N/A there
    path = _text(tmp_path, unchecked=True)
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:{HEADER}: validation on, but line {FIRST_ROW} prints out-of-place #wrong N/A:" in err, err


def test_validation_0_with_n_a_wrong_imports_unchecked(tmp_path):
    path = _text(tmp_path, "validation: 1", "validation: 0", unchecked=True)
    assert _import(tmp_path, path) == 0
    assert [r["check"] for r in _records(tmp_path)] == [None] * 9


def test_json_validation_0_beside_counted_nwrong_is_refused(tmp_path, capsys):
    path = _json(tmp_path, lambda d: d["config"].update(validation=0))
    err = _refused(tmp_path, capsys, path)
    assert f"{path}: field config.validation: validation 0, but results[0].out_of_place.nwrong is 0:" in err, err


def test_json_validation_1_beside_null_nwrong_is_refused(tmp_path, capsys):
    def unchecked(data):
        for row in data["results"]:
            row["out_of_place"]["nwrong"] = row["in_place"]["nwrong"] = None
    path = _json(tmp_path, unchecked)
    err = _refused(tmp_path, capsys, path)
    assert f"{path}: field config.validation: validation on, but results[0].out_of_place.nwrong is null:" in err, err


def test_json_validation_0_with_null_nwrong_imports_unchecked(tmp_path):
    def unchecked(data):
        data["config"]["validation"] = 0
        for row in data["results"]:
            row["out_of_place"]["nwrong"] = row["in_place"]["nwrong"] = None
    assert _import(tmp_path, _json(tmp_path, unchecked)) == 0
    assert {r["check"] is None for r in _records(tmp_path)} == {True}


# 3: -J start_time, copied into run.json's started_at, is held to the rule run.json is read by

@pytest.mark.parametrize("start", ["yesterday", "2026-13-45 99:99:99", 20260101])
def test_a_json_start_time_no_reader_takes_is_refused_naming_the_input_and_nothing_is_written(tmp_path, capsys,
                                                                                              start):
    path = _json(tmp_path, lambda d: d.update(start_time=start))
    err = _refused(tmp_path, capsys, path)
    assert f"{path}: field start_time: " in err and "run.json" not in err, err


def test_the_public_json_start_time_as_nccl_tests_writes_it_imports(tmp_path):
    assert json.loads(H100_JSON.read_text())["start_time"] == "2026-01-01 00:00:00"  # strftime "%Y-%m-%d %H:%M:%S"
    assert _import(tmp_path, _json(tmp_path, lambda d: None)) == 0
