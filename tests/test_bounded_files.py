"""Every file critpath reads from outside is opened as a regular file, read within a declared size
and parsed within a declared count and depth; a file past one is refused naming it, and a FIFO or
/dev/zero in its place is refused at once.

On the code before each fix, each test failed: a hang, memory without bound, a traceback naming
no file, or a run of a few thousand records that took minutes to show."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import RUN_FINGERPRINT

from harness.cli import main
from harness.core import store
from harness.core.claim import DirectoryClaimed, claim_dir
from harness.core.jsonfile import JsonFileError, JsonLimits, loads_strict
from harness.core.store import RECORD_LIMITS, ResultsFileError, iter_records, load_run
from harness.gate.owned import MAX_OWNER_BYTES, OWNER_FILE
from harness.gate.trees import checkout, sweep_orphans
from harness.gatepower.resample import MeasuredGate
from harness.history import asvfiles
from harness.history.campaign import recorded_cases
from harness.history.view import load_history
from harness.nccltests import source
from harness.nccltests.values import NcclTestsFormatError
from harness.tables.frame import records_of
from conftest import derived_record

ROOT = Path(__file__).resolve().parents[1]
NOOP = "selftest/fault_rank=0,mode=noop,world=1"


def _spin(i: int) -> str:
    return f"selftest/fault_rank=0,mode=spin,spin_iters={i},world=1"


def _run(path: Path, n: int) -> Path:
    """A finished run of ``n`` verified records, each a case of its own."""
    path.mkdir()
    records = [derived_record(_spin(i + 1), [1000 + i, 1100, 1200]) for i in range(n)]
    (path / store.RESULTS).write_text("".join(r.to_json() + "\n" for r in records))
    (path / store.FINGERPRINT).write_text(json.dumps(RUN_FINGERPRINT))
    (path / store.RUN_META).write_text(json.dumps({
        "run_id": "t", "state": "finished", "cases_total": n,
        store.PLANNED: store.planned_digest(r.case_id for r in records)}))
    return path


def _record_line(**extra) -> str:
    data = json.loads(derived_record(NOOP, [1000, 1100, 1200]).to_json())
    data["extra"] = extra
    return json.dumps(data, separators=(",", ":")) + "\n"


# -- results.jsonl: a run's wholeness judged once, not once per record --------------------------

def test_the_frame_of_a_run_judges_its_wholeness_once_however_many_records_it_holds(tmp_path, monkeypatch):
    run = load_run(_run(tmp_path / "run", 40))
    calls = []
    judge = store.incompleteness
    monkeypatch.setattr(store, "incompleteness", lambda *a, **k: calls.append(1) or judge(*a, **k))
    df = records_of([run])
    assert len(df) == 40 and not df["incomplete"].any()
    assert run.incomplete == ""  # asked again: the judgement made once is kept
    assert len(calls) == 1  # each of the 40 rows judged all 40 records: quadratic in the records


# -- results.jsonl: lines and records counted --------------------------------------------------

def test_a_flood_of_blank_lines_is_refused_at_the_line_cap_naming_the_file(tmp_path):
    path = tmp_path / store.RESULTS
    path.write_text(_record_line() + "\n" * (store.MAX_RESULTS_LINES + 5))
    with pytest.raises(ResultsFileError, match=rf"^{path}:{store.MAX_RESULTS_LINES + 1}: more than "
                                               rf"{store.MAX_RESULTS_LINES} lines"):
        list(iter_records(path))


def test_blank_lines_below_the_cap_are_still_passed_over(tmp_path):
    path = tmp_path / store.RESULTS
    path.write_text("\n" * 100 + _record_line() + "\n" * 100)
    assert [r.case_id for r in iter_records(path)] == [NOOP]


@pytest.mark.parametrize("skip_invalid, middle", [(False, _record_line() * 2), (True, "not a record\n" * 2)])
def test_more_records_than_a_run_holds_are_refused_even_when_invalid_ones_are_skipped(tmp_path, monkeypatch,
                                                                                   skip_invalid, middle):
    monkeypatch.setattr(store, "MAX_RUN_CASES", 3)
    path = tmp_path / store.RESULTS
    path.write_text(_record_line() + middle + "\n" + _record_line())
    with pytest.raises(ResultsFileError, match=rf"^{path}:5: more than 3 records; a run holds at most 3"):
        list(iter_records(path, skip_invalid=skip_invalid, skipped=[]))


# -- results.jsonl: what one line may hold once parsed -------------------------------------------

def test_a_record_with_more_keys_than_a_record_holds_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / store.RESULTS
    many = {f"k{i}": 0 for i in range(RECORD_LIMITS.keys + 1)}
    path.write_text(_record_line() + _record_line(many=many))
    with pytest.raises(ResultsFileError, match=rf"^{path}:2: \d+ keys; at most {RECORD_LIMITS.keys} are read"):
        list(iter_records(path))


def test_a_record_with_more_values_than_a_record_holds_is_refused(tmp_path):
    path = tmp_path / store.RESULTS
    path.write_text(_record_line(floats=[0.5] * (RECORD_LIMITS.values + 1)))
    with pytest.raises(ResultsFileError, match=rf"^{path}:1: about \d+ values .*at most {RECORD_LIMITS.values}"):
        list(iter_records(path))


def test_a_record_nested_deeper_than_a_record_is_refused_naming_the_depth(tmp_path):
    path = tmp_path / store.RESULTS
    deep: list = []
    for _ in range(RECORD_LIMITS.depth):
        deep = [deep]
    path.write_text(_record_line(deep=deep))  # the record, extra and depth + 1 lists
    with pytest.raises(ResultsFileError, match=rf"^{path}:1: nested {RECORD_LIMITS.depth + 3} deep; at most "
                                               rf"{RECORD_LIMITS.depth} levels"):
        list(iter_records(path))


LIMITS = JsonLimits(keys=2, values=4, depth=2)


@pytest.mark.parametrize("text", [
    '{"a": "[[[[{{{{::::,,,,"}',  # brackets, colons and commas inside a string are no structure
    '{"a\\\\": "b\\"[[[[::,,", "c": 1}',  # nor after an escaped backslash or quote
    '["\\\\\\"{{{{", 1]',
    '[[1, 2], 3]',
])
def test_what_lies_inside_strings_is_not_counted_against_the_limits(text):
    assert loads_strict(text, "f.json", LIMITS) == json.loads(text)


@pytest.mark.parametrize("text, message", [
    ('{"a": 1, "b": 2, "c": 3}', "f.json: 3 keys; at most 2 are read"),
    ('[1, 2, 3, 4, 5]', "f.json: about 5 values"),
    ('[[["x"]]]', "f.json: nested 3 deep; at most 2 levels are read"),
    (b'[[[{"[": "]]]"}]]]', "f.json: nested 4 deep"),
])
def test_text_past_a_limit_is_refused_naming_the_limit(text, message):
    with pytest.raises(JsonFileError) as err:
        loads_strict(text, "f.json", LIMITS)
    assert str(err.value).startswith(message)


# -- asv results: each file read bounded and checked; a bad one skipped, named and counted -------

ASV = Path(__file__).parent / "fixtures" / "asv_results"
THIRD = "33333333-existing-py_usr_bin_python3.json"


def _asv_copy(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    shutil.copytree(ASV, results)
    return results


def _edit_third(results: Path, edit) -> Path:
    path = results / "ci-runner" / THIRD
    data = json.loads(path.read_text())
    text = edit(data)
    path.write_text(text if isinstance(text, str) else json.dumps(data))
    return path


def _first_value(data: dict, value) -> None:
    data["results"][next(iter(data["results"]))][0][0] = value


FIRST = "results.bench_families.Allreduce.track_p50_us"


@pytest.mark.parametrize("edit, why", [
    (lambda d: json.dumps(d).replace(f'"date": {d["date"]}', '"date": 1e400'), "field date: expected an integer, got inf"),
    (lambda d: d.update(date="2026-01-01"), "field date: expected an integer"),
    (lambda d: _first_value(d, "abc"), f"field {FIRST}.result[0]: expected a number, got 'abc'"),
    (lambda d: _first_value(d, float("inf")), f"field {FIRST}.result[0]: inf is not a finite number"),
    (lambda d: _first_value(d, True), f"field {FIRST}.result[0]: expected a number, got True"),
    (lambda d: d["results"][next(iter(d["results"]))][0].pop(), f"field {FIRST}.result: expected a value for each of "
                                                                 "its 2 cases, got 1 values"),
    (lambda d: d.update(requirements=[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]), "nested 20 deep; at most 16"),
    (lambda d: "[" * 100_000 + "]" * 100_000, "nested 100000 deep"),
    (lambda d: d.update(version=1), "field version: 1 is outside the range"),
    (lambda d: d.pop("commit_hash") and None, "field commit_hash: expected a non-empty string"),
    (lambda d: d["params"].update(machine="other"), "field params.machine: 'other', in the directory of machine "
                                                     "'ci-runner'"),
    (lambda d: d.update(results=[]), "field results: expected an object, got list"),
    (lambda d: '{"version": 2, "version": 2}', 'the key "version" appears twice'),
])
def test_an_asv_file_that_is_not_asvs_is_skipped_naming_it_and_the_field(tmp_path, edit, why):
    results = _asv_copy(tmp_path)
    path = _edit_third(results, edit)
    skipped: list = []
    series = load_history(results, skipped)
    assert [item.path for item in skipped] == [path]
    assert skipped[0].message.startswith(str(path)) and why in skipped[0].message
    assert {p.commit[:8] for s in series for p in s.points} == {"11111111", "22222222"}  # the others still drawn


def test_a_missing_value_is_still_missing_and_not_a_skipped_file(tmp_path):
    results = _asv_copy(tmp_path)
    _edit_third(results, lambda d: (_first_value(d, None), d["results"]["bench_families.Rpc.track_p50_us"][0]
                                    .__setitem__(0, float("nan"))))
    skipped: list = []
    series = load_history(results, skipped)
    assert skipped == []
    native = next(s for s in series if s.benchmark.endswith("Allreduce.track_p50_us") and "native" in s.case_id)
    assert [p.commit[:8] for p in native.points] == ["11111111", "22222222"]


@pytest.mark.parametrize("plant", ["fifo", "dev_zero", "dev_zero_machine"])
def test_a_fifo_or_dev_zero_in_an_asv_results_directory_is_skipped_at_once_and_the_report_counts_it(tmp_path, plant):
    results = _asv_copy(tmp_path)
    target = results / "ci-runner" / ("machine.json" if plant == "dev_zero_machine" else "44444444-x.json")
    if plant == "fifo":
        os.mkfifo(target)
    else:
        target.unlink(missing_ok=True)
        target.symlink_to("/dev/zero")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "harness", "report", "--asv-results", str(results), "--out", str(out)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)  # hung, or grew without bound
    if plant == "dev_zero_machine":  # no file of the machine can be read as its: none is shown
        assert proc.returncode == 2, proc.stderr
        assert "no asv track_* results found (3 files skipped" in proc.stderr
        assert f"{target}: a character device, not a regular file" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    kind = "a FIFO" if plant == "fifo" else "a character device"
    assert f"critpath report: warning: skipped {target}: {kind}, not a regular file" in proc.stderr
    assert f"1 file of the results directory skipped, each for the reason given: nothing of theirs is shown " \
           f"(each is named on stderr too): {target}: {kind}" in (out / "report.md").read_text()


def test_a_results_directory_of_more_files_than_a_history_reads_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(asvfiles, "MAX_RESULT_FILES", 2)
    assert main(["report", "--asv-results", str(ASV), "--out", str(tmp_path / "out")]) == 2
    assert f"{ASV}: more than 2 asv results files" in capsys.readouterr().err


def test_the_history_campaign_measures_again_what_a_bad_file_holds_and_says_so(tmp_path, capsys):
    results = _asv_copy(tmp_path)
    sha = "3" * 40
    assert "rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=uds" in recorded_cases(results, "ci-runner", sha)
    path = _edit_third(results, lambda d: d.update(date=float("inf")))
    assert recorded_cases(results, "ci-runner", sha) == set()
    assert f"critpath history: warning: skipped {path}: field date: expected an integer, got inf" in \
        capsys.readouterr().err


# -- nccl-tests text logs: a cap on lines -------------------------------------------------------

NCCL_LOG = Path(__file__).parent / "fixtures" / "nccl_tests" / "all_reduce_h100.txt"


@pytest.mark.parametrize("ending", ["\n", "\r"])  # a lone CR ends a line too, as the parser counts them
def test_an_nccl_tests_log_of_more_lines_than_the_cap_is_refused_naming_the_file(tmp_path, monkeypatch, ending):
    monkeypatch.setattr(source, "MAX_TEXT_LINES", 100)
    path = tmp_path / "flood.txt"
    path.write_text(("#" + ending) * 101)
    with pytest.raises(NcclTestsFormatError, match=rf"^{path}:101: more than 100 lines; nccl-tests output \(text\) is "
                                                   r"at most 100 lines"):
        source.read_output(path)


def test_an_nccl_tests_log_within_the_line_cap_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_TEXT_LINES", len(NCCL_LOG.read_text().splitlines()))
    parsed, _ = source.read_output(NCCL_LOG)
    assert parsed.rows


# -- gate-power --report: the document's shape checked ------------------------------------------

GATE_RPC = "rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=tcp_nodelay"


def _power_doc() -> dict:
    cell = {"name": f"{GATE_RPC}: A/A", "case_ids": [GATE_RPC], "condition": "A/A", "candidate": "a", "target": None}
    trial = {"cell": cell["name"], "trial": 0, "exit_code": 0, "wall_s": 100.0,
             "cases": {GATE_RPC: {"outcome": "unchanged", "ratio": 1.01, "n_pairs": 30, "mde": 0.06}}}
    return {"base": "0" * 40, "settings": {"budget_s": 180, "min_effect": 0.05, "statistic": None, "rounds": None},
            "cells": [cell], "trials": [trial], "tool_trials": []}


@pytest.mark.parametrize("edit, why", [
    (lambda d: [], "field (document): [] is not of type 'object'"),
    (lambda d: {}, "field base: 'base' is a required property"),
    (lambda d: d["settings"].pop("budget_s") and d, "field settings.budget_s: 'budget_s' is a required property"),
    (lambda d: d["cells"][0].update(case_ids="x") or d, "field cells[0].case_ids: 'x' is not of type 'array'"),
    (lambda d: d["trials"][0]["cases"][GATE_RPC].update(ratio=-1) or d,
     f"field trials[0].cases.{GATE_RPC}.ratio: -1 is less than or equal to the minimum of 0"),
    (lambda d: d["trials"][0].update(wall_s=float("inf")) or d, "field trials[0].wall_s: inf is not a finite number"),
    (lambda d: d["trials"][0].update(cell="gone") or d, "field trials[0].cell: 'gone' is none of the cells"),
    (lambda d: d.update(resampled={"gates_per_cell": 5, "rows": [{"cell": d["cells"][0]["name"], "gates": 5}]}) or d,
     "field resampled.rows[0].distinct_pairs: 'distinct_pairs' is a required property"),
])
def test_a_gate_power_report_of_another_shape_is_refused_naming_the_file_and_field(tmp_path, capsys, edit, why):
    path = tmp_path / "power.json"
    path.write_text(json.dumps(edit(_power_doc())))
    assert main(["gate-power", "--report", str(path)]) == 2
    assert f"critpath gate-power: error: {path}: not a readable gate-power measurement: {why}" in \
        capsys.readouterr().err


def test_a_gate_power_report_as_gate_power_writes_it_is_still_printed(tmp_path, capsys):
    path = tmp_path / "power.json"
    path.write_text(json.dumps(_power_doc()))
    assert main(["gate-power", "--report", str(path)]) == 0
    assert "false alarms: 0" in capsys.readouterr().out


@pytest.mark.parametrize("edit, why", [
    (lambda d: d["cases"][0]["detail"]["pairs"].append("nan"), "field cases[0].detail.pairs[3]: expected a number"),
    (lambda d: d["cases"][0]["detail"]["pairs"].append(float("inf")), "field cases[0].detail.pairs[3]: inf is not"),
    (lambda d: d["extra"].update(generation_s=[True]), "field extra.generation_s[0]: expected a number, got True"),
    (lambda d: d.update(cases={}), "field cases: expected a list, got dict"),
])
def test_a_gate_json_that_is_not_the_gates_is_refused_naming_its_field(tmp_path, edit, why):
    doc = {"cases": [{"case_id": GATE_RPC, "detail": {"pairs": [0.01, -0.02, 0.0]}}],
           "extra": {"generation_s": [4.0], "measure_wall_s": 15.0}}
    edit(doc)
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError) as err:
        MeasuredGate.load(path)
    assert str(err.value).startswith(f"{path}: not a readable gate result: {why}")


def test_resume_refuses_a_measurement_lacking_what_it_carries_on_from(tmp_path, capsys):
    (tmp_path / "power.json").write_text(json.dumps({**_power_doc(), "branches": {}, "aa": "a"}))
    assert main(["gate-power", "--resume", "--out", str(tmp_path)]) == 2
    assert "power.json: not a readable gate-power measurement: field clone: missing: --resume carries on from it" in \
        capsys.readouterr().err


# -- a held claim file: anything but the claim's small object names no holder -------------------

def _held_claim(directory: Path, content: bytes) -> int:
    """``directory``'s claim file holding ``content``, locked on a descriptor of its own, as another
    process holds it (a lock belongs to the open file, in one process too): close it to let go."""
    directory.mkdir()
    claim = directory / ".critpath-claim"
    claim.write_bytes(content)
    fd = os.open(claim, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


@pytest.mark.parametrize("content", [
    b"[" * 50_000,  # nested past the interpreter's recursion: a RecursionError
    b"[]",
    b'{"pid": 1, "host": "h", "command": "run", "started_at": "t", "argv": {"a": 1}}',
    json.dumps({f"k{i}": 0 for i in range(50_000)}).encode(),
    json.dumps({"pid": 1, "host": "h", "command": "run", "started_at": "t", "argv": [[["deep"]]]}).encode(),
])
def test_a_held_claim_holding_anything_but_a_claim_names_no_holder(tmp_path, content):
    fd = _held_claim(tmp_path / "out", content)
    try:
        with pytest.raises(DirectoryClaimed, match=r"another process holds the lock on .*; the file names no holder"):
            claim_dir(tmp_path / "out", "report")
    finally:
        os.close(fd)


def test_report_into_a_held_directory_whose_claim_is_nested_deep_is_refused_not_a_traceback(tmp_path, capsys):
    run = _run(tmp_path / "run", 1)
    out = tmp_path / "out"
    fd = _held_claim(out, b"[" * 50_000)
    try:
        assert main(["report", str(run), "--out", str(out)]) == 2
    finally:
        os.close(fd)
    assert f"{out} is in use: another process holds the lock on {out / '.critpath-claim'}; the file names no " \
           "holder" in capsys.readouterr().err


# -- the gate's owner files and worktree records: small, regular, or left alone with a warning ----

SWEEP = "import sys; from harness.gate.trees import sweep_orphans; print('\\n'.join(sweep_orphans(sys.argv[1])))"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo_and_tmp(tmp_path, monkeypatch):
    """A one-commit repository, and this test's own temp dir, where checkout puts its worktrees."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo, where = tmp_path / "repo", tmp_path / "tmp"
    repo.mkdir()
    where.mkdir()
    _git(repo, "init", "-q")
    (repo / "README").write_text("x\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return repo, where


def _worktree_owned_by(repo: Path, where: Path, plant) -> Path:
    """A worktree where checkout puts one, its owner file made by ``plant(path)``."""
    parent = where / "critpath-gate-odd-x1y2"
    parent.mkdir()
    plant(parent / OWNER_FILE)
    _git(repo, "worktree", "add", "--detach", "--quiet", "--", str(parent / "tree"), "HEAD")
    return parent / "tree"


@pytest.mark.parametrize("plant, why", [
    (os.mkfifo, "a FIFO, not a regular file"),
    (lambda p: p.symlink_to("/dev/zero"), "a character device, not a regular file"),
    (lambda p: p.write_text("x" * (MAX_OWNER_BYTES + 1)), f"a critpath owner file is at most {MAX_OWNER_BYTES} bytes"),
])
def test_an_owner_file_that_is_a_fifo_a_device_or_too_large_is_left_alone_at_once(repo_and_tmp, plant, why):
    repo, where = repo_and_tmp
    tree = _worktree_owned_by(repo, where, plant)
    proc = subprocess.run([sys.executable, "-c", SWEEP, str(repo)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={**os.environ, "TMPDIR": str(where), "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr  # hung on the FIFO, grew without bound on /dev/zero
    assert f"left the worktree {tree} alone: its {OWNER_FILE} is not critpath's (unreadable: " in proc.stdout
    assert why in proc.stdout
    assert str(tree) in _git(repo, "worktree", "list")


@pytest.mark.parametrize("text, why", [
    ("[" * 2000 + "]" * 2000, "nested 2000 deep"),  # a RecursionError on every later gate and history
    ('{"command": "critpath gate", "pid": 1, "host": "h", "started": null, "extra": 1}', "5 keys; at most 4"),
    ('{"command": "critpath gate", "pid": 1, "pid": 2, "host": "h"}', 'the key "pid" appears twice'),
])
def test_an_owner_file_nested_deep_or_past_its_fields_is_left_alone_with_a_warning(repo_and_tmp, text, why):
    repo, where = repo_and_tmp
    tree = _worktree_owned_by(repo, where, lambda p: p.write_text(text))
    said = sweep_orphans(repo)
    assert len(said) == 1 and said[0].startswith(f"left the worktree {tree} alone") and why in said[0], said
    assert str(tree) in _git(repo, "worktree", "list")


@pytest.mark.parametrize("plant, why", [
    (os.mkfifo, "a FIFO, not a regular file"),
    (lambda p: p.symlink_to("/dev/zero"), "a character device, not a regular file"),
    (lambda p: p.write_text("[" * 2000 + "]" * 2000), "nested 2000 deep"),
])
def test_a_worktree_record_that_is_not_critpaths_is_left_alone_and_later_sweeps_go_on(repo_and_tmp, plant, why):
    repo, where = repo_and_tmp
    records = repo / ".git" / "critpath-worktrees"
    records.mkdir()
    record = records / "critpath-gate-odd-x1y2.json"
    plant(record)
    proc = subprocess.run([sys.executable, "-c", SWEEP, str(repo)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={**os.environ, "TMPDIR": str(where), "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert f"left the record {record} alone: it is not critpath's (" in proc.stdout and why in proc.stdout
    with checkout(repo, "HEAD", "base") as tree:  # a gate still checks out and removes its trees
        assert (tree.path / "README").read_text() == "x\n"
    assert _git(repo, "worktree", "list").count("\n") == 1


# -- critpath history: the measured repository's asv.conf.json -----------------------------------

@pytest.mark.parametrize("plant, why", [
    (os.mkfifo, "asv.conf.json: a FIFO, not a regular file: a config of asv is read from a file"),
    (lambda p: p.symlink_to("/dev/zero"), "asv.conf.json: a character device, not a regular file"),
    (lambda p: p.write_text("[" * 5000 + "]" * 5000), "asv.conf.json: cannot read asv's config: nested too deep"),
    (lambda p: p.write_text("[]"), "asv.conf.json: cannot read asv's config: expected an object, got list"),
    (lambda p: p.write_text('{"results_dir": 5, // a comment\n}'), "asv.conf.json: field results_dir: expected a "
                                                                     "directory, got 5"),
])
def test_history_refuses_an_asv_config_it_cannot_read_at_once_naming_it(repo_and_tmp, tmp_path, plant, why):
    repo, where = repo_and_tmp
    (repo / "b").write_text("y\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "two")
    plant(repo / "asv.conf.json")
    proc = subprocess.run([sys.executable, "-m", "harness", "history", "--repo", str(repo), "--out",
                           str(tmp_path / "out"), "HEAD~1..HEAD"], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={**os.environ, "TMPDIR": str(where)})  # hung on the FIFO
    assert proc.returncode == 2, proc.stderr
    assert f"critpath history: error: {repo / why}" in proc.stderr
