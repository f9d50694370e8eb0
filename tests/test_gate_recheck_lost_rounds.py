"""compare on a gate's own directories gives no verdict the gate itself did not reach: a round a
dead or hung worker never finished is a failure of its case, on disk (the gate records it), and
read back as one; and a gate that did not finish (no gate.json) is incomplete, refused as a killed
run is."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from conftest import RUN_FINGERPRINT, derived_record, finished_gate, gate_out

from harness.cli import main
from harness.core.store import RESULTS, RunDir, append_record, load_records
from harness.gate.outputs import EXIT_COULD_NOT_RUN

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
GENERATIONS = 15


def _gate(root: Path) -> Path:
    return gate_out(root, GENERATIONS)


def _compare(gate: Path, out: Path) -> tuple[int, dict]:
    code = main(["compare", str(gate / "base"), str(gate / "candidate"), "--out", str(out)])
    return code, json.loads((out / "gate.json").read_text())


def test_a_whole_gate_rechecks_to_a_verdict(tmp_path):
    code, data = _compare(_gate(tmp_path / "G"), tmp_path / "cm")
    assert code in (0, 1) and data["cases"][0]["outcome"] != "could_not_run", data["headline"]


def test_a_generation_whose_worker_left_no_round_is_a_failure_of_its_case(tmp_path, capsys):
    # Before: the generation was skipped, and "PASS: ... 14 pairs" read back from the rest.
    gate = _gate(tmp_path / "G")
    shutil.rmtree(gate / "candidate" / "gen-014" / "round-000")  # its worker was SIGKILLed in the round
    code, data = _compare(gate, tmp_path / "cm")
    assert code == EXIT_COULD_NOT_RUN, data["headline"]
    case = data["cases"][0]
    assert case["outcome"] == "could_not_run"
    assert "gen-014: the candidate side has 0 rounds where the base has 1" in case["reason"], case["reason"]
    assert str(gate / "candidate" / "gen-014") in case["reason"]


def test_a_failure_the_gate_recorded_for_a_dead_worker_is_read_back(tmp_path):
    # The dead worker's side went first: the other side never ran the generation's round.
    gate = _gate(tmp_path / "G")
    from harness.core import registry
    from harness.core.records import ErrorInfo, Record

    shutil.rmtree(gate / "base" / "gen-014" / "round-000")
    lost = gate / "candidate" / "gen-014" / "round-000" / RESULTS
    lost.unlink()
    append_record(lost, Record.failure(registry.parse(NOOP), "candidate-14",
                                       ErrorInfo("exit", "candidate worker closed its output (killed by SIGKILL)"),
                                       "gloo", "2026-01-01T00:00:00+00:00"))
    code, data = _compare(gate, tmp_path / "cm")
    assert code == EXIT_COULD_NOT_RUN, data["headline"]
    assert "gen-014: candidate: 1 of 1 runs not ok" in data["cases"][0]["reason"]
    assert "killed by SIGKILL" in data["cases"][0]["reason"]


@pytest.mark.parametrize("error", [None, "interrupted by SIGTERM; worktrees and processes were removed"])
def test_a_gate_that_did_not_finish_is_incomplete_and_gets_no_verdict(tmp_path, capsys, error):
    # Before: a SIGKILLed gate (no gate.json, a pair in flight) read back as "FAIL (regression)".
    gate = _gate(tmp_path / "G")
    if error is None:
        (gate / "gate.json").unlink()
        for side in ("base", "candidate"):  # the pair in flight: started, no round yet
            (gate / side / "gen-015").mkdir()
            (gate / side / "gen-015" / "worker.log").write_text("")
    else:
        finished_gate(gate, error=error)
    code, data = _compare(gate, tmp_path / "cm")
    assert code == EXIT_COULD_NOT_RUN and data["cases"] == [], data["headline"]
    said = capsys.readouterr().err
    if error is None:
        assert f"incomplete: {gate} holds no gate.json" in said and "did not finish" in said, said
    else:
        assert f"incomplete: {gate / 'gate.json'} says the gate that measured {gate / 'base'} stopped: {error}" in said


def test_compare_refuses_an_incomplete_run_the_same_way(tmp_path, capsys):
    # What the gate's refusal follows: a run killed before its end (run.json says running) is refused.
    for name, state in (("a", "finished"), ("b", "running")):
        run = RunDir(tmp_path / name, f"r-{name}")
        run.append(derived_record(NOOP, range(1000, 1200), run_id=f"r-{name}"))
        run.write_fingerprint(RUN_FINGERPRINT)
        run.write_meta({"schema": "critpath.run/1", "state": state, "cases_total": 2})
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cm")]) == 2
    assert "incomplete: 1 of 2 cases" in capsys.readouterr().err


# -- the gate's side: a worker killed or hung mid-round leaves its failure on disk -----------------

class _Tree:
    def __init__(self, path: Path) -> None:
        self.path = path

    def env(self) -> dict:
        return dict(os.environ)


def _worker(tmp_path: Path, then: str) -> Path:
    """A worker that records the round's first case, then ``then`` (dies by SIGKILL, stops itself as
    `kill -STOP` of its pid would, or hangs)."""
    record = derived_record(NOOP, range(1000, 1100), run_id="w-1").to_json()
    script = tmp_path / "worker.py"
    script.write_text(f"#!{sys.executable}\nimport json, os, signal, sys, time\n"
                      "out = sys.argv[sys.argv.index('--out') + 1]\n"
                      "print(json.dumps({'event': 'ready', 'protocol': 1}), flush=True)\n"
                      "for line in sys.stdin:\n"
                      "    ask = json.loads(line)\n"
                      "    d = os.path.join(out, 'round-%03d' % ask['round']); os.makedirs(d)\n"
                      f"    open(os.path.join(d, 'results.jsonl'), 'w').write({record!r} + '\\n')\n"
                      + {"dies": "    os.kill(os.getpid(), signal.SIGKILL)\n",
                         "stops": "    os.kill(os.getpid(), signal.SIGSTOP)\n"}.get(then, "    time.sleep(60)\n"))
    os.chmod(script, 0o755)
    return script


@pytest.mark.parametrize("then, kind, said", [("dies", "exit", "candidate worker closed its output (killed by SIGKILL)"),
                                              ("hangs", "timeout", "candidate worker did not answer within 2 s; killed it"),
                                              ("stops", "timeout",
                                               "candidate worker did not answer within 2 s (stopped, state T); killed it")])
def test_a_worker_dead_or_hung_mid_round_leaves_its_case_a_failed_record(tmp_path, then, kind, said):
    # Before: the case in flight had no record; its failure was only in gate.json.
    from harness.gate.sides import RoundCase, WorkerSide

    second = "selftest/fault_rank=0,mode=spin,spin_iters=10,world=1"
    out = tmp_path / "gen-014"
    side = WorkerSide(_Tree(tmp_path), "candidate", 14, out, {"timeout_s": 5}, python=str(_worker(tmp_path, then)))
    side.start()
    try:
        side.await_ready(30)
        result = side.run_round(0, [RoundCase(NOOP, 5), RoundCase(second, 5)], 2)
    finally:
        side.stop()
    assert result.error.startswith(said), result.error
    assert result.in_flight == second
    on_disk = {r.case_id: r for r in load_records(out / "round-000")}
    assert set(on_disk) == {NOOP, second} and on_disk[NOOP].ok
    lost = on_disk[second]
    assert lost.status == ("timeout" if kind == "timeout" else "failed") and lost.error.kind == kind
    assert lost.error.message.startswith(said) and lost.run_id == "w-1"  # one worker, one run
    assert result.records[second] == lost


@pytest.mark.slow
@pytest.mark.integration
def test_a_real_gate_whose_worker_dies_mid_round_leaves_the_failure_compare_reads_back(tmp_repo, tmp_path):
    # A one-rank mode=exit case runs in the worker's own process: the worker dies in the round.
    # The noop case is an A/A pair at about 18 % noise per pair: a false alarm on it (at most alpha
    # of the time) would exit 1, which outranks the lost case's exit 2. A 100 % minimum effect
    # keeps the exit code about the lost case alone.
    exits = "selftest/fault_rank=0,mode=exit,world=1"
    out = tmp_path / "G"
    code = main(["gate", "--repo", str(tmp_repo), "--out", str(out), "--base", "HEAD", "--case", exits,
                 "--case", NOOP, "--budget", "20", "--window", "0.05", "--min-effect", "1"])
    cases = {c["case_id"]: c for c in json.loads((out / "gate.json").read_text())["cases"]}
    assert code == EXIT_COULD_NOT_RUN and cases[exits]["outcome"] == "could_not_run", cases[exits]["reason"]
    lost = [r for side in ("base", "candidate") for results in sorted((out / side).glob(f"gen-*/round-*/{RESULTS}"))
            for r in load_records(results.parent) if r.case_id == exits]
    assert len(lost) == 1 and lost[0].error.kind == "exit" and "worker closed its output" in lost[0].error.message
    recheck, data = _compare(out, tmp_path / "cm")
    again = {c["case_id"]: c for c in data["cases"]}
    assert recheck == EXIT_COULD_NOT_RUN and again[exits]["outcome"] == "could_not_run", again[exits]["reason"]
    # The case measured in the other pairs: tested in both, or too few pairs for both.
    assert (cases[NOOP]["outcome"] == "could_not_run") == (again[NOOP]["outcome"] == "could_not_run"), \
        (cases[NOOP]["reason"], again[NOOP]["reason"])
