"""Figures: what a number of a record means, declared once, and one grammar to name it.

A family declares each figure its ``metrics()`` returns as a ``Figure``: name (unit suffix
included), unit, which way is better, whether it was measured, modelled or simulated, and its
definition. The driver refuses a figure a family did not declare, and everything that reads a
figure by name (the gate, claims, acceptance, tables) goes through ``value`` here and
``harness.core.declarations.better``:

- a **sample statistic**, computed from the record's raw samples: ``min``, ``max``, ``mean`` or a
  percentile ``pNN`` / ``pNN.N``, with its unit: ``p50_ns``, ``p99_us``, ``max_ms``, ``mean_s``;
  lower is better;
- a **tail ratio** ``pNN_over_mean`` (``p999_over_mean``); lower is better;
- a **declared figure** of the record's family (``busbw_gbps``), its direction as declared.

A percentile is given only where the samples support it (``samples_needed``): p99 from 100
samples, p999 from 1,000; below that every reader shows "n too small" instead of a number.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping, Optional

import numpy as np

from harness.core.echo import shown
from harness.core.scale import MAX_SAMPLES
from harness.core.stats import PERCENTILE_METHOD

BETTER = ("lower", "higher", "neither")  # neither: context (a count, a setting), never gated
SOURCES = ("measured", "modelled", "simulated")
TIME_SCALE = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
# Units of a magnitude (a time, a rate, a size, a count, a share): a figure in one is never below
# zero, so a negative value read for it (a results file edited or mis-written) is no figure. A
# percentage is left out: a model's error in % is signed.
NON_NEGATIVE_UNITS = frozenset({*TIME_SCALE, "GB/s", "msg/s", "tokens/s", "microbatches/s", "1/s", "1/kstep",
                                "bytes", "GB", "count", "ranks", "cores", "requests", "steps", "fraction",
                                "ratio", "index", "load", "flag"})
SAMPLE_BETTER = "lower"  # a sample statistic is a time, or a tail ratio of times

# The finest percentile a name may write. A percentile to d decimals (p99.9999: d = 4) can cut a
# tail of 10^-(d+2), which needs 10^(d+2) samples (samples_needed); a record holds at most
# MAX_SAMPLES = 10^6, so 4 decimals is the most at which every percentile named is one some record
# can give. A fifth names percentiles no record supports, and thousands of digits name nothing
# (Fraction of 5,000 digits raised ValueError in every reader).
QUANTILE_DECIMALS = max(d for d in range(16) if 10 ** (d + 2) <= MAX_SAMPLES)
# How long a statistic name may be: more than twice the longest figure a family declares (34 characters),
# and enough for any sample statistic the grammar admits (p99.9999_over_mean).
MAX_STATISTIC_CHARS = 64
# p0 and p100 cut no tail: they are the smallest and the largest sample, which min_ and max_ name.
# Two names of one statistic would be two gate keys (a baseline table's "listed twice" check, an
# acceptance check, a gate's result are keyed on the name as written), so every percentile has one
# spelling and any other is refused, the message saying which to write (``canonical_percentile``):
# min/max for p0 and p100, no leading zero (p05), no trailing zero after the point (p99.0, p99.90),
# and 99.9 and 99.99 only as Summary names them, p999 and p9999 (not p99.9).
_EXTREME = r"0*(?:0|100)(?:\.0*)?"
# pNN, pNN.N, and Summary's own p999 (99.9) / p9999 (99.99); ASCII digits only (a bare \d takes
# 'p٩٩_ns', which Fraction reads as p99: a statistic nobody wrote named one). No leading zero, as
# Summary's own names have none (p50, p99); p0.5 is the fraction, not a leading zero. At most
# QUANTILE_DECIMALS decimals; no p0 or p100. The compact form is only for the nines: p995 would be a
# second name of p99.5.
_Q = (rf"((?!0(?:\.0+)?(?![0-9.]))(?:0|[1-9][0-9]?)(?:\.[0-9]{{1,{QUANTILE_DECIMALS}}})?"
      r"|9999?)")
# The percentiles Summary names without their point (p999_ns is a record's own summary field).
_COMPACT = {Fraction("99.9"): "999", Fraction("99.99"): "9999"}
# A number written where a percentile is named (p, digits, an optional fraction, then _ or the
# end), to say what is wrong with one the grammar refuses.
_WRITTEN = re.compile(r"(?:^|_)p([0-9]+(?:\.[0-9]*)?)(?=_|$)")
# Digits that write a percentile, in its one spelling or another (p99.90, p995), as _exact_quantile reads them.
_PERCENTILE_DIGITS = re.compile(r"[0-9]{1,2}(?:\.[0-9]*)?|99[0-9]{1,2}")
# The other spelling, refused with the one to write instead.
_LEADING_ZERO = re.compile(r"(?:^|_)p(0[0-9]+(?:\.[0-9]+)?)(?=_|$)")
_SAMPLE = re.compile(rf"^(min|max|mean|p{_Q})_(ns|us|ms|s)$")
_OVER_MEAN = re.compile(rf"^p{_Q}_over_mean$")
# A percentile inside a declared figure's name (rtt_p999_us, send_lag_p99_us, step_p50_us): the
# family computed it from the record's samples, so it holds to the same sample rule.
_NAMED_PERCENTILE = re.compile(rf"(?:^|_)(p{_Q})(?:_|$)")
# The shape of a declared figure's name (busbw_gbps, rtt_p999_us).
_FIGURE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)

# What a file's statistic field must be, said where it is something else (true, null, 1e2).
STATISTIC_TEXT = "a statistic's name"
N_TOO_SMALL = "n too small"  # what a reader shows where the samples do not support a percentile


def misspelt_percentile(name: str) -> Optional[str]:
    """Why ``name`` names no figure where it writes a percentile the grammar refuses: more than
    QUANTILE_DECIMALS decimals (or as many digits with no point), p0 or p100 (min and max), or a
    leading zero (``p05_ns``), saying what to write instead; None for any other name."""
    for match in _WRITTEN.finditer(name):
        digits = match.group(1)
        whole, _, decimals = digits.partition(".")
        if len(decimals) > QUANTILE_DECIMALS or len(whole) > 2 + QUANTILE_DECIMALS:
            written = f"to {len(decimals)} decimals" if decimals else f"of {len(whole)} digits"
            return (f"{shown(name)} writes a percentile {written}; a percentile has at most {QUANTILE_DECIMALS} "
                    f"decimals (p99.9999 needs {MAX_SAMPLES:,} samples, the most a record holds)")
        if re.fullmatch(_EXTREME, digits):
            which, sample = ("min", "smallest") if Fraction(digits) == 0 else ("max", "largest")
            instead = name.replace(f"p{digits}", which, 1)
            write = repr(instead) if _SAMPLE.match(instead) else f"the {which} figure the family declares, if it declares one"
            return f"{name!r} writes p{digits}, the {sample} sample, which {which} names; write {write}"
    match = _LEADING_ZERO.search(name)
    if match is not None:
        digits = match.group(1)
        one = digits.lstrip("0")
        one = "0" + one if not one or one.startswith(".") else one
        return (f"{name!r} writes p{digits} with a leading zero; write p{one} "
                f"({name.replace('p' + digits, 'p' + one, 1)!r}), the one spelling of each percentile")
    for match in _WRITTEN.finditer(name):
        digits = match.group(1)
        if not _PERCENTILE_DIGITS.fullmatch(digits):
            continue  # no percentile's digits (p2p, p1000): a declared figure's name may hold them
        one = canonical_percentile(digits)
        if one != digits:
            if digits.endswith("."):
                why = "with a point and no decimals"
            elif "." in digits and digits.endswith("0"):
                why = "with a trailing zero after the point"
            elif "." in digits:
                why = "with its point, where the nines are written without one (as a record's summary writes p999_ns)"
            else:
                why = "in the compact form, which only p999 and p9999 take"
            return (f"{name!r} writes p{digits} {why}; write p{one} "
                    f"({name[:match.start(1)] + one + name[match.end(1):]!r}), the one spelling of each percentile")
    return None


def canonical_percentile(digits: str) -> str:
    """The one spelling of the percentile ``digits`` write (after the p): "99.0" -> "99", "99.90" ->
    "999", "99.9" -> "999", "995" -> "99.5", "50.0000" -> "50". What every statistic name a reader
    accepts already writes, so a name is its own key."""
    q = _exact_quantile(digits.rstrip(".") if "." in digits else digits)
    if q in _COMPACT:
        return _COMPACT[q]
    if q.denominator == 1:
        return str(q.numerator)
    whole, rest = divmod(q, 1)
    decimals = ""
    while rest:  # a finite decimal: its digits were written, so this ends within QUANTILE_DECIMALS
        rest *= 10
        digit, rest = divmod(rest, 1)
        decimals += str(digit)
    return f"{whole}.{decimals}"


def statistic_fault(name: str) -> Optional[str]:
    """Why ``name`` is no statistic's name, or None: one grammar for every reader of one (the
    commands' --statistic, a gate or compare config, a gate's baseline table, an acceptance
    profile, a baselines claim). A sample statistic (p99_us, min_ns, p999_over_mean) or a name of
    the shape a family declares its figures in, at most MAX_STATISTIC_CHARS long; whether the
    family declares it is for the reader that knows the family."""
    if misspelt := misspelt_percentile(name):
        return misspelt
    if len(name) > MAX_STATISTIC_CHARS:
        return f"{shown(name)}: a statistic name is at most {MAX_STATISTIC_CHARS} characters"
    if is_sample_statistic(name) or _FIGURE_NAME.fullmatch(name):
        return None
    return f"{shown(name)}: expected p50_ns, p99_us, pNN_ns, min_ns, mean_ms or a declared figure"


def _exact_quantile(text: str) -> Fraction:
    """The percentile a name's digits mean: "99" -> 99, "99.9" -> 99.9, "999" -> 99.9 (Summary's p999)."""
    if "." not in text and len(text) > 2:
        text = f"{text[:2]}.{text[2:]}"
    return Fraction(text)


def _quantile(text: str) -> float:
    return float(_exact_quantile(text))


def samples_needed(q: Fraction) -> int:
    """The fewest samples that support the ``q``-th percentile.

    The rule: the tail the percentile cuts off, on its smaller side, must hold at least one whole
    sample. That tail is the fraction t = min(q, 100 - q) / 100 of n samples, so n * t >= 1, i.e.
    n >= 1 / t: p99 (t = 1/100) needs 100 samples, p99.9 (t = 1/1000) 1,000, p90 and p10 10, the
    median 2. With fewer, the interpolated "percentile" is only the largest (or smallest) sample
    under another name. Exact arithmetic: 1 / (1 - 0.999) in floats is 1000.0000000000009.
    min and max (t = 0) need one sample.
    """
    tail = min(q, 100 - q) / 100
    return 1 if tail <= 0 else math.ceil(1 / tail)


class FigureUnavailable(ValueError):
    """A figure a record cannot give: unknown name, no samples, a percentile of a mean-only import."""


class TooFewSamples(FigureUnavailable):
    """A percentile its record's samples are too few to support (``samples_needed``)."""


