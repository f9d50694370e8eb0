"""An imported record's figures are its source row's: derived from the row it keeps, never trusted alone.

An import (``critpath import-nccl-tests``) keeps each row as the source printed it in
``extra.imported``, both sides, and takes the record's figures and samples from the side it
stands for (``placement``). That derivation is declared here once: the importer builds a record
with it, and ``harness.core.verify`` rebuilds the figures from the record's own row when the
record is read, so a figure edited in ``results.jsonl`` (busbw 436.08 -> 9999) is refused, naming
the record and the field, instead of passing acceptance as the source's own.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

# record figure -> the key of the row's side that it is
FIGURES = ("time_us", "algbw_gbps", "busbw_gbps")
MEAN_ONLY, PER_ITERATION = "mean_only", "per_iteration"


def figures_of(side: Mapping[str, Any]) -> dict[str, float]:
    """The record's figures from one side of its row."""
    return {name: side[name] for name in FIGURES}


def mean_samples_ns(time_us: float) -> tuple[int, ...]:
    """A mean-only record's one sample: the row's mean time, in whole nanoseconds (at least 1)."""
    return (max(1, round(time_us * 1e3)),)


def samples_ns(times_us) -> tuple[int, ...]:
    """A per-iteration record's samples: each iteration's time, in whole nanoseconds (at least 1)."""
    return tuple(max(1, round(t * 1e3)) for t in times_us)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _same(a: Any, b: Any) -> bool:
    # JSON keeps a float's digits exactly; only 8 against 8.0 can differ in form
    return _number(a) and _number(b) and math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def contradiction(block: Mapping[str, Any], metrics: Mapping[str, Any], samples: tuple) -> Optional[str]:
    """What in ``metrics`` or ``samples`` its imported row (``block``, the record's
    ``extra.imported``) does not give, as "field ...: ..."; None when the row gives all of it."""
    placement = block.get("placement")
    side = block.get(placement) if isinstance(placement, str) else None
    if not isinstance(side, Mapping):
        return f"field extra.imported.placement: {placement!r} names no side of the imported row"
    row = f"its imported row ({block.get('file')} {block.get('where')}, extra.imported.{placement})"
    for name in sorted(set(metrics) | set(FIGURES)):
        if name not in FIGURES:
            return f"field metrics.{name}: {metrics[name]!r} is not a figure an import derives"
        if name not in metrics:
            return f"field metrics.{name}: missing; {row} gives {side.get(name)!r}"
        if not _same(metrics[name], side.get(name)):
            return f"field metrics.{name}: {metrics[name]!r} but {row} says {side.get(name)!r}"
    if block.get("samples") == MEAN_ONLY:
        if tuple(samples) != mean_samples_ns(side["time_us"]):
            return (f"field samples_ns: {list(samples)[:4]} but {row} gives the mean "
                    f"{list(mean_samples_ns(side['time_us']))}")
    elif block.get("samples") != PER_ITERATION:
        return f"field extra.imported.samples: {block.get('samples')!r} is neither {MEAN_ONLY} nor {PER_ITERATION}"
    return None
