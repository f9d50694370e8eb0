"""The family tables as rows of text, built from the records frame (``harness.tables.frame``).

One source of rows for the report's tables and ``critpath show``:

- ``family_table``: one run, one row per case, the family's own columns (``Family.columns``) read
  off the frame's columns (figures, sample statistics, params, the check count);
- ``imported_tables``: an nccl-tests import as nccl-tests printed it, both sides;
- ``comparison_table``: several runs side by side, keyed by case ID: per compared figure one
  column per run and one ratio column per later run (run k / run 1), a case missing from a run
  shown as "-" and counted in the notes, never dropped.

Every percentile obeys the sample rule (``harness.core.figures.supports``): one the samples do not
support reads "n too small", and no ratio is taken of it. A figure its record holds that could not
be recomputed when it was read is shown marked "(unverified)", with a note saying why, and no ratio
is taken of it either: it is no measurement.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from harness.core.bandwidth import nccl_tests_better
from harness.core.comparable import CHECKED_FIELDS
from harness.core.contention import RULE
from harness.core.family import SOURCE_MARKS, Column, Family
from harness.core.figures import N_TOO_SMALL, SAMPLE_BETTER, TIME_SCALE, is_sample_statistic, sample_parts, supports
from harness.core.options import UnknownName
from harness.core.sizes import format_size
from harness.core.store import ResultsFileError
from harness.nccltests.evidence import ranks_text
from harness.tables.frame import (CONTENDED, NCCL_PREFIX, PARAM_PREFIX, SUMMARY_COLUMNS, UNVERIFIED_COLUMN,
                                  UNVERIFIED_REASON)
from harness.tables.frame import NCCL_SIDES as FRAME_SIDES

MISSING = "-"  # no value: the case is not in that run, failed, or lacks the figure
MEAN_ONLY = "mean only"  # a percentile of an import that holds nccl-tests' mean alone
ZERO_RATIO = "n/a (zero)"  # a ratio with a zero side: nccl-tests rounds small bandwidths to 0.00
ROUNDED_RATIO = "n/a (rounded)"  # a side printed with fewer than 3 significant digits (busbw 0.01)
DEFINITION_RATIO = "n/a (definition)"  # records of different definitions (harness.core.comparable)
FLAGGED = "flagged"  # appended to a status whose record the family flags as distorted
# appended to a status whose timed loop the contention rule (harness.core.contention) calls contended
CONTENDED_MARK = "contended"
UNVERIFIED = "(unverified)"  # appended to a figure its record holds but verification could not recompute
UNVERIFIED_RATIO = "n/a (unverified)"
IMPORT_FILE = NCCL_PREFIX + "file"


@dataclass(frozen=True)
class TextTable:
    headers: Sequence[str]  # a header may hold a line break (the side under "time (us)"); markdown joins it
    rows: Sequence[Sequence[str]]
    title: str = ""
    notes: Sequence[str] = ()
    source: str = ""  # an import's file, whose evidence and trailer go with the table


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN and pandas' NA (whose comparison is NA, truthy-refusing)
    except TypeError:
        return True


def _py(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def row_params(row: Mapping[str, Any]) -> dict:
    """A frame row's case parameters, by name, as plain Python values (NA: not a parameter of it)."""
    return {k[len(PARAM_PREFIX):]: _py(v) for k, v in row.items() if k.startswith(PARAM_PREFIX) and not _missing(v)}


class RowRecord:
    """A frame row read as the record a family ``Column.value`` reads: its params, figures and check."""

    def __init__(self, row: Mapping[str, Any], figures: Sequence[str]) -> None:
        self.case_id, self.family, self.label = row["case_id"], row["family"], row["label"]
        self.ok, self.status = bool(row["ok"]), row["status"]
        self.params = row_params(row)
        self.metrics = {name: float(row[name]) for name in figures if not _missing(row.get(name))}
        self.check = None if _missing(row.get("check_wrong")) else _Check(int(row["check_wrong"]),
                                                                          int(row["check_checked"]))


@dataclass(frozen=True)
class _Check:
    wrong: int
    checked: int


def frame_column(stat: str) -> str:
    """The frame's column of a sample statistic (``p99_ns`` -> ``p99_us``) or of a declared figure."""
    parts = sample_parts(stat)
    return f"{parts[0]}_us" if parts else stat


