"""The ring/tree crossover of allreduce: the message size at which the faster of the two changes,
with a bootstrap interval, so noise between neighbouring sizes is not read as a crossover.

The bootstrap resamples each record's own iterations (with replacement, ``RESAMPLES`` times, a
fixed seed so a report is the same every time it is built), takes each resample's p50 per size and
finds that resample's crossover the way the point estimate is found (``crossover_bytes``). The rule
for calling it significant is ``RULE``, stated once here and quoted by the report and the docs;
``ring_tree_finding`` is what the allreduce family concludes from it in a report.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from harness.core.family import Concluded
from harness.core.figures import is_mean_only
from harness.core.plotting import human_bytes
from harness.core.records import Record

RESAMPLES = 1000
SEED = 20260117  # fixed: the same run gives the same interval in every report
LEVEL = 0.95  # two-sided: a lead needs (1 + LEVEL) / 2 of resamples, an interval covers LEVEL
LEAD_SHARE = (1 + LEVEL) / 2

RULE = (f"{RESAMPLES} bootstrap resamples of each record's iterations (fixed seed), the p50 per size in each. "
        f"At a size, ring or tree is significantly faster when it is faster in at least {LEAD_SHARE:.1%} of "
        "resamples. A crossover is significant where the significantly faster algorithm changes between two "
        "measured sizes (sizes with no significant leader between them are skipped over); it is given as that "
        "bracket of measured sizes, the log-log interpolation of the measured p50s inside it, and the "
        f"{LEVEL:.0%} interval (2.5th to 97.5th percentile) of the resamples' interpolations. Nothing was "
        "measured inside the bracket: the interval is the interpolation's noise, not where the curves cross "
        "between the sizes. Otherwise \"no significant crossover\".")


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
class Change:
    """One significant change of the faster algorithm, between two measured sizes."""
    below_bytes: int  # the last size, going up, where the earlier leader is significantly faster
    above_bytes: int  # the first size where the other one is
    faster_below: str  # "ring" or "tree"
    point_bytes: Optional[float]  # the measured p50s' interpolated crossing inside the bracket
    median_bytes: Optional[float]  # of the resamples' crossings inside the bracket
    low_bytes: Optional[float]
    high_bytes: Optional[float]


@dataclass(frozen=True)
class Crossover:
    key: tuple  # (dtype, world, backend)
    sizes: tuple  # the sizes both algorithms measured, ascending
    point_bytes: tuple  # crossovers of the measured p50s (of the means, for imported records)
    resampled: bool  # False: a record has no per-iteration samples (an import), so no interval
    leads: tuple = ()  # per size: "ring", "tree" or "neither" (no significant leader)
    changes: tuple = ()  # the significant crossovers (Change), ascending

    @property
    def significant(self) -> bool:
        return bool(self.changes)


def _resampled_p50_us(samples_ns: Sequence[float], rng: np.random.Generator, resamples: int) -> np.ndarray:
    samples = np.asarray(samples_ns, dtype=np.float64)
    picks = rng.integers(0, samples.size, size=(resamples, samples.size))
    return np.median(samples[picks], axis=1) / 1e3


def _middle(found: Sequence[float]) -> Optional[float]:
    # Where noise makes the lead flip more than once inside a bracket, its middle crossing.
    return found[len(found) // 2] if found else None


def bootstrap(key: tuple, sizes: Sequence[int], ring: Sequence[Sequence[float]], tree: Sequence[Sequence[float]],
              resamples: int = RESAMPLES, seed: int = SEED) -> Crossover:
    """The crossovers of ring and tree from each size's raw samples (ns), per ``RULE``."""
    sizes = tuple(sizes)
    ring_p50 = [float(np.median(s)) for s in ring]
    tree_p50 = [float(np.median(s)) for s in tree]
    point = tuple(crossover_bytes(sizes, ring_p50, tree_p50))
    rng = np.random.default_rng(seed)
    ring_us = np.stack([_resampled_p50_us(s, rng, resamples) for s in ring], axis=1)
    tree_us = np.stack([_resampled_p50_us(s, rng, resamples) for s in tree], axis=1)
    ring_share = np.mean(ring_us < tree_us, axis=0)
    leads = tuple("ring" if s >= LEAD_SHARE else "tree" if 1 - s >= LEAD_SHARE else "neither" for s in ring_share)
    led = [i for i, lead in enumerate(leads) if lead != "neither"]
    changes = []
    for i, j in zip(led, led[1:]):
        if leads[i] == leads[j]:
            continue
        span = slice(i, j + 1)
        inside = [x for b in range(resamples)
                  if (x := _middle(crossover_bytes(sizes[span], ring_us[b, span], tree_us[b, span]))) is not None]
        low = mid = high = None
        if inside:
            low, mid, high = (float(2 ** q) for q in np.quantile(np.log2(inside), [(1 - LEVEL) / 2, 0.5,
                                                                                    (1 + LEVEL) / 2]))
        changes.append(Change(sizes[i], sizes[j], leads[i], _middle(crossover_bytes(sizes[span], ring_p50[span],
                                                                                    tree_p50[span])), mid, low, high))
    return Crossover(key, sizes, point, True, leads, tuple(changes))


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


def _cell(c: Crossover) -> str:
    if c.significant:
        return "; ".join(
            f"between {human_bytes(ch.below_bytes)} and {human_bytes(ch.above_bytes)} ({ch.faster_below} faster "
            f"below): interpolated ~{_bytes_or_dash(ch.point_bytes)}, {LEVEL:.0%} interval "
            f"{_bytes_or_dash(ch.low_bytes)} - {_bytes_or_dash(ch.high_bytes)}" for ch in c.changes)
    if c.resampled:
        measured = ", ".join(f"~{human_bytes(x)}" for x in c.point_bytes)
        counts = ", ".join(f"{name} at {n}" for name in ("ring", "tree", "neither")
                           if (n := c.leads.count(name)))
        return ("no significant crossover (" + (f"the measured p50s cross at {measured}; " if measured else "")
                + f"which is significantly faster, of {len(c.sizes)} sizes: {counts})")
    found = ", ".join(f"~{human_bytes(x)}" for x in c.point_bytes) or "none in the measured sizes"
    return f"means only (imported): {found}; no interval, there are no samples to resample"


def _bytes_or_dash(x) -> str:
    return "-" if x is None else human_bytes(x)


def ring_tree_finding(runs: Sequence[Any]) -> Concluded:
    """Each run's ring/tree crossovers (``ring_tree_crossovers`` of its allreduce records), one table
    row per (dtype, world, backend), under the rule they follow."""
    rows = []
    for run in runs:
        found = ring_tree_crossovers(run.records)
        for c in found:
            dtype, world, backend = c.key
            rows.append([run.label, backend, dtype, str(world), _cell(c)])
        if not found:
            rows.append([run.label, "-", "-", "-", "ring and tree not both measured at two sizes or more"])
    if all(row[1] == "-" for row in rows):
        return Concluded("Ring/tree crossover: not measured (no run has both ring and tree at two sizes or more).")
    return Concluded("Ring/tree crossover: the size at which the faster of ring and tree (p50 latency, log-log "
                     "interpolation between measured sizes) changes. " + RULE,
                     ["run", "backend", "dtype", "world", "crossover"], rows)
