"""Records that cannot be edited into lies: what a record says is checked against what it holds.

``Record.from_dict`` checks the summary against the samples. This goes further, when a run's
results are read: the family must be one critpath knows, the params must be what the case ID says
(and what the family's declaration admits), every figure must be finite, and a passing record's
derived figures are recomputed from its samples, params and stored per-rank reports through the
family's own ``metrics`` and must match. A contradiction is a ``RecordError`` naming the file, line
and field. An imported record's figures are rebuilt from the source row it keeps
(``harness.core.imported``). What cannot be recomputed (the source row itself, a record of another
family version, a family without stored reports) is not trusted silently: it is listed in
``Record.unverifiable``, figure by figure, with the reason, and acceptance, diagnosis and
comparison take none of it as evidence. An import's identity and check are its row's too, and a
record that says it came from nccl-tests (its timer or reduction) without the row is refused:
without the row nothing in it can be checked.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Mapping

import jsonschema

from harness.core import registry
from harness.core.case import Case, CaseIdError
from harness.core.contention import window_problem
from harness.core.family import BACKENDS, MAX_CHECKED_PER_RANK, Family
from harness.core.imported import (
    IMPORTED_BACKEND,
    IMPORTED_BY,
    IMPORTED_TIMER,
    check_contradiction,
    contradiction,
    identity_contradiction,
)
from harness.core.numbers import NumberError, check_float
from harness.core.records import (
    CHECK_FAILED,
    CUDA_TIMER,
    HOST_TIMER,
    MAX_OVER_RANKS,
    Record,
    RecordError,
    family_owned_timer,
    reduction_for,
)
from harness.core.stats import Summary

# Recomputing runs the same code on the same numbers; only float formatting in JSON can differ.
REL_TOL = 1e-9
# How far the driver's timers may read one sample above the time it took, in ns: the host clock's
# reads are whole nanoseconds, CUDA events' elapsed_time about half a microsecond.
SAMPLE_ROUNDING_NS = {HOST_TIMER: 1, CUDA_TIMER: 1000}


def _imported(record: Record, where: str) -> bool:
    """Whether the record is an import; a RecordError when it says so without the row it came from."""
    extra = record.extra if isinstance(record.extra, Mapping) else {}
    if "imported" in extra:
        if not isinstance(extra["imported"], Mapping) or not extra["imported"]:
            raise RecordError(f"field extra.imported: {extra['imported']!r} is not the row the record was "
                              "imported from", where)
        return True
    said = [f"{name} {value!r}" for name, value in (("timer", record.timer), ("reduction", record.reduction))
            if isinstance(value, str) and value.startswith(IMPORTED_BY)]
    if said or record.family not in registry.FAMILIES and record.family.startswith("nccltests_"):
        why = ", ".join(said) or f"family {record.family!r}"
        raise RecordError(f"field extra.imported: missing; the record says it was imported ({why}), and "
                          "without its row none of its figures can be checked", where)
    return False


def _check_finite(record: Record, where: str) -> None:
    for name, value in record.metrics.items():
        try:
            check_float(value, f"field metrics.{name}")
        except NumberError as exc:
            raise RecordError(str(exc), where) from None


def _at_default(param, value) -> bool:
    """Whether a record's ``value`` of a key (or "(absent)") is that key's declared default."""
    return value == "(absent)" or (param is not None and param.default is not None and value == param.default
                                   and type(value) is type(param.default))


def _check_identity(record: Record, where: str) -> Case:
    """The case the record's ID names, once its family, params and world agree with it."""
    family = record.case_id.partition("/")[0]
    if family != record.family:
        raise RecordError(f"field family: {record.family!r} but the case ID {record.case_id!r} is of {family!r}", where)
    if record.family not in registry.FAMILIES:
        raise RecordError(f"field family: {record.family!r} is not a critpath family; known: "
                          f"{', '.join(registry.FAMILIES)}", where)
    try:
        case = registry.parse(record.case_id)
    except CaseIdError as exc:
        raise RecordError(f"field case_id: {exc}", where) from None
    declared = registry.FAMILIES[record.family].declared
    for key in sorted(set(case.params) | set(record.params)):
        stored, said = record.params.get(key, "(absent)"), case.params.get(key, "(absent)")
        if _at_default(declared.get(key), stored) and _at_default(declared.get(key), said):
            continue  # a key at its default, spelt out or left out: the ID of a run before one spelling held
        if stored != said or type(stored) is not type(said):  # 8 and 8.0 are different cases
            raise RecordError(f"field params.{key}: {stored!r} but the case ID says {said!r}", where)
    if "world" in case.params and case.params["world"] != record.world:
        raise RecordError(f"field world: {record.world} but the case ID says world={case.params['world']}", where)
    return case


