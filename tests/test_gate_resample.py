"""The resampled gate rates replay the gate's own loop and decision on measured pairs."""
import json

import numpy as np
import pytest

from harness.gatepower import power
from harness.gatepower.resample import MeasuredGate, resampled_rate

# Simulated gate-power pools (about 14 s): the slow tier, which CI runs after the quick one.
pytestmark = pytest.mark.slow

CASE = "selftest/fault_rank=0,mode=spin,spin_iters=1000,world=1"
OTHER = "selftest/fault_rank=0,mode=noop,world=1"


def _gates(shift: float, n_gates: int = 5, pairs: int = 40, sd: float = 0.05, seed: int = 1, cases=(CASE,)):
    rng = np.random.default_rng(seed)
    return [MeasuredGate({c: list(rng.normal(np.log1p(shift) if c == cases[0] else 0.0, sd, pairs)) for c in cases},
                         [3.6] * pairs, 5.0) for _ in range(n_gates)]


def test_an_aa_pool_rarely_fails_and_a_slowdown_pool_always_does_within_the_budget():
    aa = resampled_rate(_gates(0.0), [CASE], None, 180, 0.05, gates=300)
    slow = resampled_rate(_gates(0.10), [CASE], CASE, 180, 0.05, gates=300)
    # 5 % noise per pair, 48 pairs in 180 s: the design's power at +10 % is > 0.99 and its A/A
    # rate of "likely regression" is far below alpha; the replay must show both.
    assert aa["fails"] <= 3, aa
    assert slow["fails"] >= 297, slow
    assert aa["distinct_pairs"] == {CASE: 200} and aa["measured_gates"] == 5
    # The replayed clock includes the set-up and stops at the budget.
    assert aa["wall_max_s"] <= 180 and slow["wall_median_s"] < aa["wall_max_s"]


def test_a_noisier_pool_needs_the_budget_and_misses_more():
    noisy = resampled_rate(_gates(0.10, sd=0.40), [CASE], CASE, 60, 0.05, gates=200)
    assert 0 < noisy["fails"] < 200, noisy


def test_an_aa_of_several_cases_counts_any_case_and_a_slowdown_only_the_slowed_one():
    cases = (CASE, OTHER)
    slowed_other = [MeasuredGate({CASE: m.pairs[CASE], OTHER: [d + np.log(1.3) for d in m.pairs[OTHER]]},
                                 m.generation_s, m.setup_s) for m in _gates(0.0, cases=cases)]
    watched = resampled_rate(slowed_other, list(cases), CASE, 180, 0.05, gates=100)
    anyone = resampled_rate(slowed_other, list(cases), None, 180, 0.05, gates=100)
    assert watched["fails"] <= 2 and anyone["fails"] >= 98


def test_an_empty_pool_is_said_not_invented():
    found = resampled_rate([MeasuredGate({CASE: []}, [], 1.0)], [CASE], None, 180, 0.05, gates=10)
    assert found["gates"] == 0 and "no measured pairs" in found["why"]


def test_a_gate_json_gives_its_pairs_pace_and_set_up(tmp_path):
    doc = {"cases": [{"case_id": CASE, "detail": {"pairs": [0.01, -0.02, 0.0]}},
                     {"case_id": OTHER, "detail": {"pairs": [0.03, 0.01]}}],
           "extra": {"generation_s": [4.0, 3.0, 2.0], "measure_wall_s": 15.0}}
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(doc))
    m = MeasuredGate.load(path)
    assert m.pairs[CASE] == [0.01, -0.02, 0.0] and m.setup_s == 6.0
    assert m.all_open_generation_s() == [4.0, 3.0]  # the third generation had one case left


def test_the_next_size_interpolates_across_the_target_and_keeps_the_closest():
    # Either side of +10 %: interpolate, never leap beyond the bracket as a secant on noise can.
    assert 5.0 < power._next_scale([(9.1, 0.19), (4.8, 0.07), (5.9, 0.064), (9.1, 0.143)], 0.10) < 9.1
    # One side only: proportional from the closest point.
    assert abs(power._next_scale([(1.0, 0.20)], 0.10) - 0.5) < 1e-12
    assert power._closest([(9.1, 0.143), (5.9, 0.064), (6.5, 0.092)], 0.10) == (6.5, 0.092)


def test_gate_power_stores_and_labels_the_resampled_rates(tmp_path):
    rng = np.random.default_rng(3)
    cells = [{"name": f"{CASE}: {power.AA}", "case_ids": [CASE], "condition": power.AA, "candidate": "a", "target": None},
             {"name": f"{CASE}: uniform +10 %", "case_ids": [CASE], "condition": "uniform +10 %", "candidate": "b",
              "target": CASE}]
    trials = []
    for index, shift in enumerate((0.0, 0.10)):
        for trial in range(3):
            pairs = list(rng.normal(np.log1p(shift), 0.05, 30))
            gate = tmp_path / "gates" / f"cell-{index:02d}" / f"trial-{trial:02d}" / "gate.json"
            gate.parent.mkdir(parents=True)
            gate.write_text(json.dumps({"cases": [{"case_id": CASE, "detail": {"pairs": pairs}}],
                                        "extra": {"generation_s": [2.0] * 30, "measure_wall_s": 64.0}}))
            trials.append({"cell": cells[index]["name"], "trial": trial, "exit_code": 1 if shift else 0, "wall_s": 64.0,
                           "cases": {CASE: {"outcome": "regressed" if shift else "unchanged", "ratio": 1 + shift}}})
    doc = {"base": "0" * 40, "settings": {"budget_s": 180, "min_effect": 0.05, "statistic": None, "rounds": None},
           "cells": cells, "trials": trials, "tool_trials": [], "branches": {"b": {"fraction": 0.10}}}
    power.resample(doc, tmp_path, gates=100)
    rows = {(r["cell"], r["shift"]): r for r in doc["resampled"]["rows"]}
    aa = rows[(cells[0]["name"], 0.0)]
    assert aa["distinct_pairs"] == {CASE: 90} and aa["fails"] <= 1
    assert rows[(cells[1]["name"], 0.0)]["fails"] == 100
    # The A/A pairs moved by +10 %, a model of the slowdown, are found as the real +10 % pairs are;
    # moved by +5 %, exactly the minimum effect, about half the time.
    assert rows[(cells[0]["name"], 0.10)]["fails"] >= 98
    assert 20 <= rows[(cells[0]["name"], 0.05)]["fails"] <= 80
    assert (cells[1]["name"], 0.05) not in rows  # only A/A pairs are moved
    text = power.table(doc)
    assert "Resampled, not real gates" in text and "| 3 | 90 | 100 / 100 |" in text
    assert "| C1 | A/A pairs +10 % (model) | 3 | 90 |" in text
