"""A key at its default may be left out of a case ID or written, and names the same case: a check
naming its case in either spelling (or selecting the key's default) means the records of that
case, judging a stored run and holding a check to the profile's own run.cases alike."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.accept.profile import load_profile
from harness.cli import main

SELFTEST = "selftest/fault_rank=0,mode=noop,world=1"
SELFTEST_SPELT = "selftest/fault_rank=0,mode=noop,spin_iters=0,world=1"  # spin_iters at its default, written
MOE = ("moe_a2a/backend=gloo,bytes_per_elem=4,compute=sleep,expert_bytes=262144,experts_per_rank=8,hidden=256,"
       "mitigation=none,ns_per_token=20000.0,seed=0,skew=0.0,tokens=256,top_k=2,workload=uniform,world=4")


def _profile(tmp_path: Path, world: int, run_case: str, check: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f"schema: critpath.accept/1\nname: spelt\nworld: {world}\n"
                    f"run:\n  cases: [\"{run_case}\"]\n  iters: 20\n"
                    f"checks:\n  - name: p99\n{check}    statistic: p50_us\n    max: 1000000\n    source: test\n")
    return path


@pytest.fixture(scope="module")
def selftest_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "run"
    assert main(["run", "--case", SELFTEST, "--iters", "20", "--warmup", "1", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("check", [
    f"    case: {SELFTEST_SPELT}\n",
    "    family: selftest\n    select: {mode: noop, spin_iters: 0}\n",
], ids=["case", "select"])
def test_a_check_naming_a_key_at_its_default_judges_the_records_of_its_case(tmp_path, selftest_run, check):
    path = _profile(tmp_path, 1, SELFTEST, check)
    out = tmp_path / "out"
    assert main(["accept", "--profile", str(path), "--run", str(selftest_run), "--out", str(out), "--no-report"]) == 0
    verdict = json.loads((out / "acceptance.json").read_text())["checks"][0]
    assert verdict["verdict"] == "pass", verdict
    assert SELFTEST in verdict["detail"]


@pytest.mark.parametrize("world, run_case, check", [
    (1, SELFTEST, f"    case: {SELFTEST_SPELT}\n"),
    (1, SELFTEST_SPELT, f"    case: {SELFTEST}\n"),
    (1, SELFTEST, "    family: selftest\n    select: {spin_iters: 0}\n"),
    (4, MOE, f"    case: {MOE.replace('mitigation=none,', '')}\n"),
    (4, MOE.replace("mitigation=none,", ""), f"    case: {MOE}\n"),
], ids=["selftest-written", "selftest-left-out", "selftest-select", "moe-left-out", "moe-run-left-out"])
def test_a_check_in_another_spelling_of_a_run_case_loads_to_measure(tmp_path, world, run_case, check):
    profile = load_profile(_profile(tmp_path, world, run_case, check), measuring=True)
    if "case" in profile["checks"][0]:
        assert profile["checks"][0]["case"] == profile["run"]["cases"][0]  # one spelling for one case


def test_what_a_run_lacks_for_a_select_names_only_the_values_it_lacks(tmp_path, selftest_run):
    """spin_iters: 0 is what the run's records have (their IDs leave it out): only fault_rank is missing."""
    path = _profile(tmp_path, 1, SELFTEST, "    family: selftest\n    select: {mode: noop, spin_iters: 0, fault_rank: 1}\n")
    out = tmp_path / "out"
    assert main(["accept", "--profile", str(path), "--run", str(selftest_run), "--out", str(out), "--no-report"]) == 2
    verdict = json.loads((out / "acceptance.json").read_text())["checks"][0]
    assert verdict["detail"] == "no selftest record with fault_rank=1 (the run has 0)", verdict
