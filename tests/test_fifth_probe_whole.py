"""Every run-shaped input is judged from its records, not its own claim, however it is named: a
run's results file, a pipeline or MoE run read by its own command, a gate's round; run.json's
fields read once and refused naming file and field; a gate's workers bounded; history plots each
in a file of their own."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import derived_record, finished_gate

from harness.cli import main
from harness.core.store import (
    FINGERPRINT,
    RESULTS,
    RUN_META,
    ResultsFileError,
    append_record,
    load_run,
)

RUN = Path(__file__).parent / "fixtures" / "run_mixed"


def _copy(tmp_path: Path, name: str = "run") -> Path:
    run = tmp_path / name
    shutil.copytree(RUN, run)
    return run


def _first_records(run: Path, n: int) -> None:
    lines = (run / RESULTS).read_text().splitlines(keepends=True)
    (run / RESULTS).write_text("".join(lines[:n]))


def _edit_meta(run: Path, **fields) -> None:
    meta = json.loads((run / RUN_META).read_text())
    for name, value in fields.items():
        if value is ...:
            meta.pop(name, None)
        else:
            meta[name] = value
    (run / RUN_META).write_text(json.dumps(meta))


# -- a run's results file is that run ---------------------------------------------------------------

def test_a_runs_results_file_is_judged_as_its_directory(tmp_path, capsys):
    run = _copy(tmp_path)
    _first_records(run, 1)
    assert main(["show", str(run / RESULTS)]) == 1
    assert "incomplete: 1 of 53 cases" in capsys.readouterr().err
    assert load_run(run / RESULTS).incomplete.startswith("incomplete: 1 of 53 cases")


def test_compare_refuses_a_cut_runs_results_file_as_it_refuses_the_directory(tmp_path, capsys):
    cut, whole = _copy(tmp_path, "cut"), _copy(tmp_path, "whole")
    _first_records(cut, 1)
    assert main(["compare", str(cut / RESULTS), str(whole / RESULTS), "--out", str(tmp_path / "g")]) == 2
    assert "incomplete: 1 of 53 cases" in capsys.readouterr().err


def test_a_bare_results_file_is_still_taken_as_it_is(tmp_path, capsys):
    alone = tmp_path / "alone.jsonl"  # a results.jsonl is its directory's: only another name is bare
    shutil.copy(RUN / RESULTS, alone)
    assert main(["show", str(alone)]) == 1  # one record of the fixture failed: 1, with no incompleteness
    assert "incomplete" not in capsys.readouterr().err


# -- a run without its fingerprint ------------------------------------------------------------------

def test_a_run_without_its_fingerprint_is_incomplete(tmp_path, capsys):
    run = _copy(tmp_path)
    (run / FINGERPRINT).unlink()
    assert load_run(run).incomplete == f"incomplete: 53 cases and no {FINGERPRINT}, which a run writes before its first case"
    main(["show", str(run)])
    assert f"no {FINGERPRINT}" in capsys.readouterr().err


# -- run.json's fields --------------------------------------------------------------------------------

def test_a_null_run_id_does_not_skip_the_cross_check(tmp_path):
    run = _copy(tmp_path)
    _edit_meta(run, run_id=None)
    with pytest.raises(ResultsFileError, match=r"run.json: field run_id: None is not a run ID"):
        load_run(run)


def test_an_unknown_run_schema_is_refused_naming_it(tmp_path, capsys):
    run = _copy(tmp_path)
    _edit_meta(run, schema="critpath.run/999")
    assert main(["show", str(run)]) == 2
    err = capsys.readouterr().err
    assert "run.json: field schema: 'critpath.run/999'" in err and "Traceback" not in err


@pytest.mark.parametrize("field,stamp", [("started_at", "0001-01-01T00:00:00+01:00"),
                                         ("finished_at", "9999-12-31T23:59:59-01:00"),
                                         ("started_at", "yesterday"), ("finished_at", 12)])
def test_a_run_json_time_out_of_range_or_unparseable_is_refused_naming_file_and_field(tmp_path, capsys, field, stamp):
    run = _copy(tmp_path)
    _edit_meta(run, **{field: stamp})
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert f"{run / RUN_META}: field {field}:" in err and "Traceback" not in err
    assert not (tmp_path / "rep").exists() or not any((tmp_path / "rep").iterdir())


def test_an_imports_unknown_start_is_still_read(tmp_path):
    run = _copy(tmp_path)
    _edit_meta(run, started_at="unknown", finished_at=None)
    assert load_run(run).meta["started_at"] == "unknown"


# -- pipeline-compare, moe-report and moe-sim read a run as the one loader judges it ----------------

def _running(run: Path) -> None:
    _edit_meta(run, state="running", finished_at=None)


def _another_runs_record(run: Path) -> None:
    line = json.loads((run / RESULTS).read_text().splitlines()[-1])
    line["run_id"] = "another-run"
    with open(run / RESULTS, "a") as f:
        f.write(json.dumps(line) + "\n")


def _duplicated(run: Path) -> None:
    lines = (run / RESULTS).read_text().splitlines(keepends=True)
    pipeline = next(line for line in lines if '"family": "pipeline"' in line or '"family":"pipeline"' in line)
    with open(run / RESULTS, "a") as f:
        f.write(pipeline)


@pytest.mark.parametrize("command", [["pipeline-compare"], ["moe-report"], ["moe-sim", "--from-run"]])
def test_a_whole_run_is_read_by_the_pipeline_and_moe_commands(tmp_path, command):
    assert main([*command, str(_copy(tmp_path))]) == 0


@pytest.mark.parametrize("command", [["pipeline-compare"], ["moe-report"], ["moe-sim", "--from-run"]])
@pytest.mark.parametrize("spoil,why", [(_running, "incomplete: 53 of 53 cases, run.json says running"),
                                       (_another_runs_record, "mixed: records of 2 runs"),
                                       (_duplicated, "not whole: a case recorded more than once")])
def test_the_pipeline_and_moe_commands_refuse_a_run_that_is_not_whole(tmp_path, capsys, command, spoil, why):
    run = _copy(tmp_path)
    spoil(run)
    assert main([*command, str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run}: {why}" in err and "Traceback" not in err


# -- compare on a gate's own directories --------------------------------------------------------------

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


def _gate_side(root: Path, side: str, center_ns: int, generations: int = 8) -> Path:
    """A gate side as a gate leaves it: a generation per worker process (one run ID), a round each."""
    for gen in range(generations):
        round_dir = root / side / f"gen-{gen:03d}" / "round-000"
        round_dir.mkdir(parents=True)
        samples = [center_ns + 10 * gen + i for i in range(50)]
        append_record(round_dir / RESULTS, derived_record(NOOP, samples, run_id=f"{side}-{gen}"))
    finished_gate(root)
    return root / side


def _append_to_first_round(side: Path, record) -> Path:
    results = side / "gen-000" / "round-000" / RESULTS
    append_record(results, record)
    return results


@pytest.mark.parametrize("run_id,why", [("another-gate", "mixed: records of 2 runs in one generation (gen-000"),
                                        ("base-0", "not whole: a case recorded more than once")])
def test_compare_refuses_a_gate_round_holding_another_runs_record_or_a_case_twice(tmp_path, capsys, run_id, why):
    base, cand = _gate_side(tmp_path, "base", 10_000), _gate_side(tmp_path, "candidate", 11_000)
    assert main(["compare", str(base), str(cand), "--out", str(tmp_path / "ok")]) in (0, 1)
    capsys.readouterr()
    spoiled = _append_to_first_round(base, derived_record(NOOP, [1_000] * 50, run_id=run_id))
    assert main(["compare", str(base), str(cand), "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert f"{spoiled}: {why}" in err and "Traceback" not in err


def test_a_later_round_of_another_run_is_refused_too(tmp_path, capsys):
    base, cand = _gate_side(tmp_path, "base", 10_000), _gate_side(tmp_path, "candidate", 11_000)
    second = base / "gen-001" / "round-001" / RESULTS
    second.parent.mkdir()
    append_record(second, derived_record(NOOP, [10_000] * 50, run_id="another-gate"))
    (cand / "gen-001" / "round-001").mkdir()
    append_record(cand / "gen-001" / "round-001" / RESULTS, derived_record(NOOP, [11_000] * 50, run_id="candidate-1"))
    assert main(["compare", str(base), str(cand), "--out", str(tmp_path / "g")]) == 2
    assert f"{second}: mixed: records of 2 runs in one generation (gen-001" in capsys.readouterr().err


# -- history plots: a file each ---------------------------------------------------------------------

ASV_MACHINE = Path(__file__).parent / "fixtures" / "asv_results" / "ci-runner"


@pytest.mark.parametrize("machines", [("m.1", "m-1", "m_1"), ("m" * 240, "m" * 239 + "n")])
def test_every_machines_history_plot_has_a_file_name_of_its_own_and_a_bounded_one(tmp_path, machines):
    from harness.claims.baselines import load_dir
    from harness.history.view import MAX_PLOT_NAME_CHARS, history_blocks

    for n, machine in enumerate(machines):
        copy = shutil.copytree(ASV_MACHINE, tmp_path / "asv" / f"machine-{n}")
        for doc in copy.glob("*.json"):  # machine.json and each result's params name the machine
            data = json.loads(doc.read_text())
            where = data["params"] if "params" in data else data
            where["machine"] = machine
            doc.write_text(json.dumps(data))
    names = [b.name for b in history_blocks(tmp_path / "asv", load_dir()) if hasattr(b, "png")]
    assert len(names) == 3 * len(machines)
    assert len(set(names)) == len(names)  # no machine's plot replaces another's
    assert max(len(name.encode()) for name in names) <= MAX_PLOT_NAME_CHARS


# -- a gate's worker that misbehaves -----------------------------------------------------------------

class _Tree:
    """Where a side runs its worker: this checkout, its environment."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def env(self) -> dict:
        import os

        return dict(os.environ)