def figure_text(row: Mapping[str, Any], name: str, fmt: str = "{:.4g}", scale: float = 1.0) -> str:
    """A figure (``p99_us``, ``p50_ns``, ``busbw_gbps``) of a frame row, as every table shows it:
    "-" when absent, "mean only" for a percentile of a mean-only import, "n too small" for a
    percentile the samples do not support."""
    parts = sample_parts(name)
    value = row.get(frame_column(name))
    # A statistic the frame does not hold (p95_us, p999_over_mean) would read "-" beside a real value.
    if (f"{parts[0]}_us" not in SUMMARY_COLUMNS) if parts else is_sample_statistic(name):
        raise UnknownName(f"{name}: the frame holds min, p50, p90, p99, p999, max and mean; no such column")
    if parts:
        if row.get("mean_only") and parts[0] != "mean" and _missing(value):
            return MEAN_ONLY
        scale *= TIME_SCALE["us"] / TIME_SCALE[parts[1]]
    if _missing(value):
        return MISSING
    n = int(row.get("n_samples") or 0)
    if n and not supports(name, n):
        return N_TOO_SMALL
    text = fmt.format(float(value) * scale)
    return f"{text} {UNVERIFIED}" if is_unverified(row, name) else text


def is_unverified(row: Mapping[str, Any], name: str) -> bool:
    """Whether the figure ``name`` of a frame row could not be recomputed when its record was read."""
    names = row.get(UNVERIFIED_COLUMN)
    return not _missing(names) and name in str(names).split(",")


def unverified_notes(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The caption of the figures marked unverified in these rows, with why; [] when none is."""
    marked = [row for row in rows if not _missing(row.get(UNVERIFIED_COLUMN))]
    if not marked:
        return []
    reasons = sorted({why for row in marked for why in str(row[UNVERIFIED_REASON]).split("; ")})
    return [f"{UNVERIFIED}: figures of {len(marked)} of these {len(rows)} records could not be recomputed from "
            f"their samples and reports when read ({'; '.join(reasons)}). They are shown as the records hold them "
            "and are no measurement: no acceptance check, comparison or claim takes them."]


def is_contended(row: Mapping[str, Any]) -> bool:
    value = row.get(CONTENDED)
    return not _missing(value) and bool(value)


def status_text(row: Mapping[str, Any], flags: bool = False) -> str:
    """A row's status as tables show it: its label, then ", flagged" (with ``flags``: the family
    flags its figures) and ", contended" (the contention rule does)."""
    marks = [FLAGGED] if flags and not _missing(row.get("flags")) else []
    marks += [CONTENDED_MARK] if is_contended(row) else []
    return ", ".join([row["label"], *marks])


def contention_notes(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The caption of the statuses marked contended in these rows; [] when none is."""
    marked = sum(is_contended(row) for row in rows)
    if not marked:
        return []
    return [f"Status '{CONTENDED_MARK}': {marked} of these {len(rows)} records were timed while other work wanted "
            f"their CPUs (at least {RULE.tick_share_min:.0%} of iterations lasted a scheduler tick or longer, and other "
            f"processes used {RULE.foreign_cpu_share_min:.0%} of the host's CPUs or more; in a record without that "
            f"evidence, CPU pressure reached PSI some {RULE.psi_some_share_min:.0%} or {RULE.load_per_cpu_min:g} "
            "runnable tasks per CPU): their figures hold the scheduler's waits as well as the case's time."]


def _reader(column: Column, resolved: Column, figures: Sequence[str]):
    """How one family column reads a frame row: a figure or statistic from its frame column, a
    descriptor (size, transport) by the family's own function on the row's params."""
    if column.figure is not None:
        return lambda row: figure_text(row, column.figure, column.fmt, column.scale)
    return lambda row: resolved.render(RowRecord(row, figures))


def _rows(df) -> list[dict]:
    return df.to_dict("records")


def _figures(df) -> list[str]:
    return list(df.attrs.get("figures", {}))


def family_table(df, family: Optional[Family]) -> TextTable:
    """One run's records of one family (not imports), one row per case, the family's columns."""
    rows = _rows(df)
    figures = _figures(df)
    columns = family.table_columns() if family is not None else []
    if columns:
        readers = [_reader(c, r, figures) for c, r in zip(family.columns, columns)]
        return TextTable([c.header for c in columns] + ["status"],
                         [[read(row) for read in readers] + [status_text(row)] for row in rows],
                         notes=unverified_notes(rows) + contention_notes(rows))
    # No family declaration to read columns from: the case, its statistics and up to six figures.
    names = sorted(f for f in figures if df[f].notna().any())[:6]
    return TextTable(["case", "status", "n", "p50 (us)", "p99 (us)", "mean (us)", *names],
                     [[row["case_id"], status_text(row), *_stat_cells(row), *(figure_text(row, m) for m in names)]
                      for row in rows], notes=unverified_notes(rows) + contention_notes(rows))


