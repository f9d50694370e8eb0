"""From records to the values the gate compares: one number per process, or raw samples.

A statistic is named like a Summary field, with its unit: ``p50_ns`` (the default), ``p99_ns``,
``min_ns``, ``mean_ns``, any percentile ``pNN_ns`` / ``pNN.N_ns`` (computed from the record's raw
samples with the same interpolation as ``harness.stats.Summary``), or the name of a metric the
family reports (``busbw_gbps``...). Metrics are per-process figures; they have no per-iteration
samples.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from harness.records import Record
from harness.stats import PERCENTILE_METHOD

_PERCENTILE = re.compile(r"^p(\d{1,2}(?:\.\d+)?)_ns$")
SAMPLE_STATISTICS = ("min_ns", "max_ns", "mean_ns")


class StatisticError(ValueError):
    """A statistic that a record cannot give (unknown name, metric missing)."""


_LOWER_SUFFIXES = ("_ns", "_us", "_ms", "_s", "_bytes", "_fraction", "_pct")
_HIGHER_SUFFIXES = ("_gbps", "_gbs", "_mbps", "_per_s", "_ops", "_hz", "_tflops")


def default_direction(statistic: str) -> str:
    """Which way is better, from the unit in the name: times are lower-is-better, rates
    higher-is-better. Anything else must be said with --direction (or direction: in a table)."""
    if statistic.endswith(_HIGHER_SUFFIXES):
        return "higher"
    if statistic.endswith(_LOWER_SUFFIXES):
        return "lower"
    raise StatisticError(f"statistic {statistic!r}: cannot tell from its unit whether lower or higher is better; "
                         "give --direction lower|higher")


def is_sample_statistic(name: str) -> bool:
    return name in SAMPLE_STATISTICS or bool(_PERCENTILE.match(name))


def validate_statistic(name: str) -> str:
    if is_sample_statistic(name) or re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
        return name
    raise StatisticError(f"statistic {name!r}: expected p50_ns, p99_ns, pNN_ns, min_ns, mean_ns or a metric name")


def process_value(record: Record, statistic: str) -> float:
    """The statistic of one process's record."""
    if is_sample_statistic(statistic):
        samples = np.asarray(record.samples_ns, dtype=np.float64)
        if samples.size == 0:
            raise StatisticError(f"{record.case_id}: the record has no samples")
        if statistic == "min_ns":
            return float(samples.min())
        if statistic == "max_ns":
            return float(samples.max())
        if statistic == "mean_ns":
            return float(samples.mean())
        q = float(_PERCENTILE.match(statistic).group(1))
        return float(np.percentile(samples, q, method=PERCENTILE_METHOD))
    if statistic not in record.metrics:
        known = ", ".join(sorted(record.metrics)) or "(none)"
        raise StatisticError(f"{record.case_id}: no metric {statistic!r}; metrics: {known}")
    return float(record.metrics[statistic])


def iteration_values(record: Record, statistic: str) -> np.ndarray:
    """Raw per-iteration samples, for comparing two single runs. Only sample statistics apply;
    the comparison is then of the samples' medians whatever percentile was asked for."""
    if not is_sample_statistic(statistic):
        raise StatisticError(f"{record.case_id}: metric {statistic!r} has one value per run; "
                             "comparing single runs needs repeats (critpath gate)")
    return np.asarray(record.samples_ns, dtype=np.float64)


def failure_text(records: Sequence[Record]) -> str:
    """Why some of ``records`` are not usable: first failure, with the count."""
    bad = [r for r in records if not r.ok]
    if not bad:
        return ""
    first = bad[0]
    if first.error is not None:
        why = f"{first.status}: {first.error.kind}: {(first.error.message or '').splitlines()[0] if first.error.message else ''}"
    elif first.check is not None and not first.check.passed:
        why = f"check failed: {first.check.wrong} wrong of {first.check.checked} {first.check.detail}".rstrip()
    else:
        why = first.status
    return f"{len(bad)} of {len(records)} runs not ok (first: {why})"
