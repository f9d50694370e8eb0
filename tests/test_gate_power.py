"""gate-power's analysis on a synthetic pool (the measurement itself is a long benchmark, run by
``critpath gate-power``; here only its arithmetic is checked)."""
from __future__ import annotations

import numpy as np

from harness.gate.power import _pairs, analyse, table
from harness.gate.stats import Outcome


def _document(shift_by_pair, rounds=20, trials=2, sigma=0.02, seed=0):
    rng = np.random.default_rng(seed)
    pairs = [p.name for p in _pairs(1000, (0.05, 0.10, 0.20))]
    data = {"pairs": pairs, "statistics": ["p50_ns"], "repeats": 8, "min_effect": 0.05, "alpha": 0.01, "trials": []}
    for t in range(trials):
        rows = []
        for _ in range(rounds):
            values = {"base": float(1000 * rng.lognormal(0, sigma))}
            values.update({name: float(1000 * shift_by_pair[name] * rng.lognormal(0, sigma)) for name in pairs})
            rows.append({"values": {"p50_ns": values}})
        data["trials"].append({"trial": t, "wall_s": 60.0 + t, "rounds": rows})
    return data


def test_power_analysis_separates_a_a_from_injected_slowdowns():
    data = _document({"A/A": 1.0, "+5 %": 1.05, "+10 %": 1.10, "+20 %": 1.20})
    result = analyse(data, draws=100)
    resampled = result["resampled"]["p50_ns"]
    assert resampled["A/A"].get(Outcome.REGRESSED, 0) == 0
    assert resampled["+10 %"][Outcome.REGRESSED] >= 0.95
    assert resampled["+20 %"][Outcome.REGRESSED] == 1.0
    assert abs(resampled["+20 %"]["median_ratio"] - 1.2) < 0.03
    measured = result["measured"]["p50_ns"]
    assert measured["+20 %"] == {Outcome.REGRESSED: 2}
    text = table(data, result)
    assert "| +10 % |" in text and "median 60 s" in text


def test_power_analysis_reports_could_not_run_for_an_empty_trial():
    data = _document({"A/A": 1.0, "+5 %": 1.05, "+10 %": 1.10, "+20 %": 1.20}, trials=1)
    data["trials"].append({"trial": 1, "wall_s": None, "rounds": []})
    result = analyse(data, draws=50)
    assert result["measured"]["p50_ns"]["A/A"].get(Outcome.COULD_NOT_RUN) == 1
