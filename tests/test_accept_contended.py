"""Acceptance of records timed while other processes took their CPUs: contention only adds time, so
a latency under its maximum or a rate over its minimum still passes; a failure, or any figure that
may move either way (a ratio to a reference), is not established here. The check said PASS or FAIL
of a contended record as of a quiet one."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from harness.accept.checks import evaluate_check
from harness.accept.verdicts import FAIL, PASS, UNVERIFIED
from harness.core.contention import Verdict
from harness.core.store import load_run

RUN = Path(__file__).parent / "fixtures" / "run_mixed"
CASE = "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,world=2"
EVIDENCE = "tick-stall share 40.0% >= 5.0%; foreign CPU 50.0% >= 10.0%"


@pytest.fixture(scope="module")
def records():
    return load_run(RUN).records


def _contended(records, case=CASE):
    """The run's records, the one of ``case`` judged contended (as its evidence would make it)."""
    out = []
    for record in records:
        if record.case_id == case:
            record = copy.copy(record)
            record.__dict__["contention_verdict"] = Verdict(True, EVIDENCE)
        out.append(record)
    return out


def _check(**fields) -> dict:
    return {"name": "c", "source": "s", **fields}


def test_a_latency_that_passes_its_maximum_on_a_contended_record_still_passes_and_says_so(records):
    check = _check(case=CASE, statistic="p99_us", max=10**6)
    assert evaluate_check(check, records).verdict == PASS
    outcome = evaluate_check(check, _contended(records))
    assert outcome.verdict == PASS
    assert f"1 of the 1 records contended ({CASE}: {EVIDENCE}): contention only adds time" in outcome.detail


def test_a_failure_on_a_contended_record_could_not_be_verified(records):
    check = _check(case=CASE, statistic="p99_us", max=0.001)
    assert evaluate_check(check, records).verdict == FAIL
    outcome = evaluate_check(check, _contended(records))
    assert outcome.verdict == UNVERIFIED and "the figure may be the neighbour's; rerun on a quiet machine" in outcome.detail


def test_a_latency_held_to_a_minimum_or_a_ratio_on_a_contended_record_could_not_be_verified(records):
    # contention can lift a latency over a minimum: a pass there says nothing of the quiet machine
    at_least = _check(case=CASE, statistic="p50_us", min=0.001)
    assert evaluate_check(at_least, records).verdict == PASS
    outcome = evaluate_check(at_least, _contended(records))
    assert outcome.verdict == UNVERIFIED and "may move this figure either way" in outcome.detail
    # a contended reference moves a ratio either way
    ratio = _check(family="allreduce", select={"size_bytes": 64, "algo": "native"}, statistic="p50_us",
                   relative_to={"size_bytes": 8}, max=1000)
    assert evaluate_check(ratio, records).verdict == PASS
    assert evaluate_check(ratio, _contended(records)).verdict == UNVERIFIED


def test_a_rate_that_passes_its_minimum_on_a_contended_record_still_passes(records):
    case = "allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=1048576,world=2"
    check = _check(case=case, statistic="busbw_gbps", min=0.0001)
    outcome = evaluate_check(check, _contended(records, case))
    assert outcome.verdict == PASS and "contention only adds time" in outcome.detail