class Unverified(FigureUnavailable):
    """A figure its record holds that could not be recomputed when the record was read
    (``Record.unverifiable``): no measurement, so nothing passes, fails or confirms on it."""


def percentile_named(name: str) -> Optional[tuple[str, int]]:
    """The percentile a figure's name reads and the samples it needs: ``rtt_p999_us`` ->
    ("p999", 1000), ``p99_over_mean`` -> ("p99", 100); None when the name reads no percentile."""
    match = _NAMED_PERCENTILE.search(name)
    if match is None:
        return None
    return match.group(1), samples_needed(_exact_quantile(match.group(2)))


def supports(name: str, n: int) -> bool:
    """Whether ``n`` samples support the figure ``name`` (always, for a figure that reads no percentile)."""
    named = percentile_named(name)
    return named is None or n >= named[1]


def require_samples(name: str, n: int) -> None:
    """Raise TooFewSamples where ``n`` samples do not support the percentile ``name`` reads."""
    named = percentile_named(name)
    if named is not None and n < named[1]:
        raise TooFewSamples(f"{N_TOO_SMALL}: {named[0]} needs at least {named[1]} samples, this record has {n}")


@dataclass(frozen=True)
class Figure:
    name: str  # as metrics() returns it, unit suffix included: busbw_gbps, step_us, fragmentation_mean
    unit: str  # GB/s, us, fraction, count, ratio, ...
    better: str  # one of BETTER
    definition: str
    source: str = "measured"  # one of SOURCES: a modelled or simulated figure says so wherever it is shown
    # A family's headline figures (busbw, msg/s, fragmentation ...) are tracked over commits by the
    # asv suite beside every case's p50 and p99; the rest are read in tables and reports.
    headline: bool = False

    def __post_init__(self) -> None:
        if self.better not in BETTER:
            raise ValueError(f"figure {self.name}: better must be one of {BETTER}, got {self.better!r}")
        if self.source not in SOURCES:
            raise ValueError(f"figure {self.name}: source must be one of {SOURCES}, got {self.source!r}")
        if not self.definition:
            raise ValueError(f"figure {self.name}: a figure needs its definition")
        if misspelt_percentile(self.name):
            raise ValueError(f"figure {self.name}: {misspelt_percentile(self.name)}")