def _stat_cells(row: Mapping[str, Any]) -> list[str]:
    if not row["n_samples"]:
        return [MISSING] * 4
    return [str(row["n_samples"]), *(figure_text(row, s, "{:.2f}") for s in ("p50_us", "p99_us", "mean_us"))]


# ---- nccl-tests imports ---------------------------------------------------------------------

NCCL_SIDES = tuple((side, side.replace("_", "-")) for side in FRAME_SIDES)  # (frame name, nccl-tests' header)


def nccl_time_text(row: Mapping[str, Any], side: str) -> str:
    """A side's time as nccl-tests printed it: the text's own digits (127.0, 5871.07, 12646); a JSON
    import's full-precision time to two decimals, as the text table of those versions prints it."""
    col = f"{NCCL_PREFIX}{side}."
    us, printed = row.get(col + "time_us"), row.get(col + "time_printed")
    if _missing(us):
        return MISSING
    return f"{float(us):.2f}" if _missing(printed) else str(printed)


def _side_cells(row: Mapping[str, Any], side: str) -> list[str]:
    col = f"{NCCL_PREFIX}{side}."
    if _missing(row.get(col + "time_us")):  # the output has no such side
        return [MISSING] * 4
    if row.get(NCCL_PREFIX + "check") == "error":
        error = row.get(col + "max_error")
        check = "N/A" if _missing(error) else f"{float(error):.0e}"
    else:
        wrong = row.get(col + "wrong")
        check = "N/A" if _missing(wrong) else str(int(wrong))
    # algbw and busbw as nccl-tests prints them (%6.2f): a rounded 0.00 stays 0.00, never a value
    return [nccl_time_text(row, side), f"{float(row[col + 'algbw_gbps']):.2f}",
            f"{float(row[col + 'busbw_gbps']):.2f}", check]


def _nccl_case_cells(row: Mapping[str, Any]) -> list[str]:
    redop, root = row.get(NCCL_PREFIX + "redop"), row.get(NCCL_PREFIX + "root")
    return [format_size(int(row["param.size_bytes"])), str(row[NCCL_PREFIX + "count"]), str(row[NCCL_PREFIX + "type"]),
            MISSING if _missing(redop) else (redop or "(empty)"), MISSING if _missing(root) else str(int(root))]


NCCL_CASE_HEADERS = ("size", "count", "type", "redop", "root")


def _percentiles(row: Mapping[str, Any]) -> str:
    if row["mean_only"]:
        return MEAN_ONLY
    return f"{figure_text(row, 'p50_us', '{:.2f}')} / {figure_text(row, 'p99_us', '{:.2f}')}"


def imported_tables(df) -> list[TextTable]:
    """The imported rows of one run as nccl-tests printed them, one table per source file:
    size, count, type, redop, root, then time, algbw, busbw and #wrong (or the old error column)
    out-of-place and in-place, then what the record holds of percentiles, and the status."""
    tables: list[TextTable] = []
    if IMPORT_FILE not in df:
        return tables
    for _, part in df[df[IMPORT_FILE].notna()].groupby(IMPORT_FILE, sort=False):
        rows = _rows(part)
        check = "error" if any(r[NCCL_PREFIX + "check"] == "error" for r in rows) else "#wrong"
        iters = rows[0][NCCL_PREFIX + "iters"]
        held = f"mean of {iters} iterations per row" if rows[0]["mean_only"] else "per-iteration samples"
        headers = [*NCCL_CASE_HEADERS]
        for _, place in NCCL_SIDES:
            headers += [f"{h}\n{place}" for h in ("time (us)", "algbw (GB/s)", "busbw (GB/s)", check)]
        tables.append(TextTable(
            headers + ["p50 / p99 (us)", "status"],
            [[*_nccl_case_cells(r), *(c for side, _ in NCCL_SIDES for c in _side_cells(r, side)),
              _percentiles(r), r["label"]] for r in rows],
            title=f"{rows[0][IMPORT_FILE]} — nccl-tests {rows[0][NCCL_PREFIX + 'collective']}, "
                  f"{ranks_text(int(rows[0]['world']))}, imported ({held})",
            source=rows[0][IMPORT_FILE]))
    return tables


