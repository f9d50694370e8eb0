"""The claims check: each verdict path, on records built here (no run needed)."""
from __future__ import annotations

import copy
import dataclasses

import pytest

from harness.claims.baselines import Claim, Measure, Tolerance
from harness.claims.check import (CONFIRMED, CONTRADICTED, IN_DIRECTION, NOT_MEASURABLE, SIMULATED, WITHHELD,
                                  check_claim, counts_text)
from harness.core.figures import FigureUnavailable
from harness.core.figures import value as statistic
from harness.core.records import Record


def record(family="rpc", params=None, samples=(1000, 2000, 3000), metrics=None, world=1, status="ok", extra=None):
    from harness.core.records import ErrorInfo

    return Record(run_id="t", case_id=f"{family}/x=1", family=family, family_version=1, params=params or {},
                  status=status, backend="gloo", world=world, started_at="t", wall_s=0.0,
                  samples_ns=samples if status == "ok" else (), metrics=metrics or {},
                  error=None if status == "ok" else ErrorInfo("E", "boom"), extra=extra or {})


def claim(measure: Measure, **fields) -> Claim:
    base = dict(id="A9.x", figure="f", metric="m", unit="ms", direction="lower", hardware="h", section="s",
                article_file="000_c5026049f14ef9b1.txt", measure=measure, value=0.85, relation="<=")
    base.update(fields)
    return Claim(**base)


EXACT = Tolerance(1.0, "no band: the fixture's figures are exact")
BOUND = Measure(status="pending", family="rpc", select={"transport": "tcp"}, statistic="p999_ms", compare="bound",
                tolerance=EXACT)


def test_bound_confirmed_and_contradicted_use_the_worst_record():
    fast = record(params={"transport": "tcp", "payload_bytes": 64}, samples=(100_000,) * 1000)  # 0.1 ms
    slow = record(params={"transport": "tcp", "payload_bytes": 4096}, samples=(900_000,) * 1000)  # 0.9 ms
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
                statistic="time_us", compare="change", tolerance=Tolerance(1.1, "fixture: ten per cent"))
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
                statistic="time_us", compare="change", min_world=24, tolerance=EXACT)
    c = claim(m, value=None, before=1.0, after=0.62, model_dependent=True)
    result = check_claim(c, [record("allreduce", {"algo": "ring"}, metrics={"time_us": 1.0}, world=2)])
    assert result.verdict == NOT_MEASURABLE
    assert "largest world is 2" in result.reason and "24" in result.reason
    assert "model" in result.notes


def test_range():
    m = Measure(status="pending", family="rpc", select={}, statistic="encode_us", compare="range", tolerance=EXACT)
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


RATIO = dict(family="rpc", before={"batch": None}, after={"batch": 8}, statistic="per_msg_us", compare="change")


def _batched(before_us: float, after_us: float) -> list:
    return [record(params={"payload_bytes": 256}, metrics={"per_msg_us": before_us}),
            record(params={"payload_bytes": 256, "batch": 8}, metrics={"per_msg_us": after_us})]


def test_an_11x_change_does_not_confirm_a_1000x_claim_but_shows_the_direction_and_both_figures():
    m = Measure(status="available", tolerance=Tolerance(2, "fixture: a factor two"), **RATIO)
    coalesce = claim(m, value=None, relation="=", before=1000.0, after=1.0, unit="fixed costs paid")
    result = check_claim(coalesce, _batched(115.0, 10.0))
    assert result.verdict == IN_DIRECTION
    assert result.measured == pytest.approx(10 / 115)
    assert "article x0.001" in result.reason and "measured x0.087" in result.reason and "at most 2" in result.reason
    batch8 = claim(m, value=None, relation="=", before=1.0, after=0.125, unit="ratio")
    assert check_claim(batch8, _batched(115.0, 10.0)).verdict == CONFIRMED  # x0.087 is within 2x of x0.125
    assert check_claim(batch8, _batched(115.0, 150.0)).verdict == CONTRADICTED  # wrong way


