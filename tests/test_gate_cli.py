"""critpath gate / compare end to end: refs, unknown cases, failed cases, stored runs.

The A/B test checks out a throwaway git repository holding a copy of this package, so it runs the
same in CI whatever the depth of the clone, and never touches this checkout's worktree list."""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import xmlschema
from conftest import RUN_FINGERPRINT, derived_record, git as _git, start_of, processes_mentioning

from harness.cli import main
from harness.core.claim import CLAIM_FILE
from harness.gate.outputs import EXIT_COULD_NOT_RUN, EXIT_PASS, EXIT_REGRESSION, junit_schema_path
from harness.core.records import ErrorInfo, Record
from harness.core.store import RunDir

ROOT = Path(__file__).resolve().parent.parent
NOOP = "selftest/fault_rank=0,mode=noop,world=1"
RAISE = "selftest/fault_rank=0,mode=raise,world=1"
SPIN = "selftest/fault_rank=0,mode=spin,spin_iters=50,world=1"
SCHEMA = xmlschema.XMLSchema(str(junit_schema_path()))


def _gate(repo: Path, out: Path, *args: str) -> tuple[int, dict]:
    code = main(["gate", "--repo", str(repo), "--out", str(out), *args])
    data = json.loads((out / "gate.json").read_text())
    SCHEMA.validate(str(out / "gate.xml"))
    assert data["exit_code"] == code
    return code, data


def test_a_base_ref_that_does_not_exist_could_not_run(tmp_repo, tmp_path):
    code, data = _gate(tmp_repo, tmp_path / "out", "--base", "no-such-ref", "--case", NOOP)
    assert code == EXIT_COULD_NOT_RUN
    assert "no-such-ref" in data["error"] and data["cases"] == []


def test_a_case_unknown_in_the_base_could_not_run(tmp_repo, tmp_path):
    # The base commit's selftest has no spin_iters parameter; the working tree (candidate) has.
    selftest = tmp_repo / "harness" / "families" / "selftest.py"
    original = selftest.read_text()
    selftest.write_text("\n".join(line for line in original.splitlines() if 'Param("spin_iters"' not in line) + "\n")
    _git(tmp_repo, "commit", "-q", "-am", "base without spin_iters")
    selftest.write_text(original)
    code, data = _gate(tmp_repo, tmp_path / "out", "--base", "HEAD", "--case", SPIN, "--max-pairs", "2")
    assert code == EXIT_COULD_NOT_RUN
    (case,) = data["cases"]
    assert case["outcome"] == "could_not_run" and "unknown in base" in case["reason"] and "spin_iters" in case["reason"]
    assert not (tmp_path / "out" / "base").exists()  # nothing was run for it


def test_bad_baseline_file_names_the_field(tmp_repo, tmp_path):
    table = tmp_path / "baselines.yaml"
    table.write_text(f"baselines:\n  - {{case_id: '{NOOP}', statistic: p50_ns, value: -3}}\n")
    code, data = _gate(tmp_repo, tmp_path / "out", "--against", str(table))
    assert code == EXIT_COULD_NOT_RUN and "baselines.0.value" in data["error"]