def _check_outcome(record: Record, where: str) -> None:
    """A native record's status, check and error as the driver writes them: an ok record ran its
    correctness check and passed it (a figure counts only with its check), a record that failed its
    check keeps the check, and no check finds more wrong results than it checked. An import's check
    is its row's #wrong, checked against the row instead (``check_contradiction``)."""
    check = record.check
    if check is not None and check.wrong > check.checked:
        raise RecordError(f"field check.wrong: {check.wrong} wrong of {check.checked} checked", where)
    if record.status == "ok":
        if check is None:
            raise RecordError("field check: none recorded; an ok record counts only with its correctness "
                              "check, which critpath runs after timing every case", where)
        if not check.passed:
            raise RecordError(f"field status: 'ok' but field check found {check.wrong} of {check.checked} "
                              "wrong; critpath records a failed check as status 'failed'", where)
        if record.error is not None:
            raise RecordError(f"field error: an ok record carries an error ({record.error.kind}: "
                              f"{record.error.message})", where)
    elif record.error is not None and record.error.kind == CHECK_FAILED and (check is None or check.passed):
        said = "no check" if check is None else f"a passed check ({check.wrong} of {check.checked} wrong)"
        raise RecordError(f"field check: the record failed its check (field error), and holds {said}", where)


def _check_how_measured(record: Record, case: Case, family: Family, where: str) -> None:
    """A native record's backend, timer, reduction, plan, wall time and check count as the driver
    writes them (harness.run.driver.run_case): model calibration and the crossover finding select
    records by backend, comparison pairs them by timer and reduction, and none of these is a
    figure that the samples recompute."""
    if record.backend not in BACKENDS:
        raise RecordError(f"field backend: {record.backend!r} is not a backend critpath runs ({', '.join(BACKENDS)})",
                          where)
    if "backend" in case.params and record.backend != case.params["backend"]:
        raise RecordError(f"field backend: {record.backend!r} but the case ID says backend={case.params['backend']}",
                          where)
    if record.reduction != reduction_for(record.world):
        raise RecordError(f"field reduction: {record.reduction!r} at world {record.world}; the driver reduces ranks' "
                          f"samples by {reduction_for(record.world)!r}", where)
    timers = [HOST_TIMER]
    if record.backend == "nccl":  # only NCCL ranks get a CUDA device (harness.run.worker.device_for)
        timers.append(CUDA_TIMER)
    if family.iterate is not None:
        timers.append(family_owned_timer(family.name))
    if not record.samples_ns:
        timers.append("")  # it never timed
    if record.timer not in timers:
        raise RecordError(f"field timer: {record.timer!r} is not a timer of a {record.family} record over "
                          f"{record.backend} ({', '.join(map(repr, timers))})", where)
    samples = record.samples_ns
    if samples:
        iters = record.plan.get("iters") if isinstance(record.plan, Mapping) else None
        if iters != len(samples):
            raise RecordError(f"field plan.iters: {iters!r} but the record holds {len(samples)} samples, one an "
                              "iteration", where)
    if record.timer in SAMPLE_ROUNDING_NS and samples:
        # Every rank's timed loop lies within rank 0's wall time (it starts after a barrier rank 0
        # joins and ends before rank 0 reduces the samples), and the max over ranks of each
        # iteration sums to at most the ranks' sums. A family's own loop is not held to it: open-loop
        # latency runs from each request's intended send, and requests overlap.
        ranks = record.world if record.reduction == MAX_OVER_RANKS else 1
        timed_ns = sum(samples) - SAMPLE_ROUNDING_NS[record.timer] * len(samples)
        over = f" over {ranks} ranks" if ranks > 1 else ""
        if timed_ns > ranks * record.wall_s * 1e9:
            raise RecordError(f"field wall_s: {record.wall_s!r} s, less than the {sum(samples) / 1e9:.6g} s its "
                              f"samples add up to{over}", where)
        # Each rank's contention window holds its own timed loop, so the same bound holds of the
        # windows: the iterations' max over ranks add up to at most the ranks' windows together.
        windows_ns = [rank.window_ns for rank in record.contention.ranks[:ranks]] if record.contention else []
        if windows_ns and timed_ns > sum(windows_ns):
            raise RecordError(f"field contention.ranks.window_ns: {sum(windows_ns)} ns{over}, less than the "
                              f"{sum(samples)} ns its samples add up to", where)
    if record.contention is not None and (why := window_problem(record.contention, record.wall_s)):
        raise RecordError(f"field contention.{why}", where)
    check = record.check
    if check is not None:
        # A bound of this family version's case: a record of another version is held to the general one.
        most = (family.checked_at_most(case, record.world) if record.family_version == family.version
                else record.world * MAX_CHECKED_PER_RANK)
        if check.checked > most:
            raise RecordError(f"field check.checked: {check.checked} but a check of {record.case_id} counts at "
                              f"most {most} results on {record.world} ranks", where)