def test_a_difference_is_held_against_the_article_value_with_the_band():
    m = Measure(status="available", family="rpc", before={"transport": "nagle"}, after={"transport": "nodelay"},
                statistic="p50_ms", compare="change", magnitude="difference",
                tolerance=Tolerance(1.25, "fixture: a delayed-ACK timer tick"))
    nagle = claim(m, value=40.0, relation="<=", unit="ms")
    recs = lambda stall_ms: [record(params={"transport": "nagle"}, samples=(int(stall_ms * 1e6),) * 5),  # noqa: E731
                             record(params={"transport": "nodelay"}, samples=(100_000,) * 5)]
    result = check_claim(nagle, recs(44.1))
    assert result.verdict == CONFIRMED and result.measured == pytest.approx(44.0)
    assert result.measured_text.startswith("44 ms (p50) difference")
    assert "<= 50" in result.reason and "delayed-ACK" in result.reason
    assert check_claim(nagle, recs(80.1)).verdict == IN_DIRECTION  # faster without Nagle, but an 80 ms stall


def test_a_simulated_figure_is_labelled_simulated_with_its_parameters():
    m = Measure(status="available", family="kv_alloc", before={"allocator": "caching"}, after={"allocator": "slab"},
                statistic="fragmentation_loaded", compare="change", tolerance=Tolerance(2, "fixture: a factor two"))
    c = claim(m, value=None, before=32.0, after=4.7, unit="%")
    recs = [record("kv_alloc", {"allocator": a, "trace": "azure_conv", "budget_gb": 80}, samples=(1000,),
                   metrics={"fragmentation_loaded": f}) for a, f in (("caching", 0.3), ("slab", 0.05))]
    result = check_claim(c, recs)
    assert result.verdict == SIMULATED
    assert "fragmentation_loaded is simulated" in result.reason
    assert "budget_gb=80" in result.reason and "trace=azure_conv" in result.reason
    assert "'confirmed'" in result.reason  # what it would read as a measurement, never the label


def _pipeline(schedule: str, rate: float, oversubscribed: float = 0.0, stretch: float = 1.0):
    return record("pipeline", {"scenario": "s", "schedule": schedule, "compute": "spin"}, world=2,
                  metrics={"microbatches_per_s": rate, "oversubscribed": oversubscribed, "compute_stretch": stretch,
                           "busy_ranks": 4.0, "usable_cores": 2.0, "loadavg_1min": 3.0})


def test_a_contended_record_is_withheld_with_its_evidence():
    from harness.core.contention import Verdict

    m = Measure(status="available", family="pipeline", before={"schedule": "async"}, after={"schedule": "sync"},
                statistic="microbatches_per_s", compare="change", tolerance=Tolerance(1.1, "fixture: ten per cent"))
    c = claim(m, value=None, before=1.0, after=0.83, unit="ratio")
    pair = [_pipeline("async", 100.0), _pipeline("sync", 84.0)]
    assert check_claim(c, pair).verdict == CONFIRMED
    evidence = "tick-stall share 40.0% >= 5.0%; foreign CPU 50.0% >= 10.0%"
    contended = copy.copy(pair[0])
    contended.__dict__["contention_verdict"] = Verdict(True, evidence)  # as its evidence would make it
    result = check_claim(c, [contended, pair[1]])
    assert result.verdict == WITHHELD and f"contended ({evidence})" in result.reason


def test_an_oversubscribed_record_is_withheld_with_its_flag():
    m = Measure(status="available", family="pipeline", before={"schedule": "async"}, after={"schedule": "sync"},
                statistic="microbatches_per_s", compare="change", tolerance=Tolerance(1.1, "fixture: ten per cent"))
    c = claim(m, value=None, before=1.0, after=0.83, unit="ratio")
    flagged = [_pipeline("async", 100.0, oversubscribed=1.0), _pipeline("sync", 150.0)]
    result = check_claim(c, flagged)
    assert result.verdict == WITHHELD and "OVERSUBSCRIBED" in result.reason
    # a clean pair beside it decides; the flagged one is named, not used
    clean = [dataclasses.replace(r, params={**r.params, "compute": "sleep"}) for r in
             (_pipeline("async", 100.0), _pipeline("sync", 84.0))]
    result = check_claim(c, flagged + clean)
    assert result.verdict == CONFIRMED and result.measured == pytest.approx(0.84)
    assert "withheld" in result.reason and "OVERSUBSCRIBED" in result.reason
    stretched = [_pipeline("async", 100.0, stretch=3.3), _pipeline("sync", 84.0)]
    assert check_claim(c, stretched).verdict == WITHHELD


