"""critpath gate / compare end to end: refs, unknown cases, failed cases, stored runs.

The A/B test checks out a throwaway git repository holding a copy of this package, so it runs the
same in CI whatever the depth of the clone, and never touches this checkout's worktree list."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import xmlschema

from harness.cli import main
from harness.family import CheckResult
from harness.gate.outputs import EXIT_COULD_NOT_RUN, EXIT_PASS, EXIT_REGRESSION, junit_schema_path
from harness.records import ErrorInfo, Record
from harness.store import RunDir

ROOT = Path(__file__).resolve().parent.parent
NOOP = "selftest/fault_rank=0,mode=noop,world=1"
RAISE = "selftest/fault_rank=0,mode=raise,world=1"
SPIN = "selftest/fault_rank=0,mode=spin,spin_iters=50,world=1"
SCHEMA = xmlschema.XMLSchema(str(junit_schema_path()))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=critpath-tests", "-c", "user.email=tests@localhost",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def tmp_repo(tmp_path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "harness", repo / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    _git(repo.parent, "init", "-q", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    return repo


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
    code, data = _gate(tmp_repo, tmp_path / "out", "--base", "HEAD", "--case", SPIN, "--repeats", "2")
    assert code == EXIT_COULD_NOT_RUN
    (case,) = data["cases"]
    assert case["outcome"] == "could_not_run" and "unknown in base" in case["reason"] and "spin_iters" in case["reason"]
    assert not (tmp_path / "out" / "base").exists()  # nothing was run for it


def test_bad_baseline_file_names_the_field(tmp_repo, tmp_path):
    table = tmp_path / "baselines.yaml"
    table.write_text(f"baselines:\n  - {{case_id: '{NOOP}', statistic: p50_ns, value: -3}}\n")
    code, data = _gate(tmp_repo, tmp_path / "out", "--against", str(table))
    assert code == EXIT_COULD_NOT_RUN and "baselines[0].value" in data["error"]


@pytest.mark.integration
def test_worktree_ab_end_to_end_with_a_failing_case(tmp_repo, tmp_path):
    head = _git(tmp_repo, "rev-parse", "HEAD")
    out = tmp_path / "out"
    code, data = _gate(tmp_repo, out, "--base", "HEAD", "--case", NOOP, "--case", RAISE, "--repeats", "2", "--iters", "50")
    cases = {c["case_id"]: c for c in data["cases"]}
    # The failing case is never a silent pass, and it does not hide the other case's verdict.
    assert code == EXIT_COULD_NOT_RUN
    assert cases[RAISE]["outcome"] == "could_not_run" and "InjectedFault" in cases[RAISE]["reason"]
    assert cases[NOOP]["outcome"] in ("unchanged", "inconclusive")
    assert cases[NOOP]["comparison"]["n_base"] == 2 and cases[NOOP]["comparison"]["n_cand"] == 2
    # Interleaved: A B then B A, one fresh process each.
    order = sorted((p.stat().st_mtime, p.parent.parent.name) for p in out.glob("*/rep-*/run.json"))
    assert [side for _, side in order] == ["base", "candidate", "candidate", "base"]
    # The base really ran from its own checkout of HEAD, which is gone afterwards.
    assert data["base"]["commit"] == head and data["base"]["path"] != str(tmp_repo)
    fingerprint = json.loads((out / "base" / "rep-000" / "fingerprint.json").read_text())
    assert fingerprint["git"]["commit"] == head
    assert not Path(data["base"]["path"]).exists()
    assert _git(tmp_repo, "worktree", "list").count("\n") == 0  # only the main checkout is left


# -- compare on stored runs (records written through the store, no processes) -------------------

def _record(case_id: str, samples, run_id: str, ok: bool = True) -> Record:
    common = dict(run_id=run_id, case_id=case_id, family="selftest", family_version=1,
                  params={"mode": "noop", "fault_rank": 0, "world": 1}, backend="gloo", world=1,
                  started_at="2026-01-01T00:00:00+00:00", wall_s=0.1)
    if not ok:
        return Record(status="failed", error=ErrorInfo("InjectedFault", "boom", 0), **common)
    return Record(status="ok", samples_ns=tuple(int(x) for x in samples), plan={"warmup": 1, "iters": len(samples)},
                  timer="perf_counter_ns", check=CheckResult(0, 1), **common)


def _runs(root: Path, centers, case_id: str = NOOP, failed_at: int = -1, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    for i, center in enumerate(centers):
        run = RunDir(root / f"run-{i}", f"run-{i}")
        run.append(_record(case_id, rng.normal(center, center * 0.01, 200).clip(1), run.run_id, ok=i != failed_at))
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
    def runs(root, busbw):
        for i, value in enumerate(busbw):
            run = RunDir(root / f"run-{i}", f"run-{i}")
            rec = _record(NOOP, [1000] * 10, run.run_id)
            run.append(Record(**{**rec.__dict__, "metrics": {"busbw_gbps": value}}))
        return root
    base = runs(tmp_path / "a", [10.0, 10.1, 9.9, 10.0, 10.2, 9.8])
    cand = runs(tmp_path / "b", [8.0, 8.1, 7.9, 8.0, 8.2, 7.8])
    code = main(["compare", str(base), str(cand), "--statistic", "busbw_gbps", "--out", str(tmp_path / "out")])
    data = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert code == EXIT_REGRESSION and data["cases"][0]["direction"] == "higher"
    assert main(["compare", str(base), str(cand), "--statistic", "imbalance", "--out", str(tmp_path / "o2")]) == EXIT_COULD_NOT_RUN