def verify(record: Record, where: str = "") -> Record:
    """``record`` with ``unverifiable`` filled in, or a RecordError naming what contradicts it."""
    _check_finite(record, where)
    if _imported(record, where):
        block = record.extra["imported"]
        for name, said, source in (("backend", record.backend, IMPORTED_BACKEND), ("timer", record.timer, IMPORTED_TIMER)):
            if said != source:
                raise RecordError(f"field {name}: {said!r}; an import from nccl-tests is {source!r}", where)
        # Figures, identity and check are the source row's, which the record keeps: an edit is refused.
        wrong = (identity_contradiction(block, record.family, record.case_id, record.params, record.world)
                 or check_contradiction(block, record.check)
                 or (contradiction(block, record.metrics, record.samples_ns) if record.status == "ok" else None))
        if wrong:
            raise RecordError(f"{record.case_id}: {wrong}", where)
        return record
    case = _check_identity(record, where)
    _check_outcome(record, where)
    family = registry.get(record.family)
    _check_how_measured(record, case, family, where)
    if record.family_version == family.version:  # another version's reports are of its own shape
        _check_reports(record, family, where)
    if not record.ok:
        if record.metrics:
            raise RecordError(f"field metrics: a {record.status} record (check "
                              f"{'passed' if record.check is None or record.check.passed else 'failed'}) carries "
                              f"figures ({', '.join(sorted(record.metrics))})", where)
        return record
    if record.family_version != family.version:
        why = f"recorded by {record.family} version {record.family_version}; this critpath has version {family.version}"
        return replace(record, unverifiable={name: why for name in record.metrics})
    reports = _reports(record)
    if family.report is not None and reports is None:
        return _without_reports(record, family, case)
    if family.reports_contradiction is not None:
        wrong = family.reports_contradiction(case, reports)
        if wrong:
            raise RecordError(f"field extra.rank_reports.{wrong}", where)
    try:
        derived = dict(family.metrics(case, Summary.of(record.samples_ns), reports or []))
    except Exception as exc:  # a family's metrics() on stored data it cannot read: say so, keep the record
        why = f"{record.family}.metrics() could not recompute it: {type(exc).__name__}: {exc}"
        return replace(record, unverifiable={name: why for name in record.metrics})
    for name in sorted(set(derived) | set(record.metrics)):
        if name not in record.metrics:
            raise RecordError(f"field metrics.{name}: missing; the samples and reports give {derived[name]!r}", where)
        if name not in derived:
            raise RecordError(f"field metrics.{name}: {record.metrics[name]!r} is not a figure "
                              f"{record.family} version {family.version} derives", where)
        if not _same(record.metrics[name], derived[name]):
            raise RecordError(f"field metrics.{name}: {float(record.metrics[name])!r} but the samples and reports "
                              f"give {float(derived[name])!r}", where)
    return record


def _reports(record: Record):
    """The per-rank reports a record keeps (None: none)."""
    return record.extra.get("rank_reports") if isinstance(record.extra, Mapping) else None


def _check_reports(record: Record, family: Family, where: str) -> None:
    """A record's stored reports as the driver gathers them, one a rank, each what its family's
    ``report_schema`` declares: metrics() reads them again, and a text or a zero where it divides
    was a TypeError or a ZeroDivisionError there."""
    reports = _reports(record)
    if reports is None or family.report is None:
        return
    if not isinstance(reports, list):
        raise RecordError(f"field extra.rank_reports: {type(reports).__name__}, not a list of one report a rank", where)
    if reports and len(reports) != record.world:  # [] is what records before the reports were kept hold
        raise RecordError(f"field extra.rank_reports: {len(reports)} reports in a record of world {record.world}; "
                          "the driver gathers one a rank", where)
    for rank, report in enumerate(reports):
        if not isinstance(report, Mapping):
            raise RecordError(f"field extra.rank_reports.{rank}: {type(report).__name__}, not a report", where)
        if family.report_validator is not None:
            error = jsonschema.exceptions.best_match(family.report_validator.iter_errors(report))
            if error is not None:
                inside = "".join(f".{p}" for p in error.absolute_path)
                raise RecordError(f"field extra.rank_reports.{rank}{inside}: {error.message}", where)


def _same(stored, again) -> bool:
    return math.isclose(float(stored), float(again), rel_tol=REL_TOL, abs_tol=1e-12)


def _without_reports(record: Record, family, case: Case) -> Record:
    """A record of a family that stores per-rank reports, without them (one written before records
    kept them). A figure its family derives from the samples alone, as stored, is verified: the
    reports did not enter it. The others cannot be told from an edit, and are listed."""
    why = "the record has no per-rank reports to recompute it from"
    try:
        derived = dict(family.metrics(case, Summary.of(record.samples_ns), []))
    except Exception:  # metrics() that needs the reports: none of its figures can be recomputed
        derived = {}
    unverifiable = {name: why for name, value in record.metrics.items()
                    if name not in derived or not _same(value, derived[name])}
    return replace(record, unverifiable=unverifiable)
