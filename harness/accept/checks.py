"""Each check of a profile against a run's records: the records it means, the statistic they
give, and one of three verdicts (harness.accept.verdicts): pass, fail, could not verify.

A check whose case the run does not hold, in a data type or from a source the check does not
accept, whose statistic its records cannot give, or whose figure a record holds but could not have
recomputed when it was read (``Record.unverifiable``) could not be verified; only a measured value
that misses the profile fails. The least favourable matching record decides.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from harness.accept.pins import fact_outcome, pin_outcomes
from harness.accept.match import MEASURED, canonical_parts, case_parts, means, selects, value_of
from harness.accept.verdicts import FAIL, PASS, UNVERIFIED, Outcome, exit_code, word
from harness.core.comparable import mismatch
from harness.core.declarations import declared
from harness.core.family import SOURCE_MARKS
from harness.core.figures import FigureUnavailable, is_sample_statistic, sample_parts
from harness.core.figures import value as figure_value
from harness.core.records import Record


def record_source(record: Record) -> str:
    imported = (record.extra or {}).get("imported")
    return str(imported.get("source", "imported")) if isinstance(imported, Mapping) else MEASURED


def _where(record: Record) -> str:
    """The record, and for an import the file and line it came from."""
    imported = (record.extra or {}).get("imported")
    if not isinstance(imported, Mapping):
        return record.case_id
    return f"{record.case_id} from {imported.get('source')} {imported.get('file')} {imported.get('where')}".rstrip()


def _matches(record: Record, check: Mapping[str, Any]) -> bool:
    return means(record, record.case_id, check)


def _spread(values: Sequence[str]) -> str:
    if values and all(v.lstrip("-").isdigit() for v in values):
        nums = sorted(int(v) for v in values)
        return str(nums[0]) if len(nums) == 1 else f"{nums[0]} .. {nums[-1]}"
    return ", ".join(sorted(values)[:6]) + (" ..." if len(values) > 6 else "")


def why_no_record(check: Mapping[str, Any], records: Sequence[Record]) -> str:
    """What the run lacks for this check, parameter by parameter: ``no allreduce record with
    dtype=bfloat16 (the run has float32)``."""
    if "case" in check:
        family, want = canonical_parts(check["case"])
    else:
        family, want = check["family"], {k: v for k, v in check.get("select", {}).items() if v is not None}
    same = [r for r in records if r.family == family]
    if not same:
        held = ", ".join(sorted({r.family for r in records})) or "none"
        return f"no {family} record in this run (its families: {held})"
    if check.get("dtypes"):
        want = {**want, "dtype": check["dtypes"]}
    gaps = []
    hint = ""
    for key, value in want.items():
        options = [str(v) for v in value] if isinstance(value, list) else [str(value)]
        have = sorted({str(value_of(r, key)) for r in same})
        if not set(options) & set(have):
            gaps.append(f"{key}={'|'.join(options)} (the run has {_spread(have)})")
            if key == "dtype" and not check.get("dtypes"):
                hint = f"; a check may accept {', '.join(have)} too: dtypes: [{', '.join(options + have)}]"
    if not gaps:
        return f"no {family} record with all of {want} (each value is in the run, not together)"
    return f"no {family} record with " + ", ".join(gaps) + hint


def _failure(record: Record) -> str:
    """``CASE from nccl-tests F line 18 wrong: 2 wrong of 8``: the record, its outcome and why."""
    why = record.error.message.splitlines()[0] if record.error and record.error.message else (
        f"{record.check.wrong} wrong of {record.check.checked}" if record.check else record.status)
    return f"{_where(record)} {record.label}: {why}"


# The failed records acceptance names; the others are counted: a sweep wrong at every size is one
# line, not a thousand.
NAMED_FAILURES = 5
RECORDS_SOURCE = "a case of a family the profile checks that failed or gave wrong answers fails acceptance"


def _checked_family(check: Mapping[str, Any]) -> str:
    return check.get("family") or case_parts(check.get("case", ""))[0]


def _covers(check: Mapping[str, Any], record: Record) -> bool:
    """Whether a failure of ``record`` is one ``check`` answers for: its case, or its family."""
    return means(record, record.case_id, check) if check.get("case") else record.family == _checked_family(check)


def records_outcome(profile: Mapping[str, Any], records: Sequence[Record]) -> tuple[Outcome, ...]:
    """A FAIL naming the failed and wrong-answer records of every family the profile checks, whether
    or not a check selects them: a sweep judged at one size still ran the others, and a collective
    that gives wrong answers at 8 B is not accepted by its bandwidth at 128 MiB. A family no check
    names is not what the profile accepts, nor, for a check that names one case (``case:``), the
    other cases of its family: the user chose that case alone. Nothing where every such record is ok."""
    records = [r for r in records if any(_covers(c, r) for c in profile["checks"])]
    failed = [r for r in records if not r.ok]
    if not failed:
        return ()
    named = "; ".join(_failure(r) for r in failed[:NAMED_FAILURES])
    more = f"; and {len(failed) - NAMED_FAILURES} more" if len(failed) > NAMED_FAILURES else ""
    return (Outcome("run", "every case ok", FAIL, "failed records", "count", len(failed), "==", 0, None,
                    f"{len(failed)} of {len(records)} records: {named}{more}", RECORDS_SOURCE),)


def unit_of(family: str, statistic: str) -> tuple[str, str]:
    """(unit, mark): the unit a statistic is in, from its name (p99_us) or its family's declaration
    (busbw_gbps: GB/s); mark says when the figure is modelled or simulated. "" where none is declared."""
    parts = sample_parts(statistic)
    if parts:
        return parts[1], ""
    if is_sample_statistic(statistic):
        return "ratio", ""  # pNN_over_mean
    figure = declared(family, statistic)
    if figure is None:
        return "", ""
    return figure.unit, SOURCE_MARKS[figure.source]


def evaluate_check(check: Mapping[str, Any], records: Sequence[Record]) -> Outcome:
    name, stat, source = check["name"], check["statistic"], check["source"]
    family = _checked_family(check)
    unit, mark = unit_of(family, stat)
    if "relative_to" in check:
        stat, unit = f"{stat} / reference {stat}", "ratio"
    bound_max = check.get("max")
    op, bound = ("<=", bound_max) if bound_max is not None else (">=", check["min"])

    def out(verdict, measured=None, margin=None, detail=""):
        return Outcome("check", name, verdict, stat, unit, measured, op, bound, margin, detail, source)

    sources = check.get("sources")
    usable = [r for r in records if not sources or record_source(r) in sources]
    chosen = [r for r in usable if _matches(r, check)]
    if not chosen:
        came = ", ".join(sorted({record_source(r) for r in records} - set(sources or ())))
        if not records:  # a run killed before its first record
            why = "the run holds no records"
        elif not usable:
            why = f"the check accepts records from {', '.join(sources)}; this run's come from {came}"
        elif any(_matches(r, check) for r in records):
            why = f"the run's records of it come from {came}; the check accepts sources {', '.join(sources)}"
        else:
            why = why_no_record(check, usable)
        return out(UNVERIFIED, detail=why)
    failed = [r for r in chosen if not r.ok]
    if failed:
        return out(FAIL, detail=_failure(failed[0]))
    try:
        values = [figure_value(r, check["statistic"]) for r in chosen]
        if "relative_to" in check:
            refs = [r for r in records if r.family == chosen[0].family and selects(r, check["relative_to"]) and r.ok]
            if not refs:
                return out(UNVERIFIED, detail=f"no reference record {check['relative_to']} in this run")
            differs = mismatch({"checked": chosen, "reference": refs[:1]})
            if differs:
                return out(UNVERIFIED, detail=differs)
            ref = figure_value(refs[0], check["statistic"])
            values = [v / ref for v in values]
    except FigureUnavailable as exc:
        return out(UNVERIFIED, detail=str(exc))
    # The least favourable record decides: a threshold must hold for every matching case.
    if bound_max is not None:
        worst = max(range(len(values)), key=values.__getitem__)
        measured = values[worst]
        margin = (bound_max - measured) / abs(bound_max) * 100 if bound_max else None
        verdict = PASS if measured <= bound_max else FAIL
    else:
        worst = min(range(len(values)), key=values.__getitem__)
        measured = values[worst]
        margin = (measured - check["min"]) / abs(check["min"]) * 100 if check["min"] else None
        verdict = PASS if measured >= check["min"] else FAIL
    decider = chosen[worst]
    detail = (f"worst of {len(values)} records: " if len(values) > 1 else "") + _where(decider)
    wanted_dtype = canonical_parts(check["case"])[1].get("dtype") if "case" in check else None
    if wanted_dtype and decider.params.get("dtype") != wanted_dtype:
        detail += f"; {decider.params.get('dtype')} accepted by the check's dtypes"
    contended = [r for r in chosen + (refs[:1] if "relative_to" in check else [])
                 if r.contention_verdict.contended is True]
    if contended:
        verdict, said = _contended(verdict, contended, len(chosen), stat if "relative_to" not in check else None,
                                   unit, bound_max is not None)
        detail += said
    return out(verdict, measured, margin, detail + mark)


def _contended(verdict: str, contended: Sequence[Record], chosen: int, statistic, unit: str,
               is_max: bool) -> tuple[str, str]:
    """(verdict, what to add to the detail) where records a check rests on were timed while other
    processes took their CPUs (harness.core.contention). Contention only adds time: a latency held
    to a maximum, or a rate (unit per second) to a minimum, that passes holds on a quiet machine
    too. A failure may be the neighbour's, and any other figure (a ratio, a count) may move either
    way: neither is established here."""
    said = (f"; {len(contended)} of the {chosen} records contended ({contended[0].case_id}: "
            f"{contended[0].contention_verdict.evidence})")
    only_worse = statistic is not None and ((is_max and sample_parts(statistic) is not None)
                                            or (not is_max and unit.endswith("/s")))
    if verdict == PASS and only_worse:
        return PASS, said + ": contention only adds time, so the pass holds"
    return UNVERIFIED, said + (": the figure may be the neighbour's; rerun on a quiet machine" if verdict == FAIL
                               else ": contention may move this figure either way; rerun on a quiet machine")


@dataclass(frozen=True)
class Acceptance:
    profile: str
    checks: tuple[Outcome, ...]
    pins: tuple[Outcome, ...] = ()
    facts: tuple[Outcome, ...] = ()
    records: tuple[Outcome, ...] = ()  # the run's failed records, whichever check selects them
    incomplete: str = ""  # the run did not finish every case: no verdict can pass it

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        return self.checks + self.records + self.pins + self.facts

    @property
    def exit_code(self) -> int:
        return exit_code([o.verdict for o in self.outcomes] + ([UNVERIFIED] if self.incomplete else []))

    @property
    def verdict(self) -> str:
        return word(self.exit_code)

    def counts(self) -> dict[str, int]:
        return {v: sum(o.verdict == v for o in self.outcomes) for v in (PASS, FAIL, UNVERIFIED)}

    def to_dict(self) -> dict:
        # /2: three verdicts ("could not verify" replaced "could not run"); pins and facts are outcomes
        # like checks, with statistic and unit, instead of a list of problem strings.
        return {"schema": "critpath.acceptance/2", "profile": self.profile, "verdict": self.verdict,
                "exit_code": self.exit_code, "incomplete": self.incomplete, "counts": self.counts(),
                "checks": [o.to_dict() for o in self.checks], "pins": [o.to_dict() for o in self.pins],
                "facts": [o.to_dict() for o in self.facts], "records": [o.to_dict() for o in self.records]}


def accept(profile: Mapping[str, Any], records: Sequence[Record], fp: Mapping[str, Any],
           incomplete: str = "") -> Acceptance:
    return Acceptance(profile["name"], tuple(evaluate_check(c, records) for c in profile["checks"]),
                      tuple(pin_outcomes(profile, fp)), tuple(fact_outcome(f, fp) for f in profile.get("facts", [])),
                      records_outcome(profile, records), incomplete)