def _worker(tmp_path: Path, body: str):
    """A candidate WorkerSide whose 'python' is a script that does ``body`` instead of serving."""
    import os
    import sys

    from harness.gate.sides import WorkerSide

    script = tmp_path / "worker.py"
    script.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    os.chmod(script, 0o755)
    side = WorkerSide(_Tree(tmp_path), "candidate", 0, tmp_path / "gen-000", {"timeout_s": 5}, python=str(script))
    side.start()
    return side


def test_a_worker_writing_forever_without_a_newline_is_stopped_at_the_line_cap(tmp_path):
    import time

    from harness.gate.sides import SideError
    from harness.run.protocol import MAX_WORKER_LINE_BYTES

    side = _worker(tmp_path, "chunk = b'x' * 65536\nwhile True:\n    sys.stdout.buffer.write(chunk)")
    start = time.monotonic()
    try:
        with pytest.raises(SideError) as caught:
            side.await_ready(60)
    finally:
        side.kill()
    assert time.monotonic() - start < 30  # the line cap, not the start wait, ended it
    message = str(caught.value)
    assert message.startswith(f"candidate worker wrote a line of more than {MAX_WORKER_LINE_BYTES} bytes")
    assert str(tmp_path / "gen-000" / "worker.log") in message


def test_a_worker_line_nested_past_the_limit_names_the_side_not_a_recursion_error(tmp_path):
    from harness.gate.sides import SideError

    side = _worker(tmp_path, "sys.stdout.write('[' * 200000 + '\\n'); sys.stdout.flush(); time.sleep(60)")
    try:
        with pytest.raises(SideError, match=r"^candidate worker wrote a line that is no message: .*nest"):
            side.await_ready(30)
    finally:
        side.kill()


def test_a_workers_start_wait_is_what_the_budget_leaves(tmp_path):
    from harness.gate.schedule import MIN_START_WAIT_S, START_TIMEOUT_S, Plan, Schedule

    now = [0.0]
    schedule = Schedule([NOOP], {}, "worker", Plan(budget_s=8.0), tmp_path, "p50", decide=None,
                        clock=lambda: now[0], started_at=0.0)
    now[0] = 2.0
    assert schedule._start_wait_s() == 6.0  # not START_TIMEOUT_S: a worker that never answers took 180 s of 8
    now[0] = 7.5
    assert schedule._start_wait_s() == MIN_START_WAIT_S
    assert Schedule([NOOP], {}, "worker", Plan(budget_s=3600.0), tmp_path, "p50", decide=None,
                    clock=lambda: 0.0, started_at=0.0)._start_wait_s() == START_TIMEOUT_S
