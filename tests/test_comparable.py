"""Records of different definitions are refused by every command that compares them, naming the
field: the gate, compare (and a stored gate's recheck) and the claims."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import RUN_FINGERPRINT, derived_record, start_of

from harness.cli import main
from harness.core.comparable import CHECKED_FIELDS, mismatch
from harness.gate.outputs import EXIT_COULD_NOT_RUN, EXIT_PASS
from harness.core.store import RunDir

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
SAMPLES = [1000, 1010, 990, 1005, 995, 1000, 1002, 998]


@pytest.mark.parametrize("field, other", [("family_version", 2), ("timer", "cuda_event"), ("reduction", "mean")])
def test_mismatch_names_the_field_and_both_values(field, other):
    a = derived_record(NOOP, SAMPLES)
    b = replace(a, **{field: other})
    why = mismatch({"base": [a], "candidate": [b]})
    assert f"{field} differs (base vs candidate: {getattr(a, field)!r} vs {other!r})" in why
    assert mismatch({"base": [a], "candidate": [a]}) is None
    assert field in CHECKED_FIELDS


def _runs(root: Path, n: int, **fields) -> Path:
    for i in range(n):
        run = RunDir(root / f"run-{i}", f"{root.name}-run-{i}")
        run.append(derived_record(NOOP, [s + i for s in SAMPLES], run_id=run.run_id, started_at=start_of(run.run_id),
                                  **fields))
        run.write_fingerprint(RUN_FINGERPRINT)  # a run writes one before its first case
        run.write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": 1})
    return root


# CUDA events time a case only over NCCL, the one backend whose ranks get a GPU: such a record says so.
@pytest.mark.parametrize("field, other, beside", [("family_version", 2, {}), ("timer", "cuda_event", {"backend": "nccl"})])
def test_compare_refuses_runs_of_another_definition_with_exit_2(tmp_path, field, other, beside):
    base = _runs(tmp_path / "a", 3)
    same = _runs(tmp_path / "b", 3)
    assert main(["compare", str(base), str(same), "--out", str(tmp_path / "ok")]) == EXIT_PASS
    changed = _runs(tmp_path / "c", 3, **{field: other}, **beside)
    assert main(["compare", str(base), str(changed), "--out", str(tmp_path / "out")]) == EXIT_COULD_NOT_RUN
    (case,) = json.loads((tmp_path / "out" / "gate.json").read_text())["cases"]
    assert case["outcome"] == "could_not_run" and f"{field} differs" in case["reason"]


def test_the_gate_loop_refuses_a_round_of_another_definition(tmp_path):
    from harness.gate.schedule import BASE, CANDIDATE, Plan, Schedule
    from harness.gate.sides import RoundResult

    loop = Schedule([NOOP], {}, "worker", Plan(), tmp_path, "p50_ns", decide=lambda *a: {})
    first = derived_record(NOOP, SAMPLES)
    loop._check_records([NOOP], RoundResult(BASE, 0, 0, tmp_path, 1.0, {NOOP: first}))
    loop._check_records([NOOP], RoundResult(CANDIDATE, 0, 0, tmp_path, 1.0, {NOOP: first}))
    assert loop.tracks[NOOP].problem == ""
    loop._check_records([NOOP], RoundResult(CANDIDATE, 1, 0, tmp_path, 1.0, {NOOP: replace(first, family_version=3)}))
    assert "family_version differs (base vs candidate: 1 vs 3)" in loop.tracks[NOOP].problem


def test_a_change_claim_does_not_pair_records_of_another_timer():
    from harness.claims.baselines import Claim, Measure, Tolerance
    from harness.claims.check import NOT_MEASURABLE, check_claim

    before = derived_record("rpc/codec=raw,mode=pingpong,payload_bytes=64,transport=tcp_nodelay", SAMPLES,
                            metrics={}, extra={})
    after = replace(derived_record("rpc/codec=raw,mode=pingpong,payload_bytes=64,transport=uds", SAMPLES,
                                   metrics={}, extra={}), timer="family-owned loop (rpc)")
    measure = Measure(status="mapped", family="rpc", compare="change", statistic="p50_us",
                      before={"transport": "tcp_nodelay"}, after={"transport": "uds"},
                      tolerance=Tolerance(2.0, "a test claim"))
    claim = Claim(id="A9.x", figure="f", metric="m", unit="x", direction="lower", hardware="h", section="s",
                  article_file="000_c5026049f14ef9b1.txt", measure=measure, before=2.0, after=1.0)
    result = check_claim(claim, [before, after])
    assert result.verdict == NOT_MEASURABLE and "timer differs" in result.reason


def test_an_acceptance_check_relative_to_a_record_of_another_definition_could_not_be_verified():
    from harness.accept.checks import evaluate_check
    from harness.accept.verdicts import PASS, UNVERIFIED

    fast = derived_record("rpc/codec=raw,mode=pingpong,payload_bytes=64,transport=uds", SAMPLES, metrics={}, extra={})
    slow = derived_record("rpc/codec=raw,mode=pingpong,payload_bytes=64,transport=tcp_nodelay",
                          [2 * s for s in SAMPLES], metrics={}, extra={})
    check = {"name": "uds vs tcp", "statistic": "p50_us", "source": "test", "max": 1.0, "family": "rpc",
             "select": {"transport": "uds"}, "relative_to": {"transport": "tcp_nodelay"}}
    assert evaluate_check(check, [fast, slow]).verdict == PASS
    outcome = evaluate_check(check, [fast, replace(slow, timer="cuda_event")])
    assert outcome.verdict == UNVERIFIED and "timer differs" in outcome.detail