def is_sample_statistic(name: str) -> bool:
    return bool(_SAMPLE.match(name) or _OVER_MEAN.match(name))


def sample_parts(name: str) -> Optional[tuple[str, str]]:
    """``p99_us`` -> ("p99", "us"); None for anything but a sample statistic with a time unit."""
    match = _SAMPLE.match(name)
    return (match.group(1), match.group(3)) if match else None


def is_mean_only(record: Any) -> bool:
    """Imported records (nccl-tests) carry one averaged sample, never percentiles."""
    extra = getattr(record, "extra", None)
    imported = extra.get("imported") if isinstance(extra, Mapping) else None
    return bool(imported) and imported.get("samples") == "mean_only"


def sample_value(samples_ns, name: str) -> float:
    """A sample statistic of raw samples in nanoseconds, in the unit its name says."""
    samples = np.asarray(samples_ns, dtype=np.float64)
    require_samples(name, samples.size)
    over = _OVER_MEAN.match(name)
    if over:
        return float(np.percentile(samples, _quantile(over.group(1)), method=PERCENTILE_METHOD) / samples.mean())
    match = _SAMPLE.match(name)
    if match is None:
        raise FigureUnavailable(f"{name!r} is not a sample statistic (pNN_ns, min_us, mean_ms, p999_over_mean ...)")
    stat, q, unit = match.groups()
    if stat == "min":
        ns = samples.min()
    elif stat == "max":
        ns = samples.max()
    elif stat == "mean":
        ns = samples.mean()
    else:
        ns = np.percentile(samples, _quantile(q), method=PERCENTILE_METHOD)
    return float(ns) / TIME_SCALE[unit]


