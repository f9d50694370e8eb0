"""Build a report (one run, or several side by side) from stored records only.

The content is deterministic given the run directories and the baselines: no wall-clock time,
no host lookups, so the markdown of a fixed run is a golden file.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Mapping, Optional, Sequence

from harness.core import registry
from harness.claims.baselines import Claim, articles
from harness.core.family import Concluded, Family
from harness.core.contention import tally
from harness.claims.check import NOT_MEASURABLE, ClaimResult, check_claims, counts_text
from harness.tables.frame import records_of
from harness.core.records import Record
from harness.tables.family import (MEAN_ONLY, UNVERIFIED, TextTable, comparison_table, family_table,
                                   imported_tables, split_imports)
from harness.core.plotting import png_bytes
from harness.core.store import LoadedRun
from harness.nccltests.show import imported as imported_block
from harness.nccltests.show import imported_alerts
from harness.document.blocks import Block, Heading, Image, Para, Table


@dataclass
class Report:
    title: str
    blocks: list[Block] = field(default_factory=list)
    claim_results: list[list[ClaimResult]] = field(default_factory=list)  # per run
    # "LABEL: why" of each run that is not whole: the report says so at its top, and its command's exit
    incomplete: list[str] = field(default_factory=list)


def _fmt(x: Optional[float], spec: str = "{:.4g}") -> str:
    return "-" if x is None else spec.format(x)


def _gpus(fp: dict) -> str:
    g = fp.get("gpus") or {}
    if not g.get("present"):
        return "none" + (f" ({g['reason']})" if g.get("reason") else "")
    names = Counter(d.get("name", "?") for d in g.get("devices", []))
    return ", ".join(f"{n} x {name}" for name, n in names.items()) + f"; driver {g.get('driver_version', '?')}"


MACHINE_ROWS = (
    ("host", lambda fp: fp.get("host")),
    ("CPU", lambda fp: fp.get("cpu_model")),
    ("usable cores", lambda fp: fp.get("cpu_usable")),
    ("kernel", lambda fp: fp.get("kernel")),
    ("Python / torch", lambda fp: f"{fp.get('python')} / {fp.get('torch')}" if fp.get("python") else None),
    ("critpath", lambda fp: fp.get("critpath")),
    ("libraries", lambda fp: ", ".join(f"{k} {v}" for k, v in sorted(fp["libraries"].items()) if v)
     if fp.get("libraries") else None),
    ("backend, world, launch", lambda fp: f"{fp.get('backend')}, {fp.get('world')}, {fp.get('launch')}" if fp.get("backend") else None),
    ("NCCL", lambda fp: fp.get("nccl_version")),
    ("GPUs", lambda fp: _gpus(fp) if fp.get("gpus") else None),
    ("commit", lambda fp: (fp["git"].get("commit") or "-")[:12] + (" (dirty)" if fp["git"].get("dirty") else "") if fp.get("git") else None),
    ("imported from", lambda fp: fp.get("imported_from")),
)


def utc_text(stamp: object) -> Optional[str]:
    """A run.json time in UTC ("2026-12-01 18:05:53 UTC"). One that is not an ISO 8601 time (an
    import's "unknown") is shown as written; one without a zone is not taken for UTC or local time."""
    if stamp in (None, ""):
        return None
    try:
        when = datetime.fromisoformat(str(stamp))
    except ValueError:
        return str(stamp)
    if when.tzinfo is None:
        return f"{stamp} (no time zone given: not read as UTC)"
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _instant(stamp: object) -> Optional[datetime]:
    try:
        when = datetime.fromisoformat(str(stamp))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _finished(meta: dict) -> Optional[str]:
    end = utc_text(meta.get("finished_at"))
    start, stop = _instant(meta.get("started_at")), _instant(meta.get("finished_at"))
    if end is None:
        return f"- (run.json says {meta['state']})" if meta.get("state") not in (None, "finished", "imported") else None
    if start is None or stop is None:
        return end
    seconds = round((stop - start).total_seconds())
    return f"{end} ({seconds // 60} min {seconds % 60} s after the start)"


# What run.json says of the run itself: when it ran (as stored; the report reads no clock) and how.
RUN_ROWS = (
    ("run started", lambda meta: utc_text(meta.get("started_at"))),
    ("run finished", _finished),
    ("profile", lambda meta: (meta.get("options") or {}).get("profile")),
)


def _machine(runs: Sequence[LoadedRun]) -> list[Block]:
    rows = []
    getters = [(name, get, "fingerprint") for name, get in MACHINE_ROWS] + [(name, get, "meta") for name, get in RUN_ROWS]
    for name, get, source in getters:
        values = [get(getattr(r, source)) for r in runs]
        if all(v is None for v in values):
            continue
        rows.append([name, *("-" if v is None else str(v) for v in values)])
    if not rows:
        return [Heading(2, "Machine and run"), Para("No fingerprint.json or run.json in the run directory.")]
    return [Heading(2, "Machine and run"), Table(["", *(r.label for r in runs)], rows)]


def _cases(runs: Sequence[LoadedRun]) -> list[Block]:
    rows = []
    failures = []
    for run in runs:
        for fam in run.families():
            recs = run.of(fam)
            ok = sum(r.ok for r in recs)
            timeouts = sum(r.status == "timeout" for r in recs)
            rows.append([run.label, fam, str(len(recs)), str(ok), str(len(recs) - ok - timeouts), str(timeouts)])
            for r in recs:
                if not r.ok:
                    why = r.error.message.splitlines()[0] if r.error and r.error.message else (
                        f"check: {r.check.wrong} wrong of {r.check.checked}" if r.check else r.status)
                    failures.append([run.label, r.case_id, r.status, why])
    blocks: list[Block] = [Heading(2, "Cases"), Table(["run", "family", "cases", "ok", "failed", "timed out"], rows)]
    if failures:
        blocks += [Para("Cases that did not pass (each is a record; the run went on):"),
                   Table(["run", "case", "status", "why"], failures)]
    return blocks


def _table(table: TextTable) -> Table:
    return Table(list(table.headers), [list(row) for row in table.rows])


def _family_tables(runs: Sequence[LoadedRun], parts: Sequence, family: Optional[Family]) -> list[Block]:
    """One run: its table (imports as nccl-tests printed them). Several: side by side, from the
    frame rows of this family in each run (``parts``)."""
    if len(runs) > 1:
        table = comparison_table(parts, [r.label for r in runs], family)
        return [*(Para(note) for note in table.notes), _table(table)]
    measured, imported = split_imports(parts[0])
    blocks: list[Block] = []
    if imported["mean_only"].any():
        blocks.append(Para("Imported records carry one averaged time per case (no per-iteration samples "
                           f"exist in the source): percentiles are shown as {MEAN_ONLY}."))
    for table in imported_tables(imported):
        blocks += [Para(table.title), _table(table)]
        group = [r for r in runs[0].records if imported_block(r).get("file") == table.source]
        blocks += [Para(line) for line in imported_alerts(group)]
    if len(measured):
        table = family_table(measured, family)
        blocks += [*(Para(note) for note in table.notes), _table(table)]
    return blocks


def _definitions(family: Optional[Family], records: Sequence[Record]) -> Optional[Table]:
    """What each figure in these records means, from the family's declarations: unit, direction,
    whether it is measured, modelled or simulated, and its definition."""
    if family is None:
        return None
    present = {name for r in records for name in r.metrics}
    rows = [[f.name, f.unit, f.better, f.source, f.definition] for f in family.figures if f.name in present]
    return Table(["figure", "unit", "better", "source", "definition"], rows) if rows else None


def _declaration(name: str, families: Mapping[str, Family]) -> Optional[Family]:
    """The family whose plots and findings a report shows for records of ``name``: from ``families``,
    else the registry's (a fixed mapping narrows a golden report's tables, not its plots)."""
    return families.get(name) or registry.FAMILIES.get(name)


def known_families(families: Mapping[str, Family]) -> list[str]:
    """The families a report names when a run lacks them: those of ``families`` a reader would miss,
    then every registered family that declares plots."""
    names = [n for n, f in families.items() if f.listed_when_absent]
    return names + [n for n, f in registry.FAMILIES.items() if f.plots and n not in names]


def _concluded(concluded: Concluded) -> list[Block]:
    table = [Table(list(concluded.headers), [list(row) for row in concluded.rows])] if concluded.headers else []
    return [Para(concluded.text), *table]


def _plot_blocks(family: Family, runs: Sequence[LoadedRun]) -> list[Block]:
    blocks: list[Block] = []
    for plot in family.plots:
        try:
            drawn = plot.draw(runs)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            # Records of another shape (an older family version) must not take the report down.
            blocks.append(Para(f"{plot.title}: could not be drawn from these records "
                               f"({type(exc).__name__}: {exc})."))
            continue
        if drawn is None:
            blocks.append(Para(f"{plot.title}: nothing to plot (the records lack the fields it needs; "
                               "see docs/reports.md)."))
        else:
            blocks.append(Image(plot.name, plot.title, png_bytes(drawn.figure), drawn.caption))
    return blocks


def _unverified_plotted(family: Family, runs: Sequence[LoadedRun]) -> list[Block]:
    """The caption that plots of these records draw unverified figures too, as the records hold them."""
    marked = sum(bool(r.unverifiable) for run in runs for r in run.records)
    if not family.plots or not marked:
        return []
    return [Para(f"The plots draw each figure as its record holds it, those of the {marked} record(s) marked "
                 f"{UNVERIFIED} in the table above included.")]


def _families(runs: Sequence[LoadedRun], families: Mapping[str, Family]) -> list[Block]:
    frames = [records_of([run]) for run in runs]
    blocks: list[Block] = []
    present: list[str] = []
    for run in runs:
        present += [f for f in run.families() if f not in present]
    for fam in present:
        blocks.append(Heading(2, f"Family {fam}"))
        family = families.get(fam)
        if family is not None:
            blocks.append(Para(family.description))
        blocks += _family_tables(runs, [df[df["family"] == fam] for df in frames], family)
        definitions = _definitions(family, [r for run in runs for r in run.of(fam)])
        if definitions is not None:
            blocks.append(definitions)
        declared = _declaration(fam, families)
        if declared is not None:
            own = [run.only(fam) for run in runs]
            for finding in declared.findings:
                blocks += _concluded(finding.conclude(own))
            blocks += _plot_blocks(declared, own) + _unverified_plotted(declared, own)
    absent = [f for f in known_families(families) if f not in present]
    if absent:
        blocks += [Heading(2, "Families not in this run"),
                   Para("; ".join(f"no records of family {f} in this run" for f in absent) + ".")]
    return blocks


def _claims(runs: Sequence[LoadedRun], claims: Sequence[Claim], report: Report) -> list[Block]:
    per_run = [check_claims(claims, run.records, run.label) for run in runs]
    report.claim_results = per_run
    blocks: list[Block] = [Heading(2, "Claims check")]
    for run, results in zip(runs, per_run):
        blocks.append(Para(f"{run.label}: {counts_text(results)}, of {len(results)} claims."))
    blocks.append(Para(
        "Confirmed: the direction holds and the measured magnitude is within the tolerance band the claim "
        "states (its factor and why are in the notes). Confirmed in direction: the direction holds, the "
        "magnitude does not; both figures are shown. Simulated or modelled: the figure comes from a "
        "simulation or a model, never a confirmation; the notes give its parameters. Withheld: every record "
        "it would use is flagged (oversubscribed, stretched compute); the notes give the flags."))
    # The claims a run could check come first, with their figures; the ones no run could measure
    # (most of them, on one machine without a GPU) follow in a short table of reasons, so the
    # verdicts are not lost among 50 rows of dashes.
    checked = [i for i in range(len(claims)) if any(r[i].verdict != NOT_MEASURABLE for r in per_run)]
    unmeasured = [i for i in range(len(claims)) if i not in set(checked)]
    headers = ["claim", "article figure"]
    for run in runs:
        prefix = f"{run.label}: " if len(runs) > 1 else ""
        headers += [f"{prefix}measured", f"{prefix}ratio", f"{prefix}verdict"]
    headers += ["notes", "source"]
    rows = []
    for i in checked:
        claim = claims[i]
        row = [claim.id, claim.article_figure]
        for results in per_run:
            res = results[i]
            row += [res.measured_text, _fmt(res.ratio, "{:.3g}"), res.verdict]
        rows.append(row + [_notes(per_run, i), _cited(claims[i])])
    blocks += [Heading(3, f"Claims checked ({len(checked)})"), Table(headers, rows) if rows else
               Para("No claim could be checked against these records.")]
    if unmeasured:
        blocks += [Heading(3, f"Claims not measurable here ({len(unmeasured)})"),
                   Table(["claim", "article figure", "why not", "source"],
                         [[claims[i].id, claims[i].article_figure, _notes(per_run, i), _cited(claims[i])]
                          for i in unmeasured])]
    return blocks


def _notes(per_run: Sequence[Sequence[ClaimResult]], i: int) -> str:
    notes: list[str] = []
    for results in per_run:
        if results[i].notes and results[i].notes not in notes:
            notes.append(results[i].notes)
    return " / ".join(notes)


def _cited(claim: Claim) -> str:
    """Where a claim comes from, in English: the article's short name and the section's heading
    (the original headings are in the baselines files; the Sources section gives each title)."""
    if claim.article is None:
        return f"{claim.article_file}, {claim.section_en or claim.section}"
    return f"{claim.article.short}: {claim.section_en}"


def _sources(claims: Sequence[Claim]) -> list[Block]:
    found = articles(claims)
    if not found:
        return []
    rows = [[a.short, a.title_en, a.title + (f" ({a.title_note})" if a.title_note else ""), a.file, a.measured_on,
             a.attribution] for a in found]
    return [Heading(2, "Sources"),
            Para("The claims below are figures from third-party articles, not from critpath's authors: each is "
                 "someone else's reference point, measured on their hardware, and is quoted with its section so a "
                 "reader can find it. Titles are given in the original (Chinese) and in English; the English "
                 "renderings are critpath's. The article texts are not part of this report."),
            Table(["article", "title", "original title", "file", "what it measured, on what", "attribution"], rows),
            Para("Sections cited: the heading in English as the claims table gives it, and as the article writes "
                 "it (to find it in the original)."),
            Table(["article", "section", "original heading", "claims"], _sections(claims))]


def _sections(claims: Sequence[Claim]) -> list[list[str]]:
    cited: dict[tuple[str, str, str], list[str]] = {}
    for claim in claims:
        if claim.article is not None:
            cited.setdefault((claim.article.short, claim.section_en, claim.section), []).append(claim.id)
    return [[short, english, original, ", ".join(ids)] for (short, english, original), ids in cited.items()]


def build(runs: Sequence[LoadedRun], claims: Sequence[Claim], extra: Sequence[Block] = (),
          families: Optional[Mapping[str, Family]] = None) -> Report:
    """``families`` (default: the registry) gives descriptions, table columns and the families
    a run may lack; a fixed mapping keeps a golden report independent of what else is registered.
    Each family present is shown with the findings and plots it declares (``Family.findings``,
    ``Family.plots``): the report knows no family by name."""
    families = registry.FAMILIES if families is None else families
    if not runs:
        raise ValueError("a report needs at least one run")
    title = ("critpath report: " + runs[0].label) if len(runs) == 1 else (
        "critpath comparison: " + " vs ".join(r.label for r in runs))
    incomplete = [f"{r.label}: {r.incomplete}" for r in runs if r.incomplete]
    report = Report(title, incomplete=incomplete)
    report.blocks.append(Heading(1, title))
    report.blocks.append(Para(
        "Built from the stored records only (" + ", ".join(f"{r.label}: {tally(x.contention_verdict for x in r.records)}"
                                                           for r in runs)
        + "). Latencies are per operation; for collectives an iteration's time is the slowest rank's."
        + ("".join(f" INCOMPLETE RUN ({note}): its tables are not a whole run." for note in incomplete))))
    if len(runs) > 1:
        report.blocks.append(Para("Runs from different jobs or machines are not an A/B measurement: "
                                  "differences include machine and load noise."))
    report.blocks += _machine(runs)
    report.blocks += _cases(runs)
    report.blocks += _families(runs, families)
    report.blocks += list(extra)
    report.blocks += _sources(claims)
    report.blocks += _claims(runs, claims, report)
    return report
