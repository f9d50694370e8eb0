"""The percentile sample rule (p99 from 100 samples, p999 from 1,000; "n too small" below) in
figures, tables, reports, acceptance, the gate's values, diagnosis and the loop plan."""
from __future__ import annotations

from fractions import Fraction

import pytest

from harness.core import figures, registry
from harness.accept.checks import evaluate_check
from harness.diagnose.observe import record_figures
from harness.core.figures import N_TOO_SMALL, TooFewSamples, samples_needed
from harness.core.records import Record
from harness.run.plan import PROFILE_POLICY
from harness.run.timing import PlanPolicy
from harness.accept.verdicts import UNVERIFIED

CASE = "rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=http_newconn"


def rpc_record(n: int, metrics=None) -> Record:
    params = {"transport": "http_newconn", "codec": "raw", "mode": "pingpong", "payload_bytes": 256}
    return Record(run_id="t", case_id=CASE, family="rpc", family_version=1, params=params, status="ok",
                  backend="gloo", world=1, started_at="t", wall_s=0.0, samples_ns=tuple(range(1000, 1000 + n)),
                  metrics=metrics or {"rtt_p50_us": 1.0, "rtt_p99_us": 2.0, "rtt_p999_us": 3.0, "msgs_per_s": 5.0})


def test_the_rule_is_derived_from_the_percentile():
    assert [samples_needed(Fraction(q)) for q in ("50", "90", "10", "99", "99.9", "99.99", "100")] == \
        [2, 10, 10, 100, 1000, 10000, 1]


@pytest.mark.parametrize("name,enough", [("p99_us", 100), ("p999_ns", 1000), ("p99.9_ms", 1000),
                                         ("p999_over_mean", 1000), ("rtt_p999_us", 1000), ("rtt_p99_us", 100)])
def test_a_percentile_needs_its_samples(name, enough):
    assert figures.value(rpc_record(enough), name) > 0
    with pytest.raises(TooFewSamples, match=rf"^n too small: p99\.?9? needs at least {enough} samples, "
                                            rf"this record has {enough - 1}$"):
        figures.value(rpc_record(enough - 1), name)


def test_figures_that_read_no_percentile_need_one_sample():
    assert figures.value(rpc_record(1), "max_us") == pytest.approx(1.0)
    assert figures.value(rpc_record(1), "msgs_per_s") == 5.0


def test_table_cells_say_n_too_small():
    columns = {c.header: c for c in registry.get("rpc").table_columns()}
    few, many = rpc_record(253), rpc_record(1000)
    assert columns["p999 (us)"].render(few) == N_TOO_SMALL
    assert columns["p99 (us)"].render(few) != N_TOO_SMALL
    assert columns["p999 (us)"].render(many) == f"{figures.value(many, 'p999_us'):.1f}"


def test_acceptance_cannot_verify_a_p999_from_253_samples():
    check = {"name": "rpc p999", "case": CASE, "statistic": "rtt_p999_us", "max": 1e9, "source": "test"}
    outcome = evaluate_check(check, [rpc_record(253)])
    assert outcome.verdict == UNVERIFIED
    assert "n too small: p999 needs at least 1000 samples, this record has 253" in outcome.detail


def test_diagnosis_leaves_out_unsupported_percentiles():
    got = record_figures(rpc_record(253))
    assert "rtt_p99_us" in got and "p99_us" in got
    assert "rtt_p999_us" not in got and "p999_us" not in got


def test_rpc_declares_tails_that_need_1000_samples():
    assert registry.get("rpc").tail_samples() == 1000


def test_the_plan_gives_rpc_cases_1000_iterations_when_time_allows():
    quick = PROFILE_POLICY["quick"]
    tail = registry.get("rpc").tail_samples()
    # 800 us a round trip (http_newconn): the 0.2 s target alone gives 250
    assert quick.decide(800_000).iters == 250
    assert quick.decide(800_000, tail).iters == 1000
    # 40 ms (Nagle): 1,000 would take 40 s; the tail budget (2 s) gives 50, and p999 reads "n too small"
    assert quick.decide(40e6, tail).iters == 50
    # fast cases keep the profile's own count
    assert quick.decide(10_000, tail).iters == quick.max_iters
    # --iters is taken as given
    assert PlanPolicy(iters=30).decide(800_000, tail).iters == 30


def test_the_gate_cannot_run_on_a_p999_from_253_samples():
    from harness.gate.values import iteration_values

    with pytest.raises(TooFewSamples, match="n too small: p999 needs at least 1000"):
        iteration_values(rpc_record(253), "p999_us")
    assert iteration_values(rpc_record(1000), "p999_us").size == 1000