@pytest.mark.integration
def test_worktree_ab_end_to_end_with_a_failing_case(tmp_repo, tmp_path):
    head = _git(tmp_repo, "rev-parse", "HEAD")
    out = tmp_path / "out"
    code, data = _gate(tmp_repo, out, "--base", "HEAD", "--case", NOOP, "--case", RAISE, "--max-pairs", "3",
                       "--rounds", "2", "--iters", "50")
    cases = {c["case_id"]: c for c in data["cases"]}
    # The failing case is never a silent pass, and it does not hide the other case's verdict.
    assert code == EXIT_COULD_NOT_RUN
    assert cases[RAISE]["outcome"] == "could_not_run" and "InjectedFault" in cases[RAISE]["reason"]
    # Three pairs cannot decide anything, and the gate says so (and that --max-pairs stopped it) rather than passing.
    assert cases[NOOP]["outcome"] == "could_not_run" and "--max-pairs 3 stops before" in cases[NOOP]["reason"]
    assert cases[NOOP]["detail"]["n_pairs"] == 3 and len(cases[NOOP]["detail"]["pairs"]) == 3
    # Interleaved per generation: A B, B A in the first pair of processes, B A, A B in the next.
    for gen, expected in ((0, ["base", "candidate", "candidate", "base"]), (1, ["candidate", "base", "base", "candidate"])):
        rounds = sorted((p.stat().st_mtime_ns, p.parent.parent.parent.name)
                        for p in out.glob(f"*/gen-{gen:03d}/round-*/results.jsonl"))
        assert [side for _, side in rounds] == expected
    # The base really ran from its own checkout of HEAD, which is gone afterwards.
    assert data["base"]["commit"] == head and data["base"]["path"] != str(tmp_repo)
    fingerprint = json.loads((out / "base" / "gen-000" / "fingerprint.json").read_text())
    assert fingerprint["git"]["commit"] == head
    # Every generation on both sides names the gate that measured it, as gate.json does.
    held = {p.read_text().strip() for p in out.glob("*/gen-*/gate-id")}
    assert len(list(out.glob("*/gen-*/gate-id"))) == 2 * data["extra"]["generations"] == 6
    assert held == {data["extra"]["gate_id"]}
    assert not Path(data["base"]["path"]).exists()
    assert _git(tmp_repo, "worktree", "list").count("\n") == 0  # only the main checkout is left


# -- compare on stored runs (records written through the store, no processes) -------------------

def _record(case_id: str, samples, run_id: str, ok: bool = True) -> Record:
    record = derived_record(case_id, samples, run_id=run_id, plan={"warmup": 1, "iters": len(samples)},
                            started_at=start_of(run_id))  # one seed on both sides: their own starts
    if not ok:
        return replace(record, status="failed", error=ErrorInfo("InjectedFault", "boom", 0), samples_ns=(), plan=None,
                       metrics={}, check=None)
    return record


