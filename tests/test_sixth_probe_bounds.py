"""The sixth probe's bounds findings fixed here: the worker's stdin read within the protocol's
bounds, float text with one spelling (no leading zero, no negative zero), YAML floats that
underflow, and asv results holding a case ID that is none."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from harness.core import registry, yamlfile
from harness.core.case import CaseIdError
from harness.core.numbers import NumberError, parse_float
from harness.run import rounds
from harness.run.protocol import MAX_WORKER_LINE_BYTES

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


def _serve(tmp_path: Path, text: str) -> tuple[int, list[dict]]:
    replies = io.StringIO()
    code = rounds.serve(tmp_path / "w", "gloo", 30.0, io.StringIO(text), replies)
    return code, [json.loads(line) for line in replies.getvalue().splitlines()]


@pytest.mark.parametrize("text, said", [
    ('{"cmd": "round", "round": 1' + "0" * 5000 + ', "cases": []}\n', "the gate's request"),
    ("[" * 100_000 + "]" * 100_000 + "\n", "nested"),
    (" " * (MAX_WORKER_LINE_BYTES + 10) + "\n", "MAX_WORKER_LINE_BYTES"),
])
def test_a_request_past_the_protocols_bounds_is_a_protocol_error_not_a_traceback(tmp_path, text, said):
    # Before: ValueError (4,300 digits) and RecursionError tracebacks, exit 1; 826 MB for one line.
    code, replies = _serve(tmp_path, text)
    assert code == 2 and replies[-1]["event"] == "error", replies
    assert said in replies[-1]["message"]
    assert not list((tmp_path / "w").glob("round-*"))


def test_a_request_within_the_bounds_is_still_served(tmp_path):
    code, replies = _serve(tmp_path, json.dumps({"cmd": "stop"}) + "\n")
    assert code == 0 and [r["event"] for r in replies] == ["ready", "bye"]


@pytest.mark.parametrize("text", ["04.0", "00", "00.5", "-0", "-0.0", "-0e3"])
def test_a_float_has_one_spelling(text):
    # Before: 04.0 read as 4.0, and -0 as a second case beside 0.0 (equal, with another hash).
    with pytest.raises(NumberError):
        parse_float(text, "x")


@pytest.mark.parametrize("text, value", [("0", 0.0), ("0.0", 0.0), ("0.5", 0.5), (".5", 0.5), ("4.0", 4.0),
                                         ("1e+16", 1e16), ("1e-06", 1e-6), ("-2.5", -2.5)])
def test_floats_in_the_one_spelling_and_as_repr_writes_them_still_read(text, value):
    assert parse_float(text, "x") == value


def test_a_case_id_with_a_negative_zero_names_no_case():
    base = ("moe_a2a/backend=gloo,bytes_per_elem=4,compute=sleep,expert_bytes=0,experts_per_rank=2,hidden=8,"
            "mitigation=none,seed=0,skew=0.0,tokens=16,top_k=1,workload=uniform,world=1")
    assert registry.parse(base + ",ns_per_token=0.0").id == registry.parse(base + ",ns_per_token=0").id
    with pytest.raises(CaseIdError, match="negative zero"):
        registry.parse(base + ",ns_per_token=-0")


@pytest.mark.parametrize("text", ["1e-400", "5e-324", "-1e-310"])
def test_a_yaml_float_that_underflows_is_refused_naming_its_line(tmp_path, text):
    # Before: max: 1e-400 read as 0 ("p50_us <= 0 us"), as the text grammar no longer does.
    path = tmp_path / "f.yaml"
    path.write_text(f"a: 1\nb: {text}\n")
    with pytest.raises(yamlfile.YamlFileError, match=r"f.yaml:2: .* is too small to hold \(underflows\)"):
        yamlfile.load(path)


def test_a_yaml_zero_and_small_normal_floats_still_read(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("a: 0.0\nb: 1e-300\nc: 2.2250738585072014e-308\n")
    assert yamlfile.load(path)[0] == {"a": 0.0, "b": 1e-300, "c": 2.2250738585072014e-308}


def test_an_asv_file_holding_no_case_id_is_skipped_naming_it_and_the_field(tmp_path, capsys):
    # Before: IndexError in the view, exit 1, no report.
    from harness.cli import main

    results = tmp_path / "asvs"
    shutil.copytree(Path(__file__).parent / "fixtures" / "asv_results", results)
    case = "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,world=2"
    (path,) = sorted((results / "ci-runner").glob("11111111-*.json"))
    path.write_text(path.read_text().replace(f'"{case}"', '"nocaseid"'))
    assert main(["report", "--asv-results", str(results), "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert f"skipped {path}" in err and "'nocaseid' is no case ID" in err
