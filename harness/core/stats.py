"""Summaries derived from raw per-iteration samples.

Summaries are always recomputed from the samples (never stored alone), so a record cannot carry
a percentile that its own samples contradict.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

# Percentile method: numpy's default linear interpolation between order statistics. A Summary
# holds every percentile whatever ``n``; readers show one only where ``n`` supports it
# (harness.core.figures.samples_needed: p99 from 100 samples, p999 from 1,000).
PERCENTILE_METHOD = "linear"


@dataclass(frozen=True)
class Summary:
    n: int
    min_ns: float
    p50_ns: float
    p90_ns: float
    p99_ns: float
    p999_ns: float
    max_ns: float
    mean_ns: float

    @classmethod
    def of(cls, samples_ns) -> "Summary":
        values = np.asarray(samples_ns, dtype=np.float64)
        if values.size == 0:
            raise ValueError("cannot summarise zero samples")
        p50, p90, p99, p999 = np.percentile(values, [50, 90, 99, 99.9], method=PERCENTILE_METHOD)
        return cls(
            n=int(values.size),
            min_ns=float(values.min()),
            p50_ns=float(p50),
            p90_ns=float(p90),
            p99_ns=float(p99),
            p999_ns=float(p999),
            max_ns=float(values.max()),
            mean_ns=float(values.mean()),
        )

    def to_dict(self) -> dict:
        return asdict(self)

    def us(self, name: str) -> float:
        """A statistic in microseconds, e.g. ``summary.us("p99")``."""
        return getattr(self, f"{name}_ns") / 1e3
