"""The claims check: each verdict path, on records built here (no run needed)."""
from __future__ import annotations

import dataclasses

import pytest

from harness.baselines import Claim, Measure
from harness.claims import CONFIRMED, CONTRADICTED, NOT_MEASURABLE, check_claim
from harness.figures import FigureUnavailable
from harness.figures import value as statistic
from harness.records import Record


def record(family="rpc", params=None, samples=(1000, 2000, 3000), metrics=None, world=1, status="ok", extra=None):
    from harness.records import ErrorInfo

    return Record(run_id="t", case_id=f"{family}/x=1", family=family, family_version=1, params=params or {},
                  status=status, backend="gloo", world=world, started_at="t", wall_s=0.0,
                  samples_ns=samples if status == "ok" else (), metrics=metrics or {},
                  error=None if status == "ok" else ErrorInfo("E", "boom"), extra=extra or {})


def claim(measure: Measure, **fields) -> Claim:
    base = dict(id="A9.x", figure="f", metric="m", unit="ms", direction="lower", hardware="h", section="s",
                article_file="000_c5026049f14ef9b1.txt", measure=measure, value=0.85, relation="<=")
    base.update(fields)
    return Claim(**base)


BOUND = Measure(status="pending", family="rpc", select={"transport": "tcp"}, statistic="p999_ms", compare="bound")


def test_bound_confirmed_and_contradicted_use_the_worst_record():
    fast = record(params={"transport": "tcp", "payload_bytes": 64}, samples=(100_000,) * 10)  # 0.1 ms
    slow = record(params={"transport": "tcp", "payload_bytes": 4096}, samples=(900_000,) * 10)  # 0.9 ms
    assert check_claim(claim(BOUND), [fast]).verdict == CONFIRMED
    result = check_claim(claim(BOUND), [fast, slow])
    assert result.verdict == CONTRADICTED
    assert result.measured == pytest.approx(0.9)
    assert result.ratio == pytest.approx(0.9 / 0.85)


def test_absent_family_and_unmatched_selector_are_not_measurable_with_reason():
    result = check_claim(claim(BOUND), [record(family="allreduce")])
    assert result.verdict == NOT_MEASURABLE
    assert "no records of family rpc in this run" in result.reason
    result = check_claim(claim(BOUND), [record(params={"transport": "uds"})])
    assert result.verdict == NOT_MEASURABLE and "matches" in result.reason


def test_failed_records_are_never_used():
    result = check_claim(claim(BOUND), [record(params={"transport": "tcp"}, status="failed")])
    assert result.verdict == NOT_MEASURABLE and "failed" in result.reason


def test_change_pairs_records_on_the_other_parameters():
    m = Measure(status="available", family="allreduce", before={"algo": "ring"}, after={"algo": "tree"},
                statistic="time_us", compare="change")
    c = claim(m, value=None, before=1.0, after=0.62, unit="ratio")
    recs = [
        record("allreduce", {"algo": "ring", "size_bytes": 8}, metrics={"time_us": 100.0}),
        record("allreduce", {"algo": "tree", "size_bytes": 8}, metrics={"time_us": 50.0}),
        record("allreduce", {"algo": "ring", "size_bytes": 1024}, metrics={"time_us": 200.0}),
        record("allreduce", {"algo": "tree", "size_bytes": 1024}, metrics={"time_us": 150.0}),
        record("allreduce", {"algo": "tree", "size_bytes": 4096}, metrics={"time_us": 1.0}),  # no partner
    ]
    result = check_claim(c, recs)
    assert result.verdict == CONFIRMED
    assert result.measured == pytest.approx((0.5 + 0.75) / 2)
    assert result.ratio == pytest.approx(result.measured / 0.62)
    # A change inside the minimum effect is no change: the article's claim is contradicted here.
    flat = [dataclasses.replace(r, metrics={"time_us": 100.0}) for r in recs]
    assert check_claim(c, flat).verdict == CONTRADICTED


def test_min_world_makes_a_small_run_not_measurable_and_says_model():
    m = Measure(status="available", family="allreduce", before={"algo": "ring"}, after={"algo": "tree"},
                statistic="time_us", compare="change", min_world=24)
    c = claim(m, value=None, before=1.0, after=0.62, model_dependent=True)
    result = check_claim(c, [record("allreduce", {"algo": "ring"}, metrics={"time_us": 1.0}, world=2)])
    assert result.verdict == NOT_MEASURABLE
    assert "largest world is 2" in result.reason and "24" in result.reason
    assert "model" in result.notes


def test_range():
    m = Measure(status="pending", family="rpc", select={}, statistic="encode_us", compare="range")
    c = claim(m, value=None, low=10.0, high=100.0, unit="us")
    assert check_claim(c, [record(metrics={"encode_us": 40.0})]).verdict == CONFIRMED
    assert check_claim(c, [record(metrics={"encode_us": 400.0})]).verdict == CONTRADICTED


def test_imported_mean_only_records_give_no_percentiles():
    r = record(samples=(5000,), extra={"imported": {"source": "nccl-tests", "samples": "mean_only", "iters": 20}})
    assert statistic(r, "mean_us") == pytest.approx(5.0)
    with pytest.raises(FigureUnavailable, match="mean only"):
        statistic(r, "p99_us")
    result = check_claim(claim(BOUND), [dataclasses.replace(r, params={"transport": "tcp"})])
    assert result.verdict == NOT_MEASURABLE and "mean only" in result.reason