# ---- several runs side by side --------------------------------------------------------------

@dataclass(frozen=True)
class Compared:
    """One figure compared across runs: its header, how to read it off a row, which way is better."""

    header: str
    name: str  # figure or sample statistic, as figure_text reads it
    better: str
    fmt: str = "{:.4g}"
    scale: float = 1.0
    text: Any = None  # row -> text, where the figure is shown otherwise (nccl-tests' printed time)

    def cell(self, row: Mapping[str, Any]) -> str:
        if self.text is not None:
            return self.text(row)
        text = figure_text(row, self.name, self.fmt, self.scale)
        value = self.value(row)
        if value and _significant_digits(text) < 3 and not self.name.startswith(NCCL_PREFIX):
            # a small figure its table format leaves one or two digits of (busbw 0.008, 67%): three, so
            # the ratio beside it can be checked by hand; nccl-tests figures stay as the log printed them
            return f"{value * 100:#.3g}%" if text.endswith("%") else f"{value:#.3g}"
        return text

    def value(self, row: Mapping[str, Any]) -> Optional[float]:
        """The number a ratio is taken of, or None where the cell shows none (unsupported too)."""
        cell = figure_text(row, self.name)
        if cell in (MISSING, MEAN_ONLY, N_TOO_SMALL) or is_unverified(row, self.name):
            return None
        return float(row[frame_column(self.name)]) * self.scale


def _significant_digits(text: str) -> int:
    """Significant digits of a printed number ("0.008" 1, "67%" 2, "127.0" 4); 0 for none."""
    mantissa = text.split("e")[0]
    return len("".join(ch for ch in mantissa if ch.isdigit()).lstrip("0"))


def _headline(family: Optional[Family], name: str) -> Compared:
    figure = family.figure(name) if family is not None else None
    column = next((c for c in (family.columns if family else ()) if c.figure == name), None)
    if column is not None:
        header = dict(zip((c.figure for c in family.columns), (c.header for c in family.table_columns())))[name]
        return Compared(header, name, figure.better, column.fmt, column.scale)
    if figure is None:
        return Compared(name, name, "neither")
    return Compared(name + SOURCE_MARKS[figure.source], name, figure.better)


# nccl-tests' own figures, compared side by side for imports: both sides' time and busbw.
def _nccl_compared() -> list[Compared]:
    out = []
    for side, place in NCCL_SIDES:
        out += [Compared(f"time (us) {place}", f"{NCCL_PREFIX}{side}.time_us", nccl_tests_better("time_us"),
                         text=lambda r, s=side: nccl_time_text(r, s)),
                Compared(f"busbw (GB/s) {place}", f"{NCCL_PREFIX}{side}.busbw_gbps", nccl_tests_better("busbw_gbps"),
                         "{:.2f}")]
    return out


def compared_figures(frames: Sequence[Any], family: Optional[Family]) -> list[Compared]:
    """What a comparison of one family shows per run: nccl-tests' time and busbw of both sides
    when every record is an import; else the median (the mean too where a run holds nccl-tests'
    means, which have no median) and the family's headline figures (``Figure(headline=True)``)."""
    rows = [r for df in frames for r in _rows(df)]
    if rows and all(not _missing(r.get(IMPORT_FILE)) for r in rows):
        return _nccl_compared()
    mean_only = [bool(r["mean_only"]) for r in rows]
    center = [] if all(mean_only) else [Compared("p50 (us)", "p50_us", SAMPLE_BETTER, "{:.2f}")]
    if any(mean_only):
        center.append(Compared("mean (us)", "mean_us", SAMPLE_BETTER, "{:.2f}"))
    present = {f for df in frames for f in _figures(df) if f in df and df[f].notna().any()}
    heads = [f.name for f in (family.figures if family else ()) if f.headline and f.name in present]
    return center + [_headline(family, name) for name in heads]


def _ratio(base: Optional[float], other: Optional[float], base_row, other_row, fig: Compared) -> str:
    if base_row is None or other_row is None:
        return MISSING
    if _definition(base_row) != _definition(other_row):
        return DEFINITION_RATIO
    if N_TOO_SMALL in (figure_text(base_row, fig.name), figure_text(other_row, fig.name)):
        return N_TOO_SMALL
    if is_unverified(base_row, fig.name) or is_unverified(other_row, fig.name):
        return UNVERIFIED_RATIO
    if base is None or other is None:
        return MISSING
    if base == 0 or other == 0:
        return ZERO_RATIO
    if fig.name.startswith(NCCL_PREFIX) and min(_significant_digits(fig.cell(r)) for r in (base_row, other_row)) < 3:
        # 0.01 / 0.01 GB/s reads 1.00 beside a time ratio of 1.31: a printed figure this coarse
        # holds no ratio (the time beside it, printed to 4 digits, does)
        return ROUNDED_RATIO
    return f"{other / base:#.3g}"


