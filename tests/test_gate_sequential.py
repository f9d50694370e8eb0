"""The group-sequential paired gate statistics, tested against published boundaries, exact
probabilities and simulation (numpy draws with fixed seeds, no processes, no clocks).

The error-rate simulations run the gate's rule vectorised over thousands of gates
(``simulate_gates``, built on the module's boundaries, spending and rank functions); one test
drives ``SequentialGate.look`` itself on the same draws and requires identical decisions, so the
rates measured on the vectorised rule are the gate's rates.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats as sps

from harness.gate.sequential import (CaseSpec, SequentialGate, boundaries, false_alarm_at_budget, final_boundary,
                                     hodges_lehmann, min_detectable_effect, pairs_needed, signed_rank_z,
                                     signed_rank_z_rows, spent, walsh_averages, walsh_interval, walsh_summary_rows)
from harness.gate.stats import Outcome, min_repeats_signed_rank

# Simulations of the sequential test's error rates (about 12 s): the slow tier.
pytestmark = pytest.mark.slow

OPEN, REGRESSED, IMPROVED, UNCHANGED, INCONCLUSIVE = 0, 1, 2, 3, 4
CODE = {None: OPEN, Outcome.REGRESSED: REGRESSED, Outcome.IMPROVED: IMPROVED, Outcome.UNCHANGED: UNCHANGED,
        Outcome.INCONCLUSIVE: INCONCLUSIVE}


def binomial_se(p: float, trials: int) -> float:
    return math.sqrt(p * (1 - p) / trials)


# --------------------------------------------------------------------------- a vectorised gate


@dataclass
class Simulated:
    outcome: np.ndarray  # (gates, cases) outcome codes
    rejected: np.ndarray  # (gates, cases) "no change" rejected at some look
    likely: np.ndarray  # (gates, cases) inconclusive with likely_regression
    stop_look: np.ndarray  # (gates, cases) index of the deciding look, -1 while open


def schedule(looks: int, pairs_per_look: int) -> tuple[list[int], list[float]]:
    """Equally spaced looks: pairs growing by ``pairs_per_look``, tau = k / looks."""
    return [pairs_per_look * (k + 1) for k in range(looks)], [(k + 1) / looks for k in range(looks)]


def _boundary_table(pairs, taus, level, spending, min_pairs) -> np.ndarray:
    table = np.full(len(pairs), np.inf)
    spending_looks = [k for k, n in enumerate(pairs) if n >= min_pairs]
    if spending_looks:
        table[spending_looks] = boundaries([pairs[k] for k in spending_looks],
                                           [spent(level, taus[k], spending) for k in spending_looks])
    return table


def simulate_gates(d: np.ndarray, pairs, taus, alpha: float, min_effect: float, confidence: float = 0.95,
                   spending: str = "obf", direction: str = "lower") -> Simulated:
    """``SequentialGate``'s rule on many gates at once. ``d[gate, case, :pairs[k]]`` are a case's
    pairs at look k. With a common schedule every open case of every gate has the same look
    history, so its boundaries depend only on its Holm level, alpha / (m - rejected so far)."""
    gates, m, _ = d.shape
    min_pairs = min_repeats_signed_rank(alpha)
    test_table = np.array([_boundary_table(pairs, taus, alpha / (m - r), spending, min_pairs) for r in range(m)])
    interval_table = _boundary_table(pairs, taus, 1 - confidence, spending, min_pairs)
    band = math.log1p(min_effect)
    worse_sign = 1 if direction == "lower" else -1
    outcome = np.zeros((gates, m), dtype=np.int8)
    rejected_sign = np.zeros((gates, m), dtype=np.int8)
    likely = np.zeros((gates, m), dtype=bool)
    stop_look = np.full((gates, m), -1)
    for k, n in enumerate(pairs):
        final = k == len(pairs) - 1
        is_open = outcome == OPEN
        z = np.zeros((gates, m))
        z[is_open] = signed_rank_z_rows(d[is_open][:, :n])
        while True:  # Holm's cascade within the look
            level_index = np.minimum((rejected_sign != 0).sum(axis=1), m - 1)
            c = test_table[level_index, k][:, None]
            new = is_open & (rejected_sign == 0) & np.isfinite(c) & (np.abs(z) >= c)
            if not new.any():
                break
            rejected_sign[new] = np.where(z[new] >= 0, 1, -1)
        # The estimate and interval matter only where a decision can happen.
        need = is_open & ((band > 0) | (rejected_sign != 0) | final)
        estimate = np.zeros((gates, m))
        low, high = np.full((gates, m), -np.inf), np.full((gates, m), np.inf)
        if need.any():
            summary = walsh_summary_rows(d[need][:, :n], interval_table[k])
            estimate[need], low[need], high[need] = summary.estimate, summary.low, summary.high
        sign = np.sign(estimate).astype(np.int8)
        beyond = (sign != 0) & (np.abs(estimate) >= band)
        worse = sign == worse_sign
        changed = need & (rejected_sign != 0) & beyond & (sign == rejected_sign)
        unchanged = need & ~changed & (-band < low) & (high < band)
        outcome[changed & worse] = REGRESSED
        outcome[changed & ~worse] = IMPROVED
        outcome[unchanged] = UNCHANGED
        if final:
            rest = need & ~changed & ~unchanged
            outcome[rest] = INCONCLUSIVE
            # The likely-regression rule's one-sided test at the case's Holm share of alpha.
            level = alpha / (m - np.minimum((rejected_sign != 0).sum(axis=1), m - 1))[:, None]
            worse_at_level = sps.norm.sf(worse_sign * z) <= level
            likely[rest] = (worse & beyond & worse_at_level)[rest]
        stop_look[is_open & (outcome != OPEN)] = k
    return Simulated(outcome, rejected_sign != 0, likely, stop_look)


def drive_gate(d_gate: np.ndarray, pairs, taus, alpha, min_effect, direction="lower") -> dict:
    """One gate through ``SequentialGate.look``: per case, (outcome code, rejected, likely, stop look)."""
    cases = [CaseSpec(f"c{j}", min_effect, direction) for j in range(d_gate.shape[0])]
    gate = SequentialGate(cases, alpha=alpha)
    stop = {c.case_id: -1 for c in cases}
    for k, (n, tau) in enumerate(zip(pairs, taus)):
        states = gate.look(tau, {cid: d_gate[int(cid[1:]), :n] for cid in gate.open_cases},
                           final=k == len(pairs) - 1)
        for cid, s in states.items():
            if s.decided and stop[cid] < 0:
                stop[cid] = k
    return {cid: (CODE[s.outcome], s.rejected, s.likely_regression, stop[cid]) for cid, s in gate.states.items()}


# --------------------------------------------------------------------------- spending and boundaries


def test_spending_functions_start_at_zero_and_end_at_alpha_exactly():
    for kind in ("obf", "pocock"):
        assert spent(0.05, 0.0, kind) == 0.0 and spent(0.05, -1.0, kind) == 0.0
        assert spent(0.05, 1.0, kind) == 0.05 and spent(0.05, 7.0, kind) == 0.05
        values = [spent(0.05, tau, kind) for tau in np.linspace(0.01, 1, 50)]
        assert np.all(np.diff(values) > 0)
    # O'Brien-Fleming-type spends almost nothing early, Pocock-type nearly evenly.
    assert spent(0.05, 0.2, "obf") < 2e-6
    assert spent(0.05, 0.2, "pocock") == pytest.approx(0.05 * math.log(1 + (math.e - 1) * 0.2))
    with pytest.raises(ValueError):
        spent(0.05, 0.5, "linear")


@pytest.mark.parametrize("kind,published", [
    ("obf", [4.877, 3.357, 2.680, 2.290, 2.031]),
    ("pocock", [2.438, 2.427, 2.410, 2.397, 2.386]),
])
def test_boundaries_reproduce_the_published_lan_demets_values(kind, published):
    cumulative = [spent(0.05, (k + 1) / 5, kind) for k in range(5)]
    assert np.allclose(boundaries([1, 2, 3, 4, 5], cumulative), published, atol=0.005)
    # Information on any scale: pairs instead of fractions give the same boundaries.
    assert np.allclose(boundaries([8, 16, 24, 32, 40], cumulative), published, atol=0.005)


def _rectangle(lower, upper, corr):
    return sps.multivariate_normal(mean=np.zeros(len(lower)), cov=corr).cdf(upper, lower_limit=lower)


def test_boundaries_with_unequal_spacing_spend_exactly_the_increments():
    info, cumulative = [3.0, 10.0], [0.01, 0.05]
    c = boundaries(info, cumulative)
    assert c[0] == pytest.approx(sps.norm.isf(0.005))
    rho = math.sqrt(info[0] / info[1])
    corr = np.array([[1, rho], [rho, 1]])
    survive_first = 1 - 0.01
    both_inside = _rectangle([-c[0], -c[1]], [c[0], c[1]], corr)
    assert survive_first - both_inside == pytest.approx(0.04, abs=2e-5)


def test_a_look_with_nothing_to_spend_has_an_infinite_boundary_and_changes_nothing_later():
    info, cumulative = [2.0, 5.0, 11.0], [0.005, 0.005, 0.03]
    c = boundaries(info, cumulative)
    assert math.isinf(c[1])
    # The infinite look constrains nothing: the same as leaving it out...
    assert np.allclose(boundaries([2.0, 11.0], [0.005, 0.03]), c[[0, 2]], atol=1e-6)
    # ...and exact: P(|Z1| < c1, |Z3| >= c3) is the increment 0.025.
    rho = math.sqrt(2.0 / 11.0)
    inside = _rectangle([-c[0], -c[2]], [c[0], c[2]], np.array([[1, rho], [rho, 1]]))
    assert (1 - 0.005) - inside == pytest.approx(0.025, abs=2e-5)
    # Nothing to spend at the first look either.
    c = boundaries([1.0, 4.0], [0.0, 0.01])
    assert math.isinf(c[0]) and c[1] == pytest.approx(sps.norm.isf(0.005), abs=1e-6)


def test_boundaries_fall_as_alpha_rises_which_holm_recycling_relies_on():
    info = [5, 9, 14, 22, 30, 41]
    taus = [0.1, 0.25, 0.4, 0.6, 0.8, 1.0]
    low_level = boundaries(info, [spent(0.002, t) for t in taus])
    high_level = boundaries(info, [spent(0.01, t) for t in taus])
    assert math.isinf(low_level[0]) and math.isinf(high_level[0])  # nothing to spend at tau = 0.1
    assert np.all(high_level[1:] < low_level[1:])


def test_thirty_looks_take_well_under_fifty_milliseconds():
    cumulative = [spent(0.01, (k + 1) / 30) for k in range(30)]
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        boundaries(np.arange(4, 124, 4), cumulative)
        best = min(best, time.perf_counter() - start)
    assert best < 0.05, best


def test_boundaries_reject_nonsense():
    with pytest.raises(ValueError):
        boundaries([2, 2], [0.01, 0.02])  # information must grow
    with pytest.raises(ValueError):
        boundaries([1, 2], [0.02, 0.01])  # cumulative alpha must not fall
    with pytest.raises(ValueError):
        boundaries([1, 2], [0.01])


# --------------------------------------------------------------------------- rank statistics


def test_signed_rank_z_is_antisymmetric_and_points_the_right_way():
    rng = np.random.default_rng(3)
    for n in (6, 20, 50, 51, 90):
        d = rng.normal(0.05, 0.1, n)
        forward, backward = signed_rank_z(d), signed_rank_z(-d)
        assert forward.z == pytest.approx(-backward.z) and forward.p_value == pytest.approx(backward.p_value)
        assert forward.n == n
    assert signed_rank_z(rng.normal(0.3, 0.1, 30)).z > 3
    assert signed_rank_z(rng.normal(-0.3, 0.1, 30)).z < -3
    # |z| is the two-sided p turned back into a normal quantile.
    r = signed_rank_z(rng.normal(0.02, 0.1, 25))
    assert r.p_value == pytest.approx(2 * sps.norm.sf(abs(r.z)))


def test_signed_rank_z_matches_scipy_and_handles_degenerate_input():
    rng = np.random.default_rng(4)
    d = rng.normal(0.02, 0.1, 30)
    assert signed_rank_z(d).p_value == pytest.approx(sps.wilcoxon(d, method="exact").pvalue)
    for degenerate in (np.zeros(6), [0.2]):
        assert (signed_rank_z(degenerate).z, signed_rank_z(degenerate).p_value) == (0.0, 1.0)
    assert signed_rank_z([]).n == 0
    # Zeros count half for each sign: many identical pairs pull z toward 0.
    assert abs(signed_rank_z([0.1] * 8 + [0.0] * 8).z) < abs(signed_rank_z([0.1] * 8).z)
    with pytest.raises(ValueError):
        signed_rank_z([0.1, float("nan")])


def test_the_vectorised_signed_rank_z_is_the_same_number():
    rng = np.random.default_rng(5)
    for n in (2, 7, 30, 50, 51, 75):
        d = rng.normal(0.03, 0.1, (40, n))
        d[0, :2] = 0.0  # zeros
        d[1, :] = np.round(d[1, :], 1)  # ties
        assert np.allclose(signed_rank_z_rows(d), [signed_rank_z(row).z for row in d], atol=1e-9)


def test_hodges_lehmann_and_walsh_interval_known_values():
    assert list(walsh_averages([1.0, 2.0, 3.0])) == [1.0, 1.5, 2.0, 2.0, 2.5, 3.0]
    assert hodges_lehmann([1.0, 2.0, 3.0]) == 2.0
    assert hodges_lehmann([0.0, 0.0, 0.0, 100.0]) == 0.0  # one wild pair does not move it
    d = np.arange(1.0, 21.0)
    # n = 20: k = floor(105 - 1.96 * 26.79) = 52, the 53rd and 158th of 210 Walsh averages.
    walsh = walsh_averages(d)
    assert walsh_interval(d, 1.96) == (walsh[52], walsh[157])
    assert walsh_interval(d[:4], 1.96) == (-math.inf, math.inf)  # k < 0: too few for 95 %
    assert walsh_interval(d, math.inf) == (-math.inf, math.inf)
    summary = walsh_summary_rows(np.vstack([d, d[::-1] * 2]), 1.96)
    assert summary.estimate.tolist() == [hodges_lehmann(d), hodges_lehmann(d * 2)]
    assert (summary.low[1], summary.high[1]) == walsh_interval(d * 2, 1.96)


@pytest.mark.parametrize("n,draw", [
    (20, lambda rng, size: rng.normal(0.0, 0.1, size)),
    (12, lambda rng, size: 0.05 * rng.standard_t(3, size)),
])
def test_walsh_interval_covers_the_pseudo_median_about_as_often_as_it_says(n, draw):
    rng = np.random.default_rng(6)
    true_center, trials = 0.04, 1000
    covered = 0
    for _ in range(trials):
        low, high = walsh_interval(true_center + draw(rng, n), 1.959964)
        covered += low <= true_center <= high
    assert 0.92 <= covered / trials <= 0.98, covered / trials


# --------------------------------------------------------------------------- the gate, end to end


def test_the_vectorised_rule_and_sequential_gate_decide_the_same():
    rng = np.random.default_rng(8)
    pairs, taus = schedule(12, 5)
    gates = 30
    effects, noise = np.log([1.0, 1.06, 1.12, 1 / 1.1, 1.07]), np.array([0.1, 0.1, 0.1, 0.1, 0.3])
    d = rng.normal(0.0, 1.0, (gates, 5, pairs[-1])) * noise[None, :, None] + effects[None, :, None]
    sim = simulate_gates(d, pairs, taus, alpha=0.05, min_effect=0.05)
    for g in range(gates):
        driven = drive_gate(d[g], pairs, taus, alpha=0.05, min_effect=0.05)
        for j in range(5):
            expected = (sim.outcome[g, j], sim.rejected[g, j], sim.likely[g, j], sim.stop_look[g, j])
            assert driven[f"c{j}"] == expected, (g, j)
    # The draws exercise every kind of outcome, the likely-regression flag and recycled levels.
    assert set(np.unique(sim.outcome)) == {REGRESSED, IMPROVED, UNCHANGED, INCONCLUSIVE}
    assert sim.likely.any() and (sim.rejected.sum(axis=1) >= 2).any()


def test_holm_recycling_cascades_within_one_look():
    # c1: 30 pairs, negatives at ranks 1..14 and 25: exact two-sided z about 2.1, between the
    # single-look boundary at alpha/2 (2.24) and at alpha (1.96).
    signs = np.ones(30)
    signs[list(range(14)) + [24]] = -1
    moderate = 0.001 * np.arange(1, 31) * signs
    assert 1.96 < signed_rank_z(moderate).z < 2.24
    strong = np.full(30, 0.1) + 0.001 * np.arange(30)
    null = 0.001 * np.arange(1, 31) * np.where(np.arange(30) % 2, 1, -1)
    cases = [CaseSpec("c0", 0.0), CaseSpec("c1", 0.0)]
    alone = SequentialGate(cases, alpha=0.05).look(1.0, {"c0": null, "c1": moderate}, final=True)
    assert not alone["c1"].rejected and alone["c1"].local_alpha == 0.025
    helped = SequentialGate(cases, alpha=0.05).look(1.0, {"c0": strong, "c1": moderate}, final=True)
    assert helped["c0"].outcome == Outcome.REGRESSED and helped["c1"].outcome == Outcome.REGRESSED
    assert helped["c1"].local_alpha == pytest.approx(0.05)
    assert helped["c1"].test_boundary == pytest.approx(sps.norm.isf(0.025))


def test_gate_outcomes_directions_and_reasons():
    rng = np.random.default_rng(9)
    slower, same = rng.normal(math.log(1.10), 0.02, 40), rng.normal(0.0, 0.02, 40)
    # Noisy, estimate exactly +7 %: beyond the minimum effect, far from significant.
    noisy = rng.normal(0.0, 0.3, 40)
    noisy += math.log(1.07) - hodges_lehmann(noisy)
    cases = [CaseSpec("lat", 0.05), CaseSpec("thr", 0.05, "higher"), CaseSpec("same", 0.05), CaseSpec("noisy", 0.05)]
    gate = SequentialGate(cases)
    states = gate.look(1.0, {"lat": slower, "thr": slower, "same": same, "noisy": noisy}, final=True)
    assert states["lat"].outcome == Outcome.REGRESSED
    assert states["thr"].outcome == Outcome.IMPROVED  # higher throughput is better
    assert states["same"].outcome == Outcome.UNCHANGED
    # Beyond the minimum effect but far from significant: an estimate alone is what noise of 30 %
    # per pair gives an unchanged case a third of the time, so it is no likely regression.
    assert states["noisy"].outcome == Outcome.INCONCLUSIVE and not states["noisy"].likely_regression
    lat = states["lat"]
    assert lat.ratio == pytest.approx(math.exp(hodges_lehmann(slower)))
    assert lat.interval_low < lat.ratio < lat.interval_high and lat.rejected
    assert lat.reason.startswith(f"{(lat.ratio - 1) * 100:+.1f} % [") and "95 % repeated CI" in lat.reason
    assert "beyond" in lat.reason and "≥ the 5 % minimum effect" in lat.reason
    assert lat.p_nominal == pytest.approx(2 * sps.norm.sf(abs(lat.z)))
    json.dumps([s.to_dict() for s in states.values()], allow_nan=False)


def test_min_pairs_spends_nothing_then_the_cumulative_amount():
    gate = SequentialGate([CaseSpec("c", 0.05)], alpha=0.01)
    assert gate.min_pairs == 8
    rng = np.random.default_rng(10)
    d = rng.normal(0.0, 0.1, 30)
    early = gate.look(0.3, {"c": d[:5]})["c"]
    assert math.isinf(early.test_boundary) and math.isinf(early.interval_boundary) and early.looks == 1
    assert early.interval_low == 0.0 and math.isinf(early.interval_high) and early.outcome is None
    assert early.to_dict()["test_boundary"] is None
    later = gate.look(0.5, {"c": d[:12]})["c"]
    # The look at 5 pairs spent nothing; at 12 all that spending allows by tau = 0.5 is spent.
    assert later.test_boundary == pytest.approx(sps.norm.isf(spent(0.01, 0.5) / 2))
    assert later.looks == 2


def test_gate_bookkeeping():
    rng = np.random.default_rng(11)
    gate = SequentialGate([CaseSpec("a", 0.05), CaseSpec("b", 0.05)], alpha=0.01)
    a, b = rng.normal(0.0, 0.01, 40), rng.normal(0.0, 0.2, 40)
    first = gate.look(0.5, {"a": a, "b": b[:20]})
    assert first["a"].outcome == Outcome.UNCHANGED and first["b"].outcome is None
    # The same pairs again later: one information level, the later (lower) boundary.
    again = gate.look(0.7, {"a": a, "b": b[:20]})
    assert again["a"] == first["a"]  # decided: returned unchanged
    assert again["b"].looks == 2 and again["b"].test_boundary < first["b"].test_boundary
    with pytest.raises(ValueError):
        gate.look(0.8, {"b": b[:10]})  # pairs only accumulate
    with pytest.raises(AssertionError, match="internal invariant broken: pairs of zzz, which this gate was not built"):
        gate.look(0.8, {"zzz": b})  # no caller passes a case the gate was not built with
    final = gate.look(0.9, {}, final=True)  # an open case without pairs at the end
    assert final["b"].outcome == Outcome.INCONCLUSIVE and "no pairs at the final look" in final["b"].reason
    with pytest.raises(ValueError):
        SequentialGate([CaseSpec("a"), CaseSpec("a")])
    with pytest.raises(ValueError):
        CaseSpec("x", direction="sideways")


# --------------------------------------------------------------------------- error rates by simulation


@pytest.mark.parametrize("noise", ["normal", "t3"])
def test_sequential_a_a_false_alarm_rate_is_alpha_and_not_far_below(noise):
    rng = np.random.default_rng(20 if noise == "normal" else 21)
    alpha, gates = 0.05, 4000
    pairs, taus = schedule(20, 4)
    shape = (gates, 1, pairs[-1])
    d = rng.normal(0.0, 0.1, shape) if noise == "normal" else 0.05 * rng.standard_t(3, shape)
    sim = simulate_gates(d, pairs, taus, alpha=alpha, min_effect=0.0)
    rejected = sim.rejected.mean()
    se = binomial_se(alpha, gates)
    assert 0.6 * alpha <= rejected <= alpha + 3 * se, rejected
    # Two-sided: a regression is one tail of it.
    regressed = (sim.outcome == REGRESSED).mean()
    assert abs(regressed - alpha / 2) <= 3 * binomial_se(alpha / 2, gates) + 0.1 * alpha, regressed


@pytest.mark.parametrize("correlation", [0.0, 0.6])
def test_holm_bounds_the_family_wise_rate_over_cases_and_looks(correlation):
    rng = np.random.default_rng(30 + int(correlation * 10))
    alpha, gates, m = 0.05, 4000, 5
    pairs, taus = schedule(20, 4)
    shared = rng.normal(0.0, 0.1, (gates, 1, pairs[-1]))
    own = rng.normal(0.0, 0.1, (gates, m, pairs[-1]))
    d = math.sqrt(correlation) * shared + math.sqrt(1 - correlation) * own
    sim = simulate_gates(d, pairs, taus, alpha=alpha, min_effect=0.0)
    any_rejection = sim.rejected.any(axis=1).mean()
    assert any_rejection <= alpha + 3 * binomial_se(alpha, gates), any_rejection
    assert any_rejection >= 0.3 * alpha, any_rejection  # Holm is not vacuous


def test_a_ten_percent_regression_is_caught_and_an_a_a_ends_unchanged():
    rng = np.random.default_rng(40)
    gates = 2000
    pairs, taus = schedule(15, 4)  # 60 pairs at the budget
    noise = rng.normal(0.0, 0.1, (gates, 1, pairs[-1]))
    slower = simulate_gates(noise + math.log(1.10), pairs, taus, alpha=0.01, min_effect=0.05)
    assert (slower.outcome == REGRESSED).mean() >= 0.95
    same = simulate_gates(noise, pairs, taus, alpha=0.01, min_effect=0.05)
    assert (same.outcome == UNCHANGED).mean() >= 0.8
    assert (same.outcome == REGRESSED).mean() <= 0.01


def test_likely_regression_in_an_a_a_fires_as_often_as_the_formula_says():
    rng = np.random.default_rng(41)
    gates, sd, min_effect = 4000, 0.2, 0.05
    pairs, taus = schedule(15, 4)
    sim = simulate_gates(rng.normal(0.0, sd, (gates, 1, pairs[-1])), pairs, taus, alpha=0.01, min_effect=min_effect)
    formula = false_alarm_at_budget(sd, pairs[-1], min_effect, 0.01)
    # The formula counts every A/A whose final estimate reaches the band: most end "inconclusive,
    # likely regression", a few are "regressed" (also significant) or stopped earlier. Allowance:
    # 3 binomial SEs plus 20 % for the normal approximation of the estimate's tail.
    tolerance = 3 * binomial_se(formula, gates) + 0.2 * formula
    likely = sim.likely.mean()
    fails = ((sim.outcome == REGRESSED) | sim.likely).mean()
    assert abs(likely - formula) <= tolerance, (likely, formula)
    assert abs(fails - formula) <= tolerance, (fails, formula)


def test_min_detectable_effect_is_detected_with_the_power_it_promises():
    rng = np.random.default_rng(42)
    gates, sd, n = 2000, 0.1, 60
    pairs, taus = schedule(15, 4)
    mde = min_detectable_effect(sd, n, alpha=0.01, min_effect=0.05, power=0.95, looks=15)
    sim = simulate_gates(rng.normal(math.log1p(mde), sd, (gates, 1, n)), pairs, taus, alpha=0.01, min_effect=0.05)
    detected = ((sim.outcome == REGRESSED) | sim.likely).mean()
    assert 0.92 <= detected <= 0.99, (mde, detected)


# --------------------------------------------------------------------------- planning formulas


def test_planning_formulas_agree_with_each_other():
    # Both outcomes that fail the build need the estimate beyond the minimum effect.
    se = 0.1 * math.sqrt(math.pi / 3) / math.sqrt(60)
    assert min_detectable_effect(0.1, 60, 0.01, 0.05) == pytest.approx(math.expm1(math.log(1.05) + 1.644854 * se))
    # With a small minimum effect significance is the binding condition.
    loose = min_detectable_effect(0.1, 60, 0.01, 0.001, significant=True)
    assert loose == pytest.approx(math.expm1((final_boundary(0.01) + 1.644854) * se))
    assert loose > min_detectable_effect(0.1, 60, 0.01, 0.001)
    # More pairs, smaller detectable effect; pairs_needed inverts the significance route.
    assert min_detectable_effect(0.1, 200, 0.01, 0.001, significant=True) < loose
    n = pairs_needed(0.1, 0.10, alpha=0.01, power=0.95)
    assert min_detectable_effect(0.1, n, 0.01, 0.0, significant=True) <= 0.10
    assert min_detectable_effect(0.1, n - 1, 0.01, 0.0, significant=True) > 0.10
    assert pairs_needed(0.1, 1 / 1.1 - 1, alpha=0.01) == n  # 1/1.1 is as far as 1.1 on the log scale
    assert pairs_needed(0.1, 0.03, alpha=0.01, min_effect=0.05) is None
    assert pairs_needed(1e-4, 0.5, alpha=0.01) == min_repeats_signed_rank(0.01)
    # The likely-regression rule's own false alarms: at most alpha, whatever the noise.
    assert false_alarm_at_budget(0.1, 60, 0.0, 0.01) == pytest.approx(0.01)
    assert false_alarm_at_budget(0.1, 60, 0.05, 0.01) < false_alarm_at_budget(0.2, 60, 0.05, 0.01) <= 0.01


def test_pocock_spending_which_the_gate_uses_holds_alpha_and_stops_a_regression_sooner():
    """The gate's choice of spending function (harness.gate.paired.SPENDING), as docs/gate.md
    reports it: at a per-pair noise like this project's cases (6.7 %), 60 pairs and 20 looks,
    both kinds hold the A/A rate and catch +10 %; Pocock-type decides it earlier."""
    from harness.gate.paired import SPENDING

    assert SPENDING == "pocock"
    rng = np.random.default_rng(50)
    gates = 2000
    pairs, taus = schedule(20, 3)
    noise = rng.normal(0.0, 0.067, (gates, 1, pairs[-1]))
    stop_fraction = {}
    for spending in ("obf", "pocock"):
        aa = simulate_gates(noise, pairs, taus, alpha=0.05, min_effect=0.0, spending=spending)
        assert aa.rejected.mean() <= 0.05 + 3 * binomial_se(0.05, gates), (spending, aa.rejected.mean())
        slow = simulate_gates(noise + math.log(1.10), pairs, taus, alpha=0.01, min_effect=0.05, spending=spending)
        assert (slow.outcome == REGRESSED).mean() >= 0.99, spending
        stop_fraction[spending] = float(np.mean((slow.stop_look + 1) / len(pairs)))
    assert stop_fraction["pocock"] < 0.8 * stop_fraction["obf"], stop_fraction