def test_a_measurable_claim_without_a_tolerance_is_refused():
    with pytest.raises(ValueError, match="tolerance"):
        check_claim(claim(dataclasses.replace(BOUND, tolerance=None)), [record(params={"transport": "tcp"})])


def test_a_p999_from_too_few_samples_is_not_measurable():
    result = check_claim(claim(BOUND), [record(params={"transport": "tcp"}, samples=(100_000,) * 999)])
    assert result.verdict == "not measurable here"
    assert "n too small: p999 needs at least 1000 samples, this record has 999" in result.reason


def test_counts_name_every_label():
    results = [check_claim(claim(BOUND), [record(params={"transport": "tcp"}, samples=(1000,) * 1000)])]
    assert counts_text(results) == ("1 confirmed, 0 confirmed in direction, 0 contradicted, 0 modelled, "
                                    "0 simulated, 0 withheld, 0 not measurable here")


def test_a_modelled_figure_is_labelled_modelled():
    m = Measure(status="available", family="pipeline", select={"schedule": "sync"},
                statistic="sync_efficiency_steady_model", compare="bound", tolerance=EXACT)
    c = claim(m, value=0.8, relation=">=", unit="ratio")
    r = record("pipeline", {"scenario": "s", "schedule": "sync", "compute": "sleep", "rtt_us": 1000}, world=2,
               metrics={"sync_efficiency_steady_model": 0.83})
    result = check_claim(c, [r])
    assert result.verdict == "modelled" and "rtt_us=1000" in result.reason and "is modelled" in result.reason


AR_NATIVE = "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=1024,world=2"


def _forged(tmp_path, algo: str, busbw_gbps: float) -> Record:
    """A native allreduce record whose busbw was rewritten and whose per-rank reports were dropped,
    read back: the figure cannot be recomputed, so it is listed as unverified."""
    from conftest import derived_record

    from harness.core.store import append_record, load_records

    path = tmp_path / f"{algo}.jsonl"
    honest = derived_record(AR_NATIVE.replace("native", algo), [30000 + i for i in range(200)],
                            reports=[{"impl": "gloo allreduce", "nccl_algo_env": None}] * 2)
    append_record(path, dataclasses.replace(honest, metrics={**honest.metrics, "busbw_gbps": busbw_gbps}, extra={}))
    (forged,) = load_records(path)
    assert "busbw_gbps" in forged.unverifiable
    return forged


def test_a_claim_is_never_decided_on_an_unverified_figure(tmp_path):
    bound = Measure(status="available", family="allreduce", select={}, statistic="busbw_gbps", compare="bound",
                    tolerance=EXACT)
    forged = _forged(tmp_path, "native", 0.2)
    for relation in (">=", "<="):  # what it would confirm, and what it would refute
        result = check_claim(claim(bound, value=0.1, relation=relation, unit="GB/s", direction="higher"), [forged])
        assert result.verdict == NOT_MEASURABLE and result.measured is None, result
        assert result.reason.startswith(f"not checkable: {forged.case_id}: field metrics.busbw_gbps is not verified: "
                                        f"{forged.unverifiable['busbw_gbps']}"), result.reason
    change = Measure(status="available", family="allreduce", before={"algo": "ring"}, after={"algo": "tree"},
                     statistic="busbw_gbps", compare="change", tolerance=EXACT)
    pair = [_forged(tmp_path, "ring", 0.2), _forged(tmp_path, "tree", 0.4)]
    result = check_claim(claim(change, value=None, before=1.0, after=2.0, unit="ratio", direction="higher"), pair)
    assert result.verdict == NOT_MEASURABLE and result.reason.startswith("not checkable: ") and "busbw_gbps" in result.reason
