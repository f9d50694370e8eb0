"""The ring/tree crossover of allreduce: the message size at which the faster of the two changes,
with a bootstrap interval, so noise between neighbouring sizes is not read as a crossover.

The bootstrap resamples each record's own iterations (with replacement, ``RESAMPLES`` times, a
fixed seed so a report is the same every time it is built), takes each resample's p50 per size and
finds that resample's crossover the way the point estimate is found (``crossover_bytes``). The rule
for calling it significant is ``RULE``, stated once here and quoted by the report and the docs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from harness.figures import is_mean_only
from harness.records import Record

RESAMPLES = 1000
SEED = 20260117  # fixed: the same run gives the same interval in every report
LEVEL = 0.95  # share of resamples that must show a crossover, and the interval's coverage

RULE = (f"{RESAMPLES} bootstrap resamples of each record's iterations (fixed seed); in each, the p50 per size "
        "and the crossover interpolated as for the measured p50s. A resample has a crossover when the faster "
        "algorithm at the smallest common size is not the faster at the largest (its crossover is the middle "
        "one where noise makes the lead change more than once). The crossover is significant when at least "
        f"{LEVEL:.0%} of resamples have one; then the median and the {LEVEL:.0%} interval (2.5th to 97.5th "
        f"percentile) of their crossovers are given, else \"no significant crossover\".")


def crossover_bytes(sizes: Sequence[int], ring_us: Sequence[float], tree_us: Sequence[float]) -> list[float]:
    """Sizes where ring and tree swap places, interpolated on log-log axes between neighbours."""
    out = []
    diffs = [math.log(r) - math.log(t) for r, t in zip(ring_us, tree_us)]
    for i in range(1, len(sizes)):
        d0, d1 = diffs[i - 1], diffs[i]
        if d0 == 0:
            out.append(float(sizes[i - 1]))
        elif d0 * d1 < 0:
            frac = d0 / (d0 - d1)
            out.append(float(math.exp(math.log(sizes[i - 1]) + frac * (math.log(sizes[i]) - math.log(sizes[i - 1])))))
    return out


@dataclass(frozen=True)
class Crossover:
    key: tuple  # (dtype, world, backend)
    sizes: tuple  # the sizes both algorithms measured, ascending
    point_bytes: tuple  # crossovers of the measured p50s (of the means, for imported records)
    resampled: bool  # False: a record has no per-iteration samples (an import), so no interval
    present_share: float = 0.0  # share of resamples that have a crossover
    median_bytes: Optional[float] = None  # set only when the crossover is significant
    low_bytes: Optional[float] = None
    high_bytes: Optional[float] = None

    @property
    def significant(self) -> bool:
        return self.median_bytes is not None


def _resampled_p50_us(samples_ns: Sequence[float], rng: np.random.Generator, resamples: int) -> np.ndarray:
    samples = np.asarray(samples_ns, dtype=np.float64)
    picks = rng.integers(0, samples.size, size=(resamples, samples.size))
    return np.median(samples[picks], axis=1) / 1e3


def _resample_crossover(sizes: Sequence[int], ring_us: np.ndarray, tree_us: np.ndarray) -> Optional[float]:
    lead_small, lead_large = np.sign(ring_us[0] - tree_us[0]), np.sign(ring_us[-1] - tree_us[-1])
    if lead_small == 0 or lead_large == 0 or lead_small == lead_large:
        return None
    found = crossover_bytes(sizes, ring_us, tree_us)
    return found[len(found) // 2]


def bootstrap(key: tuple, sizes: Sequence[int], ring: Sequence[Sequence[float]], tree: Sequence[Sequence[float]],
              resamples: int = RESAMPLES, seed: int = SEED) -> Crossover:
    """The crossover of ring and tree from each size's raw samples (ns), per ``RULE``."""
    sizes = tuple(sizes)
    point = tuple(crossover_bytes(sizes, [float(np.median(s)) for s in ring], [float(np.median(s)) for s in tree]))
    rng = np.random.default_rng(seed)
    ring_us = np.stack([_resampled_p50_us(s, rng, resamples) for s in ring], axis=1)
    tree_us = np.stack([_resampled_p50_us(s, rng, resamples) for s in tree], axis=1)
    found = [x for b in range(resamples) if (x := _resample_crossover(sizes, ring_us[b], tree_us[b])) is not None]
    share = len(found) / resamples
    if share < LEVEL:
        return Crossover(key, sizes, point, True, share)
    logs = np.log2(found)
    low, mid, high = (float(2 ** q) for q in np.quantile(logs, [(1 - LEVEL) / 2, 0.5, (1 + LEVEL) / 2]))
    return Crossover(key, sizes, point, True, share, mid, low, high)


def allreduce_series(records: Sequence[Record]) -> dict[tuple, list[Record]]:
    """Passing records by (algo, dtype, world, backend), each sorted by size."""
    series: dict[tuple, list[Record]] = {}
    for r in records:
        if r.ok:
            series.setdefault((r.params["algo"], r.params.get("dtype", ""), r.world, r.backend), []).append(r)
    return {k: sorted(v, key=lambda r: r.params["size_bytes"]) for k, v in sorted(series.items())}


def ring_tree_crossovers(records: Sequence[Record]) -> list[Crossover]:
    """One Crossover per (dtype, world, backend) that measured both ring and tree at two sizes or more."""
    series = {k: {r.params["size_bytes"]: r for r in recs} for k, recs in allreduce_series(records).items()}
    out = []
    for (algo, dtype, world, backend), ring in series.items():
        tree = series.get(("tree", dtype, world, backend))
        if algo != "ring" or not tree:
            continue
        sizes = sorted(set(ring) & set(tree))
        if len(sizes) < 2:
            continue
        key = (dtype, world, backend)
        pairs = [(ring[s], tree[s]) for s in sizes]
        if any(is_mean_only(r) or not r.samples_ns for pair in pairs for r in pair):
            # An imported record is one averaged time: there is nothing to resample.
            point = crossover_bytes(sizes, [r.summary.mean_ns for r, _ in pairs], [t.summary.mean_ns for _, t in pairs])
            out.append(Crossover(key, tuple(sizes), tuple(point), False))
            continue
        out.append(bootstrap(key, sizes, [r.samples_ns for r, _ in pairs], [t.samples_ns for _, t in pairs]))
    return out
