"""The claims check: each article figure beside what a run measured.

Verdicts:
- ``confirmed``: the measured figure is on the article's side (a bound holds, a change goes the
  same way by more than the minimum effect, a value falls in the stated range);
- ``contradicted``: it is not;
- ``not measurable here``: with the reason (no GPU, one node, out of scope, no records of the
  family in this run, the family is still pending, too few ranks).

"Confirmed" is qualitative and local: this machine shows the same direction or bound. The
measured/article ratio beside it says how far the figures are apart.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from harness.baselines import Claim, Selector
from harness.comparable import mismatch
from harness.figures import FigureUnavailable, sample_parts
from harness.figures import value as figure_value
from harness.records import Record

CONFIRMED, CONTRADICTED, NOT_MEASURABLE = "confirmed", "contradicted", "not measurable here"
# A change smaller than this factor is "no change": noise on a shared 2-core machine is a few %.
MIN_EFFECT = 1.05

def matches(record: Record, selector: Selector) -> bool:
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


def check_claims(claims: Sequence[Claim], records: Sequence[Record], run_label: str = "") -> list[ClaimResult]:
    return [check_claim(c, records, run_label) for c in claims]


def check_claim(claim: Claim, records: Sequence[Record], run_label: str = "") -> ClaimResult:
    m = claim.measure

    def nm(reason: str) -> ClaimResult:
        return ClaimResult(claim, NOT_MEASURABLE, reason, run_label=run_label)

    if m.status == "not_measurable":
        return nm(m.reason)
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
    chosen = [r for r in big_enough if matches(r, m.select)]
    if not chosen:
        return nm(f"no {m.family} record matches {dict(m.select)}{pending}")
    values, skipped = [], []
    for r in chosen:
        try:
            values.append(figure_value(r, m.statistic))
        except FigureUnavailable as exc:
            skipped.append(str(exc))
    if not values:
        return nm(skipped[0])
    if m.compare == "bound":
        return _check_bound(claim, values, run_label)
    return _check_range(claim, values, run_label)


def _good_side(claim: Claim) -> str:
    if claim.relation in ("<", "<="):
        return claim.relation
    if claim.relation in (">", ">="):
        return claim.relation
    return "<=" if claim.direction == "lower" else ">="


def _check_bound(claim: Claim, values: list[float], run_label: str) -> ClaimResult:
    target = claim.value if claim.value is not None else claim.after
    rel = _good_side(claim)
    # By default the least favourable record decides ("p999 at most 0.85 ms" must hold for every
    # case); "over: best" is for claims that something happens at all (an OOM in some configuration).
    upper = rel in ("<", "<=")
    best = claim.measure.over == "best"
    measured = (min(values) if upper else max(values)) if best else (max(values) if upper else min(values))
    ok = {"<": measured < target, "<=": measured <= target, ">": measured > target, ">=": measured >= target}[rel]
    how = ("best of" if best else "worst of") if len(values) > 1 else "from"
    return ClaimResult(
        claim, CONFIRMED if ok else CONTRADICTED,
        f"{how} {len(values)} record(s); holds when measured {rel} {target:g} {claim.unit}",
        measured, _value_text(measured, claim.measure.statistic),
        measured / target if target else None, run_label,
    )


def _check_range(claim: Claim, values: list[float], run_label: str) -> ClaimResult:
    measured = statistics.median(values)
    inside = claim.low <= measured <= claim.high
    return ClaimResult(
        claim, CONFIRMED if inside else CONTRADICTED,
        f"median of {len(values)} record(s); holds inside {claim.low:g}-{claim.high:g} {claim.unit}",
        measured, _value_text(measured, claim.measure.statistic), None, run_label,
    )


def _pair_key(record: Record, drop: Iterable[str]) -> tuple:
    dropped = set(drop)
    return tuple(sorted((k, v) for k, v in record.params.items() if k not in dropped))


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
    ratios, skipped = [], []
    for key in pairs:
        differs = mismatch({"before": [before[key]], "after": [after[key]]})
        if differs:
            skipped.append(differs)
            continue
        try:
            b, a = figure_value(before[key], m.statistic), figure_value(after[key], m.statistic)
        except FigureUnavailable as exc:
            skipped.append(str(exc))
            continue
        if b > 0:
            ratios.append(a / b)
    if not ratios:
        return ClaimResult(claim, NOT_MEASURABLE, skipped[0] if skipped else "zero baseline figure", run_label=run_label)
    measured = statistics.median(ratios)
    if claim.before is not None and claim.after is not None and claim.before != 0:
        article = claim.after / claim.before
        expect = "lower" if article < 1 else "higher"
    else:
        article, expect = None, m.expect or ("lower" if claim.direction == "lower" else "higher")
    ok = measured < 1 / MIN_EFFECT if expect == "lower" else measured > MIN_EFFECT
    reason = (f"after/before {m.statistic}, median over {len(ratios)} matched pair(s); "
              f"holds when the change goes {expect} by more than {MIN_EFFECT - 1:.0%}")
    return ClaimResult(
        claim, CONFIRMED if ok else CONTRADICTED, reason, measured,
        f"x{_fmt(measured)} ({m.statistic})", measured / article if article else None, run_label,
    )
