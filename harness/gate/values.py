"""From records to the values the gate compares: one number per process, or raw samples.

A statistic is a named figure of a record in the grammar of ``harness.core.figures``, shared with the
claims and acceptance: a sample statistic with its unit (``p50_ns``, the default; ``p99_us``,
``min_ns``, ``mean_ms``, any ``pNN_ns`` / ``pNN.N_ns``, computed from the raw samples with the
interpolation of ``harness.core.stats.Summary``), or a figure the family declares (``busbw_gbps``).
Declared figures are per-process; they have no per-iteration samples. Which way is better comes
from the declaration (``harness.core.declarations.better``), never from a name's suffix.
"""
from __future__ import annotations

import argparse
from typing import Sequence

import numpy as np

from harness.core import figures
from harness.core.declarations import better
from harness.core.figures import FigureUnavailable, TooFewSamples, is_sample_statistic
from harness.core.records import Record


def default_direction(case_id: str, statistic: str) -> str:
    """Which way is better for ``statistic`` of ``case_id``, from its family's declaration."""
    return better(case_id.partition("/")[0], statistic)


def validate_statistic(name: str) -> str:
    """``name`` where it is a statistic's name by the one grammar (``figures.statistic_fault``)."""
    if fault := figures.statistic_fault(name):
        raise FigureUnavailable(f"statistic {fault}")
    return name


def statistic_option(text: str) -> str:
    """``--statistic``'s type, for the gate and for every command that passes one on to it."""
    try:
        return validate_statistic(text)
    except FigureUnavailable as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# What a comparison of raw per-iteration samples compares: their medians (the ratio of medians of
# ``harness.gate.stats.compare``), in the samples' unit.
ITERATION_STATISTIC = "p50_ns"


def iteration_values(record: Record, statistic: str) -> np.ndarray:
    """Raw per-iteration samples, for comparing two single runs. Only sample statistics apply;
    the comparison is then of the samples' medians (``ITERATION_STATISTIC``) whatever percentile
    was asked for, and the result says so."""
    if not is_sample_statistic(statistic):
        raise FigureUnavailable(f"{record.case_id}: metric {statistic!r} has one value per run; "
                             "comparing single runs needs repeats (critpath gate)")
    # A gate on p999 compares medians, but only samples that support a p999 stand for one; the
    # refusal names the statistic asked, as the result does when no case is compared.
    try:
        figures.require_samples(statistic, len(record.samples_ns))
    except TooFewSamples as exc:
        raise TooFewSamples(f"{statistic} asked: {exc}") from None
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
