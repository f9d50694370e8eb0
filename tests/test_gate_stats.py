"""The gate's statistics, tested by simulation (numpy draws, no processes, no clocks)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from harness.gate.stats import (CaseInput, Comparison, Outcome, Policy, compare, decide, holm, min_repeats_for_alpha,
                                min_repeats_signed_rank, repeats_to_decide, threshold_verdict, verdict, verdicts)

FAST = Policy(n_resamples=400)


def lognormal(rng, n, shift=1.0, sigma=0.05):
    return rng.lognormal(math.log(shift), sigma, n)


def test_bootstrap_interval_covers_the_true_ratio_about_as_often_as_it_says():
    rng = np.random.default_rng(7)
    true_ratio, trials, covered = 1.10, 300, 0
    for seed in range(trials):
        base, cand = lognormal(rng, 20), lognormal(rng, 20, true_ratio)
        c = compare(base, cand, Policy(n_resamples=300, seed=seed))
        covered += c.ci_low <= true_ratio <= c.ci_high
    rate = covered / trials
    # 95 % nominal; the percentile bootstrap of a median on 20 values is close but not exact.
    assert 0.88 <= rate <= 0.99, rate


def test_a_a_false_alarm_rate_is_near_the_configured_level():
    rng = np.random.default_rng(11)
    alpha, trials = 0.05, 400
    policy = Policy(alpha=alpha, min_effect=0.0, n_resamples=100)
    alarms = sum(
        verdict(lognormal(rng, 10), lognormal(rng, 10), policy).outcome in (Outcome.REGRESSED, Outcome.IMPROVED)
        for _ in range(trials)
    )
    rate = alarms / trials
    # Exact Mann-Whitney U is at most alpha; its discreteness keeps it a little below.
    assert 0.015 <= rate <= 0.075, rate


def test_a_a_regressions_stay_within_one_tail_of_alpha_with_a_minimum_effect():
    rng = np.random.default_rng(12)
    policy = Policy(alpha=0.05, min_effect=0.05, n_resamples=100)
    alarms = sum(verdict(lognormal(rng, 10), lognormal(rng, 10), policy).failed for _ in range(300))
    # Only the slower tail of a two-sided test at 0.05 can be a regression (about 0.025).
    assert alarms / 300 <= 0.04


def test_holm_bounds_the_chance_of_any_false_alarm_across_cases():
    rng = np.random.default_rng(13)
    alpha, trials, any_alarm = 0.05, 150, 0
    policy = Policy(alpha=alpha, min_effect=0.0, n_resamples=100)
    for _ in range(trials):
        cases = [CaseInput(f"c{i}", lognormal(rng, 10), lognormal(rng, 10)) for i in range(5)]
        any_alarm += any(v.outcome != Outcome.UNCHANGED and v.outcome != Outcome.INCONCLUSIVE
                         for v in verdicts(cases, policy).values())
    assert any_alarm / trials <= alpha + 0.04  # unadjusted, 5 cases would alarm ~20 % of the time


def test_a_large_injected_shift_is_detected():
    rng = np.random.default_rng(17)
    outcomes = [verdict(lognormal(rng, 10), lognormal(rng, 10, 1.20), FAST).outcome for _ in range(100)]
    assert outcomes.count(Outcome.REGRESSED) >= 99
    faster = [verdict(lognormal(rng, 10), lognormal(rng, 10, 1 / 1.2), FAST).outcome for _ in range(50)]
    assert faster.count(Outcome.IMPROVED) >= 49


def test_significant_but_below_the_minimum_effect_is_unchanged_not_regressed():
    rng = np.random.default_rng(19)
    v = verdict(lognormal(rng, 30, sigma=0.005), lognormal(rng, 30, 1.02, sigma=0.005), FAST, min_effect=0.05)
    assert v.p_adjusted < 0.01
    assert v.outcome == Outcome.UNCHANGED


def test_noisy_shift_is_inconclusive_and_says_how_many_repeats_would_decide():
    rng = np.random.default_rng(23)
    v = verdict(lognormal(rng, 4, sigma=0.2), lognormal(rng, 4, 1.15, sigma=0.2), FAST)
    assert v.outcome == Outcome.INCONCLUSIVE
    assert v.repeats_to_decide is None or v.repeats_to_decide > 4


def test_repeats_to_decide_gives_the_power_it_aims_at_when_its_inputs_are_true():
    # True +15 % at 10 % noise per repeat: the advice computed from the true figures, measured.
    truth = Comparison(4, 4, 1.0, 1.15, 1.15, 0.9, 1.4, 0.95, 0.2, "test", log_sd=0.1)
    n = repeats_to_decide(truth, 0.05, significant=False, alpha=0.01, power=0.8)
    assert 8 <= n <= 30
    rng = np.random.default_rng(29)
    decided = sum(verdict(lognormal(rng, n, sigma=0.1), lognormal(rng, n, 1.15, sigma=0.1), FAST).failed
                  for _ in range(60))
    assert 0.6 <= decided / 60 <= 0.97, (n, decided)
    # From 4 noisy repeats the advice is an estimate: the same order as the truth, not the truth.
    advice = [v.repeats_to_decide for v in (verdict(lognormal(rng, 4, sigma=0.1), lognormal(rng, 4, 1.15, sigma=0.1),
                                                    FAST) for _ in range(30))
              if v.outcome == Outcome.INCONCLUSIVE and v.repeats_to_decide]
    assert n / 4 <= np.median(advice) <= n * 4


def test_repeats_to_decide_is_none_on_the_boundary():
    on_edge = Comparison(10, 10, 1.0, 1.0499, 1.0499, 1.0, 1.1, 0.95, 0.2, "test", log_sd=0.05)
    # Just inside the minimum-effect band: the interval would have to shrink to nothing.
    assert repeats_to_decide(on_edge, 0.05, significant=False) is None


def test_min_repeats_for_alpha_matches_the_exact_test():
    assert min_repeats_for_alpha(0.05) == 4  # 2/C(8,4) = 0.029
    assert min_repeats_for_alpha(0.01) == 5  # 2/C(10,5) = 0.0079; n=4 gives 0.029
    assert min_repeats_signed_rank(0.01) == 8  # 2/2**8 = 0.0078


def test_holm_adjustment_known_values():
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone 0.06
    assert np.allclose(adjusted, [0.03, 0.06, 0.06, 0.02])
    assert holm([]).size == 0
    assert np.all(holm([0.9, 0.8]) <= 1.0)


def _comparison(ratio, low, high, n=10):
    return Comparison(n, n, 1.0, ratio, ratio, low, high, 0.95, 0.5, "test")


@pytest.mark.parametrize("ratio,low,high,p,expected", [
    (1.10, 1.07, 1.13, 0.001, Outcome.REGRESSED),
    (0.90, 0.88, 0.93, 0.001, Outcome.IMPROVED),
    (1.01, 0.98, 1.03, 0.5, Outcome.UNCHANGED),
    (1.03, 1.02, 1.04, 0.001, Outcome.UNCHANGED),  # significant, below the minimum effect
    (1.10, 0.95, 1.30, 0.2, Outcome.INCONCLUSIVE),
    (1.02, 0.97, 1.08, 0.3, Outcome.INCONCLUSIVE),
])
def test_decision_table(ratio, low, high, p, expected):
    assert decide(_comparison(ratio, low, high), p, 0.05, 0.01).outcome == expected


def test_higher_is_better_flips_what_counts_as_a_regression():
    drop = _comparison(0.85, 0.82, 0.88)
    assert decide(drop, 0.001, 0.05, 0.01, direction="higher").outcome == Outcome.REGRESSED
    assert decide(drop, 0.001, 0.05, 0.01, direction="lower").outcome == Outcome.IMPROVED
    with pytest.raises(ValueError):
        decide(drop, 0.001, 0.05, 0.01, direction="sideways")


def test_too_few_or_bad_values_cannot_run_never_pass():
    assert verdict([1.0], [1.0, 1.1], FAST).outcome == Outcome.COULD_NOT_RUN
    assert verdict([1.0, 1.1], [], FAST).outcome == Outcome.COULD_NOT_RUN
    assert verdict([1.0, float("nan")], [1.0, 1.1], FAST).outcome == Outcome.COULD_NOT_RUN
    v = verdicts([CaseInput("x", problem="base: 1 of 2 runs not ok")], FAST)["x"]
    assert v.outcome == Outcome.COULD_NOT_RUN and "not ok" in v.reason


def test_identical_values_are_unchanged():
    v = verdict([100.0] * 5, [100.0] * 5, FAST)
    assert v.outcome == Outcome.UNCHANGED and v.comparison.p_value == 1.0


def test_threshold_verdict_against_a_fixed_value():
    rng = np.random.default_rng(31)
    slow = lognormal(rng, 10, 1.2, sigma=0.02) * 1000
    assert threshold_verdict(slow, 1000.0, FAST).outcome == Outcome.REGRESSED
    assert threshold_verdict(slow, 1200.0, FAST).outcome == Outcome.UNCHANGED
    assert threshold_verdict(slow, 1000.0, FAST, direction="higher").outcome == Outcome.IMPROVED


def test_policy_rejects_nonsense():
    with pytest.raises(ValueError):
        Policy(alpha=0)
    with pytest.raises(ValueError):
        Policy(confidence=1.0)
