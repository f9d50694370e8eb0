"""The claims check: each article figure beside what a run measured.

Verdicts (each states its rule in the row's notes):
- ``confirmed``: the direction holds and the measured magnitude is within the tolerance band the
  claim states in its YAML (a factor, with the reason for it);
- ``confirmed in direction``: the direction holds, the magnitude does not; both figures are shown;
- ``contradicted``: the direction (or the bound, or the range) does not hold, even with the band;
- ``modelled`` / ``simulated``: the statistic rests on a model or a simulation (its declared
  Figure.source), so it cannot confirm anything; the notes give what it gives and its parameters;
- ``withheld``: every record the claim would use is flagged by its family (oversubscribed cores,
  stretched compute) or contended (harness.core.contention); the notes give the flags. Flagged records are never used; when clean ones
  remain, the verdict is theirs and the notes say what was withheld;
- ``not measurable here``: with the reason (no GPU, one node, out of scope, not a measurement, no
  records of the family in this run, the family is still pending, too few ranks, or a figure it
  would use that could not be verified: "not checkable", with the record, field and why).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from harness.claims.baselines import Claim, Selector, Tolerance
from harness.core import registry
from harness.core.comparable import mismatch
from harness.core.declarations import declared as declared_figure
from harness.core.figures import FigureUnavailable, TooFewSamples, Unverified, is_sample_statistic, sample_parts
from harness.core.figures import value as figure_value
from harness.core.records import Record

CONFIRMED, IN_DIRECTION, CONTRADICTED = "confirmed", "confirmed in direction", "contradicted"
MODELLED, SIMULATED, WITHHELD, NOT_MEASURABLE = "modelled", "simulated", "withheld", "not measurable here"
LABELS = (CONFIRMED, IN_DIRECTION, CONTRADICTED, MODELLED, SIMULATED, WITHHELD, NOT_MEASURABLE)
# A change smaller than this factor is "no change": noise on a shared 2-core machine is a few %.
MIN_EFFECT = 1.05


def matches(record, selector: Selector) -> bool:
    """Does a record (or a case: anything with ``params``) match the selector?"""
    for key, want in selector.items():
        have = record.params.get(key)
        if want is None:  # the record must not have this parameter (e.g. no forwarding hops)
            if key in record.params:
                return False
        elif isinstance(want, list):
            if have not in want:
                return False
        elif have != want:
            return False
    return True


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    verdict: str
    reason: str = ""
    measured: Optional[float] = None  # in the claim's terms: a value, or the after/before ratio
    measured_text: str = "-"
    ratio: Optional[float] = None  # measured / article figure, where both are numbers
    run_label: str = ""

    @property
    def article_text(self) -> str:
        return self.claim.article_figure

    @property
    def notes(self) -> str:
        parts = []
        if self.claim.model_dependent:
            parts.append("depends on a model beyond this scale")
        if self.reason:
            parts.append(self.reason)
        return "; ".join(parts)


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _value_text(value: float, stat: str) -> str:
    parts = sample_parts(stat)
    return f"{_fmt(value)} {parts[1]} ({parts[0]})" if parts else f"{_fmt(value)} ({stat})"


def source_of(family: str, statistic: str) -> str:
    """measured, modelled or simulated: sample statistics are measured times; a metric is what its
    family declares (an undeclared one is read as measured: the driver refuses those in new runs)."""
    if is_sample_statistic(statistic):
        return "measured"
    figure = declared_figure(family, statistic)
    return figure.source if figure is not None else "measured"


def record_flags(record: Record) -> str:
    """Why the record's figures are distorted, from its family's own rule or the contention rule
    (its timed loop shared the CPUs with other processes: its figure is the scheduler's as well as
    the case's); "" when clean."""
    family = registry.FAMILIES.get(record.family) if record.family in registry.FAMILIES else None
    rule = getattr(family, "flags", None)
    flags = [rule(record) if rule is not None else ""]
    if record.contention_verdict.contended is True:
        flags.append(f"contended ({record.contention_verdict.evidence})")
    return "; ".join(f for f in flags if f)


def parameters_text(records: Sequence[Record]) -> str:
    """The parameters the records share, then those that vary with their values."""
    keys = sorted({k for r in records for k in r.params})
    same, varied = [], []
    for key in keys:
        values = sorted({str(r.params.get(key, "-")) for r in records})
        (same if len(values) == 1 else varied).append(f"{key}={values[0]}" if len(values) == 1
                                                      else f"{key} in {{{', '.join(values)}}}")
    return ", ".join(same + varied)


def check_claims(claims: Sequence[Claim], records: Sequence[Record], run_label: str = "") -> list[ClaimResult]:
    return [check_claim(c, records, run_label) for c in claims]


def check_claim(claim: Claim, records: Sequence[Record], run_label: str = "") -> ClaimResult:
    m = claim.measure

    def nm(reason: str) -> ClaimResult:
        return ClaimResult(claim, NOT_MEASURABLE, reason, run_label=run_label)

    if m.status == "not_measurable":
        return nm(m.reason)
    if m.tolerance is None:
        raise ValueError(f"{claim.source or claim.id}: a measurable claim must state measure.tolerance "
                         "(factor and why)")
    pending = " (mapping pending: that family is still being built)" if m.status == "pending" else ""
    family = [r for r in records if r.family == m.family]
    if not family:
        return nm(f"no records of family {m.family} in this run{pending}")
    usable = [r for r in family if r.ok]
    if not usable:
        return nm(f"every {m.family} record in this run failed")
    big_enough = [r for r in usable if r.world >= m.min_world]
    if not big_enough:
        largest = max(r.world for r in usable)
        return nm(f"this run's largest world is {largest}; the claim needs at least {m.min_world} ranks")
    if m.compare == "change":
        return _check_change(claim, big_enough, run_label, pending)
    return _check_values(claim, big_enough, run_label, pending)


def _not_checkable(claim: Claim, why: str, run_label: str) -> ClaimResult:
    return ClaimResult(claim, NOT_MEASURABLE, f"not checkable: {why}", run_label=run_label)


def _withheld(claim: Claim, flagged: list[tuple[str, str]], run_label: str) -> ClaimResult:
    return ClaimResult(claim, WITHHELD, "every record it would use is flagged: "
                       + "; ".join(f"{case}: {flag}" for case, flag in flagged), run_label=run_label)


def _withheld_note(flagged: list[tuple[str, str]]) -> str:
    if not flagged:
        return ""
    return f"; withheld (with any pair they are in) {len(flagged)} flagged record(s): " + "; ".join(f"{case}: {flag}" for case, flag in flagged)


def _check_values(claim: Claim, records: list[Record], run_label: str, pending: str) -> ClaimResult:
    m = claim.measure
    chosen = [r for r in records if matches(r, m.select)]
    if not chosen:
        return ClaimResult(claim, NOT_MEASURABLE, f"no {m.family} record matches {dict(m.select)}{pending}",
                           run_label=run_label)
    flagged = [(r.case_id, f) for r in chosen if (f := record_flags(r))]
    clean = [r for r in chosen if not record_flags(r)]
    if not clean:
        return _withheld(claim, flagged, run_label)
    values, used, skipped = [], [], []
    for r in clean:
        try:
            values.append(figure_value(r, m.statistic))
            used.append(r)
        except Unverified as exc:
            # Neither confirmed nor refuted on a figure that is no measurement, and not decided
            # without it: the record is one the claim covers (perhaps its worst).
            return _not_checkable(claim, str(exc), run_label)
        except TooFewSamples as exc:
            # The record is selected and measured, only too briefly for this percentile: deciding
            # without it would quietly drop the case the claim covers (perhaps its worst).
            return ClaimResult(claim, NOT_MEASURABLE, f"{r.case_id}: {exc}", run_label=run_label)
        except FigureUnavailable as exc:
            skipped.append(str(exc))
    if not values:
        return ClaimResult(claim, NOT_MEASURABLE, skipped[0], run_label=run_label)
    if m.compare == "bound":
        measured, how = _decider(claim, values)
        ratio = measured / _target(claim) if _target(claim) else None
    else:
        measured, how = statistics.median(values), f"median of {len(values)} record(s)"
        ratio = None
    ok, _, rule = _against(claim, measured, m.tolerance)
    verdict = CONFIRMED if ok else CONTRADICTED
    reason = f"{how}; {rule}" + _withheld_note(flagged)
    return _sourced(claim, verdict, reason, measured, _value_text(measured, m.statistic), ratio, used, run_label)


def _sourced(claim: Claim, verdict: str, reason: str, measured: float, text: str, ratio: Optional[float],
             used: Sequence[Record], run_label: str) -> ClaimResult:
    """A figure that a model or a simulation produced is labelled so, whatever it would say."""
    source = source_of(claim.measure.family, claim.measure.statistic)
    if source != "measured":
        figure = declared_figure(claim.measure.family, claim.measure.statistic)
        what = f"{claim.measure.statistic} is {source}" + (f" ({figure.definition})" if figure else "")
        reason = (f"{what}: taken as a measurement it would read '{verdict}'; {reason}; "
                  f"parameters: {parameters_text(used)}")
        verdict = SIMULATED if source == "simulated" else MODELLED
    return ClaimResult(claim, verdict, reason, measured, text, ratio, run_label)


def _good_side(claim: Claim) -> str:
    if claim.relation in ("<", "<=", ">", ">="):
        return claim.relation
    return "<=" if claim.direction == "lower" else ">="


def _target(claim: Claim) -> float:
    return claim.value if claim.value is not None else claim.after


def _decider(claim: Claim, values: list[float]) -> tuple[float, str]:
    # By default the least favourable record decides ("p999 at most 0.85 ms" must hold for every
    # case); "over: best" is for claims that something happens at all (an OOM in some configuration).
    upper = _good_side(claim) in ("<", "<=")
    best = claim.measure.over == "best"
    measured = (min(values) if upper else max(values)) if best else (max(values) if upper else min(values))
    how = ("best of" if best else "worst of") if len(values) > 1 else "from"
    return measured, f"{how} {len(values)} record(s)"


def _band(tol: Tolerance) -> str:
    return f"tolerance x{tol.factor:g}: {tol.why}"


def _against(claim: Claim, measured: float, tol: Tolerance) -> tuple[bool, bool, str]:
    """Hold a magnitude against the claim's bound or range: (holds with the band, holds without it, rule)."""
    if claim.low is not None:
        lo, hi = claim.low / tol.factor, claim.high * tol.factor
        return (lo <= measured <= hi, claim.low <= measured <= claim.high,
                f"holds inside {claim.low:g}-{claim.high:g} {claim.unit} widened to {lo:.3g}-{hi:.3g} ({_band(tol)})")
    target, rel = _target(claim), _good_side(claim)
    strict = {"<": measured < target, "<=": measured <= target, ">": measured > target, ">=": measured >= target}[rel]
    upper = rel in ("<", "<=")
    edge = target * tol.factor if upper else target / tol.factor
    within = strict or (measured <= edge if upper else measured >= edge)
    widened = f", or {rel} {edge:.3g} with the {_band(tol)}" if tol.factor != 1 else f" (no band: {tol.why})"
    return within, strict, f"holds when measured {rel} {target:g} {claim.unit}{widened}"


def _pair_key(record: Record, drop: Iterable[str]) -> tuple:
    dropped = set(drop)
    return tuple(sorted((k, v) for k, v in record.params.items() if k not in dropped))


def _magnitude(kind: str, b: float, a: float) -> float:
    return {"ratio": a / b, "difference": b - a, "before": b, "after": a}[kind]


def _check_change(claim: Claim, records: list[Record], run_label: str, pending: str) -> ClaimResult:
    m = claim.measure
    keys = set(m.before) | set(m.after) | set(m.ignore)
    before = {_pair_key(r, keys): r for r in records if matches(r, m.before)}
    after = {_pair_key(r, keys): r for r in records if matches(r, m.after)}
    pairs = sorted(set(before) & set(after))
    if not pairs:
        return ClaimResult(claim, NOT_MEASURABLE,
                           f"no pair of {m.family} records {dict(m.before)} vs {dict(m.after)} in this run{pending}",
                           run_label=run_label)
    ratios, sizes, used, skipped, flagged = [], [], [], [], []
    for key in pairs:
        pair = (before[key], after[key])
        flags = [(r.case_id, f) for r in pair if (f := record_flags(r))]
        if flags:
            flagged += flags
            continue
        differs = mismatch({"before": [pair[0]], "after": [pair[1]]})
        if differs:
            skipped.append(differs)
            continue
        try:
            b, a = (figure_value(p, m.statistic) for p in pair)
        except Unverified as exc:  # as for one figure
            return _not_checkable(claim, str(exc), run_label)
        except TooFewSamples as exc:  # as for one figure: skipping it would drop a case the claim covers
            return ClaimResult(claim, NOT_MEASURABLE, f"{pair[0].case_id} / {pair[1].case_id}: {exc}",
                               run_label=run_label)
        except FigureUnavailable as exc:
            skipped.append(str(exc))
            continue
        if b > 0:
            ratios.append(a / b)
            sizes.append(_magnitude(m.magnitude, b, a))
            used += pair
    if not ratios:
        if flagged and not skipped:
            return _withheld(claim, flagged, run_label)
        return ClaimResult(claim, NOT_MEASURABLE, skipped[0] if skipped else "zero baseline figure", run_label=run_label)
    change = statistics.median(ratios)
    article_ratio = claim.after / claim.before if claim.before and claim.after is not None else None
    if article_ratio is not None and article_ratio != 1:
        expect = "lower" if article_ratio < 1 else "higher"
    else:
        expect = m.expect or ("lower" if claim.direction == "lower" else "higher")
    direction = change < 1 / MIN_EFFECT if expect == "lower" else change > MIN_EFFECT
    how = (f"after/before {m.statistic}, median over {len(ratios)} matched pair(s); the direction holds when "
           f"the change goes {expect} by more than {MIN_EFFECT - 1:.0%}")
    change_text = f"x{_fmt(change)} ({m.statistic})"
    tol = m.tolerance
    if m.magnitude == "ratio" and article_ratio is not None:
        measured, text, ratio = change, change_text, change / article_ratio
        apart = max(ratio, 1 / ratio) if ratio > 0 else math.inf
        rule = (f"magnitude: article x{_fmt(article_ratio)}, measured x{_fmt(change)}, {_fmt(apart)} times apart; "
                f"confirmed needs at most {tol.factor:g} ({tol.why})")
        within = apart <= tol.factor
    elif m.magnitude == "ratio" and claim.value is None:
        measured, text, ratio, within, rule = change, change_text, None, True, "the article states a direction only"
    else:
        measured = statistics.median(sizes)
        text = (change_text if m.magnitude == "ratio"
                else f"{_value_text(measured, m.statistic)} {m.magnitude}; {change_text}")
        ratio = measured / _target(claim) if claim.low is None and _target(claim) else None
        within, _, rule = _against(claim, measured, tol)
        rule = f"magnitude ({m.magnitude}): {rule}"
    if not direction:
        verdict = CONTRADICTED
    else:
        verdict = CONFIRMED if within else IN_DIRECTION
    reason = f"{how}; {rule}" + _withheld_note(flagged)
    return _sourced(claim, verdict, reason, measured, text, ratio, used, run_label)


def counts_text(results: Sequence[ClaimResult]) -> str:
    """'3 confirmed, 1 contradicted, ...' in the order of LABELS, every label present."""
    counts = {label: 0 for label in LABELS}
    for r in results:
        counts[r.verdict] += 1
    return ", ".join(f"{n} {label}" for label, n in counts.items())

