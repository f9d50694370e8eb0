"""Load-imbalance figures of a load vector (per expert or per rank), all on the same loads.

- ``max_over_mean``: max / mean. ``maxvio`` = max / mean - 1 (the MaxVio of the auxiliary-loss-free
  balancing literature): 0 when perfectly balanced.
- ``cv``: coefficient of variation, population standard deviation / mean (scipy.stats.variation).
- ``balancedness``: mean / max, in (0, 1]. When the slowest rank sets the step and work is
  proportional to load, this is the ideal throughput relative to a balanced step, which is why
  the reports plot it beside measured effective throughput.
- ``gini``: Gini coefficient, 0 for equal loads, (n-1)/n when one holds everything.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


# name -> (which way is better, definition), for the figures a family derives from these.
MEASURES = {
    "max_over_mean": ("lower", "max / mean"),
    "maxvio": ("lower", "max / mean - 1 (MaxVio): 0 when perfectly balanced"),
    "cv": ("lower", "population standard deviation / mean"),
    "balancedness": ("higher", "mean / max, in (0, 1]: ideal throughput relative to a balanced step"),
    "gini": ("lower", "Gini coefficient: 0 for equal loads, (n-1)/n when one holds everything"),
}


@dataclass(frozen=True)
class Imbalance:
    max_over_mean: float
    maxvio: float
    cv: float
    balancedness: float
    gini: float

    @classmethod
    def of(cls, loads) -> "Imbalance":
        x = np.asarray(loads, dtype=np.float64).ravel()
        if x.size == 0 or (x < 0).any():
            raise ValueError("loads must be a non-empty vector of non-negative values")
        mean, peak = float(x.mean()), float(x.max())
        if mean == 0.0:
            raise ValueError("loads are all zero: imbalance is undefined")
        ratio = peak / mean
        # Imported here: scipy.stats costs ~0.8 s to import, paid by every rank and every gate
        # repeat if it sat at module level of a family the registry loads.
        from scipy import stats

        return cls(
            max_over_mean=ratio,
            maxvio=ratio - 1.0,
            cv=float(stats.variation(x)),
            balancedness=mean / peak,
            gini=gini(x),
        )

    def to_dict(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": v for k, v in asdict(self).items()}


def gini(values) -> float:
    """Gini coefficient from the sorted values: sum((2i - n - 1) x_i) / (n sum x), i from 1."""
    x = np.sort(np.asarray(values, dtype=np.float64).ravel())
    n = x.size
    i = np.arange(1, n + 1)
    return float(((2 * i - n - 1) * x).sum() / (n * x.sum()))


def rank_load(expert_load, placement_owner) -> np.ndarray:
    """Per-rank load from per-slot load: ``placement_owner[slot]`` is the rank holding the slot."""
    owner = np.asarray(placement_owner)
    return np.bincount(owner, weights=np.asarray(expert_load, dtype=np.float64), minlength=int(owner.max()) + 1)