def value(record: Any, name: str) -> float:
    """The figure ``name`` of one record; FigureUnavailable where it cannot give one, Unverified for
    one that could not be recomputed when the record was read."""
    if is_sample_statistic(name):
        if not record.samples_ns:
            raise FigureUnavailable(f"{record.case_id} has no samples")
        if is_mean_only(record) and not name.startswith("mean_"):
            raise FigureUnavailable(f"{record.case_id} is imported with its mean only; no {name}")
        return sample_value(record.samples_ns, name)
    if name in record.metrics:
        # Read but not recomputed when the record was loaded (harness.core.verify): no measurement,
        # so nothing (acceptance, comparison, a claim) may pass, fail or confirm on it.
        unverified = getattr(record, "unverifiable", {}).get(name)
        if unverified:
            raise Unverified(f"{record.case_id}: field metrics.{name} is not verified: {unverified}")
        if record.samples_ns:  # a record without samples has nothing to count its percentiles by
            require_samples(name, len(record.samples_ns))
        return float(record.metrics[name])
    if misspelt_percentile(name):
        raise FigureUnavailable(f"{record.case_id}: {misspelt_percentile(name)}")
    known = ", ".join(sorted(record.metrics)) or "(none)"
    raise FigureUnavailable(f"{record.case_id}: no figure {name!r}; its metrics: {known}")