def _definition(row: Mapping[str, Any]) -> tuple:
    return tuple(_py(row.get(name)) for name in CHECKED_FIELDS)


def _by_case(df, label: str) -> dict:
    counts = df["case_id"].value_counts()
    twice = sorted(counts[counts > 1].index)
    if twice:
        raise ResultsFileError(f"{label}: case {twice[0]} is recorded {counts[twice[0]]} times; a comparison pairs "
                               "one record per case and run (compare the runs it came from instead)")
    return {row["case_id"]: row for row in _rows(df)}


def comparison_table(frames: Sequence[Any], labels: Sequence[str], family: Optional[Family]) -> TextTable:
    """The records of one family in several runs (``frames``, one per run, labelled), one row per
    case ID present in any run, in the first run's order and then each later run's new cases."""
    import pandas as pd  # 0.4 s: paid where a frame is built, not by every command that imports tables

    by_run = [_by_case(df, label) for df, label in zip(frames, labels)]
    tags = run_tags(labels)
    order = list(pd.Index([c for df in frames for c in df["case_id"]]).drop_duplicates())
    figures = compared_figures(frames, family)
    imported = figures and figures[0].name.startswith(NCCL_PREFIX)
    headers = list(NCCL_CASE_HEADERS) if imported else ["case"]
    for fig in figures:
        headers += [f"{fig.header} {tag}" for tag in tags]
        headers += [f"{fig.header} {tag} / {tags[0]}" for tag in tags[1:]]
    headers += [f"status {tag}" for tag in tags]
    firsts = {case: next(run[case] for run in by_run if case in run) for case in order}
    labels_by_case, shared = _case_labels(firsts)
    rows = []
    for case in order:
        present = [run.get(case) for run in by_run]
        first = next(r for r in present if r is not None)
        cells = _nccl_case_cells(first) if imported else [labels_by_case[case]]
        for fig in figures:
            cells += [MISSING if r is None else fig.cell(r) for r in present]
            values = [None if r is None else fig.value(r) for r in present]
            cells += [_ratio(values[0], v, present[0], r, fig) for v, r in zip(values[1:], present[1:])]
        cells += [MISSING if r is None else status_text(r, flags=True) for r in present]
        rows.append(cells)
    compared = [r for run in by_run for r in run.values()]
    notes = _comparison_notes(order, by_run, labels, tags, figures) + unverified_notes(compared) + contention_notes(
        compared)
    if shared and not imported:
        notes.append("Every case here has " + ", ".join(f"{k}={v}" for k, v in shared.items()) + ".")
    return TextTable(headers, rows, notes=notes)


def _case_labels(rows: Mapping[str, Mapping[str, Any]]) -> tuple[dict, dict]:
    """Each case named by the parameters that tell it from the others in the table, and the
    parameters every case shares (said once, in a note): a case ID of six parameters in every row
    made each row wrap over three lines."""
    params = {case: row_params(row) for case, row in rows.items()}
    keys = sorted({k for p in params.values() for k in p})
    shared = {k: params[next(iter(params))][k] for k in keys
              if len({repr(p.get(k, MISSING)) for p in params.values()}) == 1} if len(params) > 1 else {}
    labels = {case: ",".join(f"{k}={v}" for k, v in sorted(p.items()) if k not in shared) or case.split("/", 1)[-1]
              for case, p in params.items()}
    if len(set(labels.values())) < len(labels):  # params the frame lacks: fall back to the IDs
        return {case: case.split("/", 1)[-1] for case in rows}, {}
    return labels, shared


SHORT_LABEL = 16  # longer labels (run IDs) make every header wrap: the columns then say "run k"


def run_tags(labels: Sequence[str]) -> list[str]:
    """How a comparison's headers name each run: its label, or "run k" when a label is long."""
    if all(len(label) <= SHORT_LABEL for label in labels) and len(set(labels)) == len(labels):
        return list(labels)
    return [f"run {k}" for k in range(1, len(labels) + 1)]