def _runs(root: Path, centers, case_id: str = NOOP, failed_at: int = -1, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    for i, center in enumerate(centers):
        run = RunDir(root / f"run-{i}", f"{root.name}-run-{i}")
        run.append(_record(case_id, rng.normal(center, center * 0.01, 200).clip(1), run.run_id, ok=i != failed_at))
        run.write_fingerprint(RUN_FINGERPRINT)
        run.write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": 1})
    return root


def test_compare_repeated_runs_finds_a_regression(tmp_path):
    base = _runs(tmp_path / "a", [1000, 1010, 990, 1005, 995, 1000])
    cand = _runs(tmp_path / "b", [1200, 1190, 1210, 1205, 1195, 1200], seed=1)
    code = main(["compare", str(base), str(cand), "--out", str(tmp_path / "out")])
    data = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert code == EXIT_REGRESSION and data["unit"] == "process"
    assert data["cases"][0]["outcome"] == "regressed"
    assert any("not an A/B" in w for w in data["warnings"])


def test_compare_single_runs_uses_iterations_and_says_so(tmp_path):
    base = _runs(tmp_path / "a", [1000])
    cand = _runs(tmp_path / "b", [1001], seed=1)
    code = main(["compare", str(base / "run-0"), str(cand / "run-0"), "--out", str(tmp_path / "out")])
    data = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert code == EXIT_PASS and data["unit"] == "iteration"
    assert any("not independent" in w for w in data["warnings"])


def test_compare_with_a_failed_run_could_not_run(tmp_path):
    base = _runs(tmp_path / "a", [1000, 1000, 1000])
    cand = _runs(tmp_path / "b", [1000, 1000, 1000], failed_at=1)
    code = main(["compare", str(base), str(cand), "--out", str(tmp_path / "out")])
    data = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert code == EXIT_COULD_NOT_RUN
    assert data["cases"][0]["outcome"] == "could_not_run" and "1 of 3 runs not ok" in data["cases"][0]["reason"]


def test_compare_case_missing_on_one_side_could_not_run(tmp_path):
    base = _runs(tmp_path / "a", [1000, 1000])
    cand = _runs(tmp_path / "b", [1000, 1000], case_id=SPIN)
    code = main(["compare", str(base), str(cand), "--out", str(tmp_path / "out")])
    data = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert code == EXIT_COULD_NOT_RUN
    assert {c["outcome"] for c in data["cases"]} == {"could_not_run"}


def test_compare_of_a_missing_directory_could_not_run(tmp_path):
    assert main(["compare", str(tmp_path / "nope"), str(tmp_path / "nope2"), "--out", str(tmp_path / "out")]) == EXIT_COULD_NOT_RUN


@pytest.mark.slow
@pytest.mark.integration
def test_against_a_baseline_table_runs_only_the_candidate(tmp_repo, tmp_path):
    table = tmp_path / "baselines.yaml"
    # A noop step cannot take a second: far below the reference, so never a regression.
    table.write_text(f"baselines:\n  - {{case_id: '{NOOP}', statistic: min_ns, value: 1.0e+9, direction: lower}}\n")
    out = tmp_path / "out"
    code, data = _gate(tmp_repo, out, "--against", str(table), "--repeats", "2", "--iters", "50")
    assert not (out / "base").exists() and len(list((out / "candidate").glob("rep-*/results.jsonl"))) == 2
    (case,) = data["cases"]
    assert data["statistic"] == "min_ns" and case["comparison"]["base_center"] == 1.0e9
    assert case["comparison"]["ratio"] < 1e-3 and case["outcome"] in ("inconclusive", "improved")
    assert code == EXIT_PASS and any("not an A/B" in w for w in data["warnings"])


def test_compare_a_throughput_metric_counts_a_drop_as_a_regression(tmp_path):
    case_id = "sendrecv/backend=gloo,size_bytes=4096,world=2"

    def runs(root, busbw):
        for i, value in enumerate(busbw):
            run = RunDir(root / f"run-{i}", f"{root.name}-run-{i}")
            # sendrecv's busbw is size / mean time (bus factor 1): samples that give this busbw.
            run.append(_record(case_id, [round(4096 / value)] * 10, run.run_id))
            run.write_fingerprint(RUN_FINGERPRINT)
            run.write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": 1})
        return root
    base = runs(tmp_path / "a", [10.0, 10.1, 9.9, 10.0, 10.2, 9.8])
    cand = runs(tmp_path / "b", [8.0, 8.1, 7.9, 8.0, 8.2, 7.8])
    code = main(["compare", str(base), str(cand), "--statistic", "busbw_gbps", "--out", str(tmp_path / "out")])
    data = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert code == EXIT_REGRESSION and data["cases"][0]["direction"] == "higher"
    assert main(["compare", str(base), str(cand), "--statistic", "imbalance", "--out", str(tmp_path / "o2")]) == EXIT_COULD_NOT_RUN


# -- the sequential gate on real trees: budget, injected slowdowns, interruption ------------------

@pytest.mark.integration
def test_a_budget_too_small_to_decide_says_so(tmp_repo, tmp_path):
    code, data = _gate(tmp_repo, tmp_path / "out", "--base", "HEAD", "--case", NOOP, "--budget", "0.5", "--iters", "50")
    (case,) = data["cases"]
    assert code == EXIT_COULD_NOT_RUN
    assert case["outcome"] == "could_not_run" and "budget too small to reach a decision" in case["reason"]
    assert "--budget" in case["reason"] and data["extra"]["stopped"] == "budget"


@pytest.mark.slow
@pytest.mark.integration
def test_the_budget_stops_a_gate(tmp_repo, tmp_path):
    # A minimum effect of 0 can never be shown "unchanged", and an A/A is rarely rejected: the
    # gate runs until its budget, and no longer than one more pair of processes. The budget must
    # hold the test's 8 pairs even on a loaded 2-core runner (1.1 s a pair seen; 6 s held 7).
    budget_s = 12.0
    code, data = _gate(tmp_repo, tmp_path / "out", "--base", "HEAD", "--case", NOOP, "--budget", str(budget_s),
                       "--min-effect", "0", "--iters", "50", "--rounds", "1")
    (case,) = data["cases"]
    extra = data["extra"]
    assert extra["stopped"] in ("budget", "decided")
    if extra["stopped"] == "budget":
        assert case["outcome"] == "inconclusive"
    assert extra["measure_wall_s"] <= budget_s + max(extra["generation_s"]) + 1.0
    assert case["detail"]["n_pairs"] == extra["generations"] >= 8


def _slowed_branch(repo: Path, case_id: str, kind: str, fraction: float, mean_ns: float) -> str:
    from harness.gatepower.inject import Slowdown, commit_slowdowns

    head = _git(repo, "rev-parse", "HEAD")
    sha = commit_slowdowns(repo, head, "slow", [Slowdown(case_id, kind, fraction, mean_ns)])
    _git(repo, "checkout", "-q", "--force", head)
    return sha


@pytest.mark.slow
@pytest.mark.integration
def test_a_real_two_tree_gate_catches_an_injected_slowdown_and_passes_an_a_a(tmp_repo, tmp_path):
    # The candidate is a real commit on a branch: a busy-wait of 4 us on every step of a ~3 us
    # spin case, committed into the driver's step path, as critpath gate-power does.
    slow = _slowed_branch(tmp_repo, SPIN, "uniform", 1.0, 4000.0)
    args = ("--case", SPIN, "--budget", "40", "--window", "0.05", "--rounds", "2")
    code, data = _gate(tmp_repo, tmp_path / "slow", "--base", "HEAD", "--candidate", slow, *args)
    (case,) = data["cases"]
    assert code == EXIT_REGRESSION and case["outcome"] == "regressed", case["reason"]
    assert case["comparison"]["ratio"] > 1.5 and case["comparison"]["test"].startswith("wilcoxon signed-rank")
    assert data["candidate"]["commit"] == slow
    # The verdict can be rechecked from what the gate left on disk: the same pairs, one look.
    assert main(["compare", str(tmp_path / "slow" / "base"), str(tmp_path / "slow" / "candidate"),
                 "--out", str(tmp_path / "recheck")]) == EXIT_REGRESSION
    recheck = json.loads((tmp_path / "recheck" / "gate.json").read_text())["cases"][0]
    assert recheck["detail"]["pairs"] == case["detail"]["pairs"] and recheck["outcome"] == "regressed"
    code, data = _gate(tmp_repo, tmp_path / "aa", "--base", "HEAD", "--candidate", "HEAD", *args)
    (case,) = data["cases"]
    assert code == EXIT_PASS and case["outcome"] in ("unchanged", "inconclusive"), case["reason"]
    assert not case["likely_regression"]


@pytest.mark.slow
@pytest.mark.integration
def test_a_partial_slowdown_is_found_by_the_default_statistic(tmp_repo, tmp_path):
    # One step in ten waits 10 x 30 us: the mean grows by about 100 %, the fastest steps only by
    # the wrapper's bookkeeping (a fraction of a per cent of a 30 us step).
    spin = SPIN.replace("spin_iters=50", "spin_iters=1000")
    slow = _slowed_branch(tmp_repo, spin, "partial", 1.0, 30_000.0)
    args = ("--base", "HEAD", "--candidate", slow, "--case", spin, "--budget", "40", "--window", "0.05",
            "--rounds", "2")
    code, data = _gate(tmp_repo, tmp_path / "mean", *args)
    assert code == EXIT_REGRESSION and data["statistic"] == "mean_ns"
    code, data = _gate(tmp_repo, tmp_path / "min", *args, "--statistic", "min_ns", "--max-pairs", "10")
    (case,) = data["cases"]
    # The fastest steps must not see the slowdown. Two-sided, this once failed at a ratio of 0.79
    # ("improved"): with one step in ten spinning, the candidate's fastest steps ran faster on this
    # runner, which is not what the test is about.
    assert case["outcome"] != "regressed" and case["comparison"]["ratio"] < 1.2


def _own_temp_dir(tmp_path: Path) -> Path:
    """A temporary directory for the gate under test alone, so that a gate run by anyone else on
    the machine at the same time cannot look like a checkout this one left."""
    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    return temp_dir


@pytest.mark.integration
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_an_interrupted_gate_removes_its_worktree_and_leaves_no_process(tmp_repo, tmp_path, sig):
    """SIGHUP (a closed terminal) ended a gate at once, exit 129: no gate.json, its worktree and
    temporary directory left. And the workers it killed left `.critpath-claim` in their gen-NNN."""
    import signal
    import sys
    import time

    out = tmp_path / "out"
    temp_dir = _own_temp_dir(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "gate", "--repo", str(tmp_repo), "--base", "HEAD",
                             "--case", SPIN, "--budget", "120", "--out", str(out)], cwd=ROOT,
                            env={**os.environ, "TMPDIR": str(temp_dir)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not list(out.glob("*/gen-000/round-*/results.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(out)), "no worker was running"
    proc.send_signal(getattr(signal, sig))
    code = proc.wait(timeout=60)
    assert code == 128 + getattr(signal, sig)
    data = json.loads((out / "gate.json").read_text())
    assert "interrupted" in data["error"] and data["exit_code"] == EXIT_COULD_NOT_RUN
    time.sleep(0.5)
    assert processes_mentioning(str(out)) == []
    assert _git(tmp_repo, "worktree", "list").count("\n") == 0
    assert list(temp_dir.glob("critpath-gate-*")) == []  # the base's checkout is gone
    assert list(out.rglob(CLAIM_FILE)) == []  # neither the gate's nor its killed workers'


@pytest.mark.slow
@pytest.mark.integration
def test_an_interrupted_gate_power_stops_its_running_gate_and_leaves_no_process(tmp_repo, tmp_path):
    import signal
    import sys
    import time

    out = tmp_path / "power"
    temp_dir = _own_temp_dir(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "gate-power", "--case", SPIN, "--slowdowns", "none",
                             "--trials", "1", "--out", str(out)], cwd=tmp_repo,
                            env={**os.environ, "TMPDIR": str(temp_dir)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not list(out.glob("gates/cell-00/trial-00/*/gen-000/round-*/results.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(f"harness gate --repo {out}"), "no gate was running"
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    assert code == 128 + signal.SIGTERM, proc.stdout.read().decode()
    time.sleep(0.5)
    assert processes_mentioning(str(out)) == []
    assert list(temp_dir.glob("critpath-gate-*")) == []
    gate = json.loads((out / "gates" / "cell-00" / "trial-00" / "gate.json").read_text())
    assert "interrupted by SIGTERM" in gate["error"]
    assert json.loads((out / "power.json").read_text())["trials"] == []  # an interrupted trial is not counted


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("mode,why", [("hang", "did not answer within"), ("wrong", "results wrong"),
                                      ("exit", "worker closed its output")])
def test_a_repeat_that_hangs_dies_or_answers_wrong_could_not_run(tmp_repo, tmp_path, mode, why):
    bad = f"selftest/fault_rank=0,mode={mode},world=1"
    out = tmp_path / "out"
    # The unchanged NOOP case is the bystander. A regression (or a likely one, at most alpha of
    # the time) outranks could-not-run in the exit code; a 100 % minimum effect keeps its verdict
    # a pass, so the exit code is about the bad case alone.
    code, data = _gate(tmp_repo, out, "--base", "HEAD", "--case", NOOP, "--case", bad, "--timeout", "2",
                       "--budget", "30", "--iters", "50", "--rounds", "1", "--min-effect", "1.0")
    cases = {c["case_id"]: c for c in data["cases"]}
    assert code == EXIT_COULD_NOT_RUN, {c: (v["outcome"], v.get("reason")) for c, v in cases.items()}
    assert cases[bad]["outcome"] == "could_not_run" and why in cases[bad]["reason"], cases[bad]["reason"]
    # The other case goes on in fresh processes and gets its own verdict.
    assert cases[NOOP]["outcome"] != "could_not_run" or "budget" in cases[NOOP]["reason"]
    assert processes_mentioning(str(out)) == []
