"""Readers of what other tools wrote: nccl-tests -J fields held to what nccl-tests writes, a run ID of
one grammar whoever gives it, an asv history of one value a commit and of figures families declare,
acceptance profiles refused in words naming the check, a tab in a text log read as a space, and a
case ID's error quoting the user's own text. Each test fails on the code before these rules."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.core import registry
from harness.core.case import CaseIdError

FIXTURES = Path(__file__).parent / "fixtures"
H100_JSON = FIXTURES / "nccl_tests" / "all_reduce_h100.json"
H100_TEXT = FIXTURES / "nccl_tests" / "all_reduce_h100.txt"
ASV = FIXTURES / "asv_results"
PROFILE = Path(__file__).resolve().parents[1] / "baselines" / "profiles" / "cpu-ci.yaml"


def _json(tmp_path: Path, edit) -> Path:
    data = json.loads(H100_JSON.read_text())
    edit(data)
    path = tmp_path / "all_reduce.json"
    path.write_text(json.dumps(data))
    return path


def _import(tmp_path: Path, path: Path, *more: str) -> int:
    return main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run"), *more])


# -- 1: the -J fields nccl-tests writes after the rows, and each row's own ----------------------------

def _set(*path):
    def edit(value):
        def apply(data):
            node = data
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = value
        return apply
    return edit


@pytest.mark.parametrize("field, value, said", [
    (("end_time",), "garbage", "field end_time: 'garbage' is not an ISO 8601 time"),
    (("end_time",), 5, "field end_time: 5 is not a string (a time)"),
    # start_time is 2026-01-01 00:00:00: a day before is no daylight-saving change
    (("end_time",), "2025-12-31 00:00:00", "field end_time: 2025-12-31 00:00:00 is before field start_time"),
    (("errors",), "x", 'field errors: "x" is not what nccl-tests writes there: a list of at most one string'),
    (("errors",), -1, "field errors: -1 is not what nccl-tests writes there"),
    (("errors",), 5, "field errors: 5 is not what nccl-tests writes there"),
    (("errors",), ["a", "b"], "field errors: a list of 2 is not what nccl-tests writes there"),
    (("errors",), [7], "field errors[0]: 7 is not a string"),
    (("results", 0, "experiment_name"), "x" * 100_000,
     "results[0].experiment_name: a string of 100000 characters is not an experiment name: nccl-tests writes at most 1024"),
    (("config", "devices", 0, "hostname"), "h" * 5000, "config.devices[0].hostname: a string of 5000 characters"),
    (("average_bus_bandwidth", "okay"), "maybe",
     "field average_bus_bandwidth.okay: 'maybe' is not a flag as nccl-tests writes one (\"true\", \"false\" or \"unchecked\")"),
    (("out_of_bounds", "okay"), "false",
     'field out_of_bounds.okay is "false" beside count 0: nccl-tests writes true exactly when the count is 0'),
    (("results", 3, "actual_iterations"), 7,
     "results[3].actual_iterations: 7, but field config.iterations is 20: nccl-tests times every row"),
], ids=lambda v: ".".join(map(str, v)) if isinstance(v, tuple) else "")
def test_a_json_field_nccl_tests_cannot_have_written_is_refused_naming_it(tmp_path, capsys, field, value, said):
    path = _json(tmp_path, _set(*field)(value))
    assert _import(tmp_path, path) == 2
    err = capsys.readouterr().err
    assert f"{path}: " in err and said in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("edit", [
    _set("errors")([""]),  # ncclGetLastError's empty message, as the public Azure log has it
    _set("errors")(["NCCL WARN Cuda failure 'out of memory'"]),
    _set("end_time")("2025-12-31 23:30:00"),  # within a daylight-saving change of the start
    # "true" only beside a bound the average meets: nccl-tests writes "unchecked" without one
    lambda data: (_set("average_bus_bandwidth", "okay")("true")(data), data["env"].append("NCCL_TESTS_MIN_BW=50")),
])
def test_the_json_fields_as_nccl_tests_writes_them_import(tmp_path, edit):
    assert _import(tmp_path, _json(tmp_path, edit)) == 0


# -- 2: --run-id, and every run ID a record or run.json holds, by one grammar ------------------------

@pytest.mark.parametrize("run_id, said", [
    ("a" * 120_000, "a run ID of 120000 characters is more than 128"),
    ("", "'' is not a run ID"),
    ("a\nb", "'a\\nb' is not a run ID"),
    ("\x1b]0;owned\x07", "is not a run ID"),
    ("../x", "'../x' is not a run ID"),
], ids=["long", "empty", "newline", "escape", "dotdot"])
def test_an_import_run_id_outside_the_run_id_grammar_is_refused(tmp_path, capsys, run_id, said):
    with pytest.raises(SystemExit) as exit_:
        _import(tmp_path, H100_JSON, "--run-id", run_id)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --run-id: " in err and said in err, err
    assert not (tmp_path / "run").exists()


def test_a_given_run_id_is_the_runs_and_a_default_from_any_file_name_is_a_run_id(tmp_path, capsys):
    assert _import(tmp_path, H100_JSON, "--run-id", "lab.node-7_2026") == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["run_id"] == "lab.node-7_2026"
    odd = tmp_path / "in" / "all reduce\n\x1b[31mred.json"
    odd.parent.mkdir()
    shutil.copy(H100_JSON, odd)
    assert main(["import-nccl-tests", str(odd), "--out", str(tmp_path / "odd")]) == 0
    run_id = json.loads((tmp_path / "odd" / "run.json").read_text())["run_id"]
    assert run_id.startswith("nccl-tests-all-reduce--") and run_id.isascii() and " " not in run_id, run_id
    capsys.readouterr()
    assert main(["show", str(tmp_path / "odd")]) == 0


def test_a_record_whose_run_id_is_no_run_id_is_refused_when_read(tmp_path, capsys):
    assert _import(tmp_path, H100_JSON, "--run-id", "r1") == 0
    results = tmp_path / "run" / "results.jsonl"
    results.write_text(results.read_text().replace('"run_id":"r1"', '"run_id":"r1\\u001b[2J"'))
    capsys.readouterr()
    assert main(["show", str(tmp_path / "run")]) == 2
    assert "field run_id: 'r1\\x1b[2J' is not a run ID" in capsys.readouterr().err


# -- 3: an asv history holds one value a commit, of figures its families declare ---------------------

def _asv(tmp_path: Path) -> Path:
    results = tmp_path / "A"
    shutil.copytree(ASV, results)
    return results


def _report(tmp_path: Path, results: Path, capsys) -> tuple[str, str]:
    assert main(["report", "--asv-results", str(results), "--out", str(tmp_path / "O")]) == 0
    return capsys.readouterr().err, (tmp_path / "O" / "report.md").read_text()


def test_a_commit_asv_ran_in_two_environments_is_skipped_in_each_naming_the_other(tmp_path, capsys):
    results = _asv(tmp_path)
    first = results / "ci-runner" / "11111111-existing-py_usr_bin_python3.json"
    data = json.loads(first.read_text())
    data["env_name"] = "other"
    data["results"]["bench_families.Rpc.track_p50_us"][0] = [999.0, 999.0]
    (results / "ci-runner" / "11111111-other.json").write_text(json.dumps(data))
    err, md = _report(tmp_path, results, capsys)
    assert err.count("commit 11111111 on machine 'ci-runner' is also in") == 2, err
    assert "2 files of the results directory skipped" in md
    assert "over 2 commits" in md and "999" not in md.split("## History", 1)[1]


def test_a_results_file_under_another_environments_name_is_skipped(tmp_path, capsys):
    results = _asv(tmp_path)
    first = results / "ci-runner" / "11111111-existing-py_usr_bin_python3.json"
    first.rename(results / "ci-runner" / "11111111-other.json")
    err, md = _report(tmp_path, results, capsys)
    assert "field env_name: 'existing-py_usr_bin_python3' is not the environment the file's name gives" in err, err
    assert "1 file of the results directory skipped" in md


@pytest.mark.parametrize("row, figure", [("bench_families.Rpc.track_busbw_gbps", "busbw_gbps"),
                                               ("bench_families.Rpc.track_bogus", "bogus")])
def test_a_row_of_a_figure_no_family_declares_is_skipped_alone(tmp_path, capsys, row, figure):
    results = _asv(tmp_path)
    path = results / "ci-runner" / "22222222-existing-py_usr_bin_python3.json"
    data = json.loads(path.read_text())
    data["results"][row] = data["results"]["bench_families.Rpc.track_p50_us"]
    path.write_text(json.dumps(data))
    err, md = _report(tmp_path, results, capsys)
    assert f"{path}: field results.{row}: family 'rpc' declares no figure '{figure}'" in err, err
    assert "1 row of the results directory skipped" in md
    assert row.rsplit(".", 2)[-2] + "." + figure not in md  # neither tabled nor plotted
    assert "over 3 commits" in md  # the file's other rows are read


# -- 6: acceptance profiles --------------------------------------------------------------------------

def _profile(tmp_path: Path, old: str, new: str) -> Path:
    text = PROFILE.read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "profile.yaml"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize("old, new, said", [
    ("    max: 20000\n", "    max: 20000\n    min: 1\n",
     ":19: field checks.0: check 'allreduce 8 B p99' gives both min and max: give one bound"),
    ("    max: 20000\n", "", ":19: field checks.0: check 'allreduce 8 B p99' gives neither min nor max: give one bound"),
    ("name: allreduce 1 MiB busbw (ring and tree)", "name: allreduce 8 B p99",
     ":24: field checks.1.name: 'allreduce 8 B p99' is the name of checks.0 too"),
    ("algo: [ring, tree]", "algo: [ring, ring]", ":26: field checks.1.select.algo.1: 'ring' is given twice"),
    ("algo: [ring, tree]", "algo: [ring, treee]",
     ":26: field checks.1.select.algo.1: 'treee' is no value of allreduce.algo, which is one of native, ring, tree; "
     "did you mean 'tree'?"),
    ("algo: [ring, tree]", "algo: [ring, tree], colour: red",
     ":26: field checks.1.select.colour: family 'allreduce' has no parameter 'colour'"),
])
def test_a_profile_check_that_cannot_be_meant_is_refused_in_words_at_load(tmp_path, capsys, old, new, said):
    path = _profile(tmp_path, old, new)
    assert main(["accept", "--profile", str(path), "--run", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert f"{path}{said}" in err and "valid under" not in err, err


# -- 7: a text log whose spaces became tabs -----------------------------------------------------------

@pytest.mark.parametrize("tab", ["\t", "\t\t"])
def test_a_text_log_with_tabs_for_spaces_imports_as_the_log_does(tmp_path, tab):
    text = H100_TEXT.read_text()
    path = tmp_path / "tabs.txt"
    path.write_text("\n".join(tab.join(line.split(" ")) for line in text.splitlines()) + "\n")
    assert main(["import-nccl-tests", str(H100_TEXT), "--out", str(tmp_path / "spaces")]) == 0
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "tabs")]) == 0

    def metrics(run: str) -> list:
        lines = (tmp_path / run / "results.jsonl").read_text().splitlines()
        return [(r["case_id"], r["metrics"]) for r in map(json.loads, lines)]

    assert metrics("tabs") == metrics("spaces")


# -- 8: a case ID's error quotes the value as the user wrote it ---------------------------------------

@pytest.mark.parametrize("case_id, said, not_said", [
    ("kv_alloc/speedup=1e300,trace=azure_conv", "'kv_alloc/speedup=1e300,trace=azure_conv': speedup=1e300 is not allowed",
     "1e+300"),
    ("kv_alloc/trace=azure_conv,speedup=1e300", "'kv_alloc/trace=azure_conv,speedup=1e300': speedup=1e300", "1e+300"),
])
def test_a_case_id_error_quotes_the_users_text(case_id, said, not_said):
    with pytest.raises(CaseIdError) as info:
        registry.parse(case_id)
    assert said in str(info.value) and not_said not in str(info.value), info.value