def _comparison_notes(order, by_run, labels, tags, figures) -> list[str]:
    directions = "; ".join(f"{f.header}: {f.better} is better" for f in figures if f.better != "neither")
    named = "" if tags == list(labels) else " (" + "; ".join(f"{t}: {label}" for t, label in zip(tags, labels)) + ")"
    nccl = any(f.name.startswith(NCCL_PREFIX) for f in figures)
    notes = [f"One row per case ID in any run{named}. Ratio columns are each run / {tags[0]} (the first run): "
             "above 1 means that run's figure is larger" + (f" ({directions})" if directions else "") + ". "
             f"No ratio of a percentile the samples do not support ({N_TOO_SMALL}), nor of a figure that is 0 "
             f"on either side ({ZERO_RATIO}" + (": nccl-tests prints bandwidths below 0.005 GB/s as 0.00" if nccl else "")
             + (f"), nor of a figure nccl-tests printed with fewer than 3 significant digits ({ROUNDED_RATIO}"
                if nccl else "") + ")."]
    empty = [tag for tag, run in zip(tags, by_run) if not run]
    if empty:
        notes.append(f"No records of this family in {', '.join(empty)}: its columns read -.")
    absent = [f"{tag} lacks {n} of the {len(order)} cases" for tag, run in zip(tags, by_run)
              if run and (n := sum(case not in run for case in order))]
    if absent:
        notes.append("A case not in a run reads - in that run's columns: " + "; ".join(absent) + ".")
    for tag, run in zip(tags[1:], by_run[1:]):
        if run and by_run[0] and not set(run) & set(by_run[0]):
            notes.append(f"{tag} shares no case with {tags[0]}: {_how_they_differ(by_run[0], run)}. Cases are "
                         "paired on every parameter, none is assumed equal; to compare across them, read the "
                         "rows of each run (or re-run one side with the other's parameters).")
    differ = [f"{case.split('/', 1)[-1]} ({tag}: " + ", ".join(
                  f"{name} {_py(base.get(name))!r} vs {_py(row.get(name))!r}" for name in CHECKED_FIELDS
                  if _py(base.get(name)) != _py(row.get(name))) + ")"
              for case in order for tag, run in zip(tags[1:], by_run[1:])
              if (base := by_run[0].get(case)) is not None and (row := run.get(case)) is not None
              and _definition(base) != _definition(row)]
    if differ:
        notes.append(f"{DEFINITION_RATIO}: {len(differ)} case(s) were measured under different definitions (family "
                     "version, timer or reduction) and are not compared: " + "; ".join(differ[:3])
                     + ("; ..." if len(differ) > 3 else "") + ".")
    flagged = [f"{case.split('/', 1)[-1]} ({tag}: {row['flags']})" for case in order
               for tag, run in zip(tags, by_run) if (row := run.get(case)) is not None and not _missing(row.get("flags"))]
    if flagged:
        notes.append(f"Status '{FLAGGED}': the family flags the record's figures as distorted, so its ratios are "
                     "not a comparison of the case: " + "; ".join(flagged) + ".")
    return notes


def _how_they_differ(base: Mapping[str, Mapping], other: Mapping[str, Mapping]) -> str:
    """The parameters whose values never overlap between two runs' cases (world 16 vs 8)."""
    def values(run, key):
        return {str(_py(row.get(key))) for row in run.values() if not _missing(row.get(key))}

    # world is a column of its own and, in most families, a parameter too: named once
    keys = sorted({k for run in (base, other) for row in run.values() for k in row if k.startswith(PARAM_PREFIX)})
    if PARAM_PREFIX + "world" not in keys:
        keys.append("world")
    apart = [k for k in keys if values(base, k) and values(other, k) and not values(base, k) & values(other, k)]
    if not apart:
        return "no single parameter keeps them apart"
    def listed(found: set) -> str:
        ordered = sorted(found, key=lambda v: (0, float(v), v) if _number(v) else (1, 0.0, v))
        return ", ".join(ordered[:4]) + (f", ... ({len(ordered)} values)" if len(ordered) > 4 else "")

    return "; ".join(f"{k.removeprefix(PARAM_PREFIX)} {listed(values(base, k))} vs {listed(values(other, k))}"
                     for k in apart)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def split_imports(df):
    """(measured rows, imported rows) of a frame: imports are shown as nccl-tests printed them."""
    if IMPORT_FILE not in df:
        return df, df.iloc[0:0]
    imported = df[IMPORT_FILE].notna()
    return df[~imported], df[imported]
