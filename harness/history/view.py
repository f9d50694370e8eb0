"""History from asv results across commits: each tracked figure over commits, with the article's
figure drawn as a reference line where a claim applies, so a regression and the distance to the
published figure are seen together.

Results are read from ``.asv/results`` by ``harness.history.asvfiles``, within bounds, each field
checked; a file that is not asv's is skipped, named on stderr, and counted in the report.
A tracked figure is an asv ``track_<statistic>`` benchmark parameterised by case ID (the suite in
``benchmarks/``). A claim applies when it is a bound on the same statistic of the same family and
its parameters are a subset of the case's.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from harness.claims.baselines import Claim
from harness.core.figures import TIME_SCALE, sample_parts
from harness.core.inputfile import InputFileError
from harness.core.plotting import legend, png_bytes, subplots
from harness.document.blocks import Block, Heading, Image, Para, Table
from harness.history.asvfiles import (
    AsvDirectoryError,
    AsvFileError,
    Skipped,
    benchmark_units,
    figure_name,
    read_results,
    warn_skipped,
)

MAX_LINES_PER_PLOT = 8
# The skipped files a report names (all are counted, and all named on stderr).
MAX_SKIPPED_SHOWN = 10


class HistoryError(ValueError):
    """An asv results directory that cannot be read."""


@dataclass(frozen=True)
class Point:
    commit: str
    date_ms: int
    value: float


@dataclass(frozen=True)
class Reference:
    claim_id: str
    value: float  # in the tracked figure's unit
    text: str


@dataclass
class Series:
    machine: str
    benchmark: str  # e.g. bench_families.Allreduce.track_p50_us
    case_id: str
    points: list[Point]
    reference: Optional[Reference] = None
    version: str = ""  # the benchmark's asv version (the family's definition): a new one restarts history
    unit: str = ""  # as asv's benchmarks.json gives it ("GB/s", "fraction (simulated)")

    @property
    def statistic(self) -> str:
        return figure_name(self.benchmark)


def _case_params(case_id: str) -> tuple[str, dict]:
    family, _, body = case_id.partition("/")
    params: dict = {}
    for item in filter(None, body.split(",")):
        key, _, text = item.partition("=")
        for cast in (int, float):
            try:
                params[key] = cast(text)
                break
            except ValueError:
                continue
        else:
            params[key] = text
    return family, params


def reference_for(series: Series, claims: Sequence[Claim]) -> Optional[Reference]:
    family, params = _case_params(series.case_id)
    tracked = sample_parts(series.statistic)  # ("p99", "us"): the statistic and its time unit
    for claim in claims:
        m = claim.measure
        if m.status == "not_measurable" or m.compare != "bound" or m.family != family or not m.statistic:
            continue
        if any(params.get(k) != v for k, v in m.select.items() if not isinstance(v, list)):
            continue
        target = claim.value if claim.value is not None else claim.after
        wanted = sample_parts(m.statistic)
        if tracked and wanted and tracked[0] == wanted[0]:
            value = target * TIME_SCALE[wanted[1]] / TIME_SCALE[tracked[1]]
        elif m.statistic == series.statistic:
            value = target
        else:
            continue
        return Reference(claim.id, value, f"{claim.id} ({claim.article_file}): {claim.article_figure}")
    return None


def _units(results_dir: Path, skipped: list) -> dict[str, str]:
    """benchmark name -> unit, from the benchmarks.json asv writes beside its results: none when it
    is absent, and none, the file counted as skipped, when it is not asv's."""
    path = results_dir / "benchmarks.json"
    try:
        return benchmark_units(path)
    except (AsvFileError, InputFileError) as exc:
        if path.exists() or path.is_symlink():
            skipped.append(Skipped(path, f"{exc} (the figures are shown without their units)"))
        return {}


def load_history(results_dir: Path, skipped: Optional[list] = None) -> list[Series]:
    """One series per machine, tracked figure, case and definition version: a case's points under
    another version of its family are another series, never joined to the first (asv's rule).
    A file that is not asv's is left out and appended to ``skipped``."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise HistoryError(f"{results_dir}: no asv results directory (run `critpath history A..B` or `asv run` "
                           "first; see docs/history.md)")
    try:
        files = read_results(results_dir)
    except AsvDirectoryError as exc:
        raise HistoryError(str(exc)) from None
    left_out = files.skipped
    by_key: dict[tuple, list[Point]] = defaultdict(list)
    for result in files.results:
        for figure in result.figures:
            if figure.value is not None:  # a failed case is missing, never zero
                by_key[(result.machine, figure.benchmark, figure.case_id, figure.version)].append(
                    Point(result.commit, result.date_ms, figure.value))
    units = _units(results_dir, left_out)
    if skipped is not None:
        skipped += left_out
    series = [Series(m, k, c, sorted(pts, key=lambda p: (p.date_ms, p.commit)), version=v, unit=units.get(k, ""))
              for (m, k, c, v), pts in by_key.items()]
    if not series:
        also = f" ({skipped_count(left_out)} skipped, each named with why)" if left_out else ""
        raise HistoryError(f"{results_dir}: no asv track_* results found{also}")
    return sorted(series, key=lambda s: (s.machine, s.benchmark, s.case_id, s.points[0].date_ms))


def _date(ms: int) -> str:
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).strftime("%Y-%m-%d")


# A history plot's name: this prefix, then its machine and benchmark as letters, digits and "_".
HISTORY_PLOT_PREFIX = "history_"
_HISTORY_PLOT = re.compile(re.escape(HISTORY_PLOT_PREFIX) + r"[A-Za-z0-9_]+")


def is_history_plot(name: str) -> bool:
    """``name`` is one a history plot is given (a report's plots/NAME.png)."""
    return _HISTORY_PLOT.fullmatch(name) is not None


def _plot(machine: str, benchmark: str, group: list[Series]) -> Image:
    fig, ax = subplots((7, 4))
    commits = sorted({(p.date_ms, p.commit) for s in group for p in s.points})
    x_of = {c: i for i, (_, c) in enumerate(commits)}
    cases = sorted({s.case_id for s in group}, key=lambda c: _priority([s for s in group if s.case_id == c]))
    shown = set(cases[:MAX_LINES_PER_PLOT])
    colour: dict[str, str] = {}
    for s in group:
        if s.case_id not in shown:
            continue
        first = s.case_id not in colour
        line, = ax.plot([x_of[p.commit] for p in s.points], [p.value for p in s.points], marker="o", markersize=3,
                        color=colour.get(s.case_id), label=s.case_id.split("/", 1)[1] if first else None)
        colour.setdefault(s.case_id, line.get_color())
    # One line per article figure, however many cases it applies to.
    for claim_id, value in sorted({(s.reference.claim_id, s.reference.value) for s in group
                                   if s.reference is not None and s.case_id in shown}):
        ax.axhline(value, color="black", linestyle="--", linewidth=1, label=f"article {claim_id}: {value:.4g}")
    # A new definition version restarts the family's history: mark where, never join across it.
    for version, x in sorted(resets(group).items(), key=lambda kv: kv[1]):
        ax.axvline(x_of[x] - 0.5, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"history reset: {version}", (x_of[x] - 0.5, 1.0), xycoords=("data", "axes fraction"),
                    fontsize=7, rotation=90, va="top", ha="right", color="grey")
    values = [p.value for s in group if s.case_id in shown for p in s.points]
    if values and min(values) > 0 and max(values) / min(values) > 50:
        ax.set_yscale("log")  # sizes from 8 B to MBs: a linear axis flattens all but the largest
    ax.set_title(f"{benchmark.split('.', 1)[-1]}: " + (f"{len(shown)} of {len(cases)} cases, those with an article "
                 "figure first, then those that moved most" if len(cases) > len(shown) else f"{len(cases)} cases"),
                 fontsize=9)
    ax.set_xticks(range(len(commits)), [c[:8] for _, c in commits], rotation=45, fontsize=7)
    ax.set_xlabel("commit (by date)")
    unit = group[0].unit
    ax.set_ylabel(figure_name(benchmark) + (f" ({unit})" if unit else ""))
    ax.grid(True, alpha=0.3)
    legend(ax)
    name = plot_name(machine, benchmark)
    hidden = len(cases) - len(shown)
    caption = f"{hidden} more cases in the table" if hidden else ""
    return Image(name, f"{benchmark} over commits ({machine})", png_bytes(fig), caption)


# The most characters of a history plot's name (plots/<name>.png): far under a file name's 255 bytes,
# and a name a reader can still take in.
MAX_PLOT_NAME_CHARS = 120
_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")
_DIGEST_CHARS = 10


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:_DIGEST_CHARS]


def plot_name(machine: str, benchmark: str) -> str:
    """The file name (no suffix) of one machine's plot of one benchmark, one per pair: asv's dotted
    benchmark name reads with its dots as underscores (its parts are Python names), and a machine
    name the file name cannot hold as it is (``m.1``, ``m-1``) or one cut to MAX_PLOT_NAME_CHARS
    carries a short digest of what it was, so that no two machines' plots share a file."""
    safe_machine = _UNSAFE.sub("_", machine).strip("_") or "machine"
    if safe_machine != machine:
        safe_machine += "_" + _digest(machine)
    safe_benchmark = benchmark.replace(".", "_")
    if _UNSAFE.search(safe_benchmark):
        safe_benchmark = _UNSAFE.sub("_", safe_benchmark).strip("_") + "_" + _digest(benchmark)
    name = f"{HISTORY_PLOT_PREFIX}{safe_machine}_{safe_benchmark}"
    if len(name) > MAX_PLOT_NAME_CHARS:
        whole = _digest(f"{machine}\n{benchmark}")
        name = f"{name[:MAX_PLOT_NAME_CHARS - _DIGEST_CHARS - 1]}_{whole}"
    return name


def _priority(case_series: list[Series]) -> tuple:
    """Which cases a crowded plot shows: those an article figure applies to, then those whose
    figure moved most from their first commit to their last (as a ratio)."""
    points = sorted((p for s in case_series for p in s.points), key=lambda p: p.date_ms)
    first, last = points[0].value, points[-1].value
    moved = abs(math.log(last / first)) if first > 0 and last > 0 else 0.0
    return (all(s.reference is None for s in case_series), -moved, _natural(case_series[0].case_id))


def resets(group: list[Series]) -> dict[str, str]:
    """version -> the commit its history starts at, for every version after the oldest."""
    starts: dict[str, tuple[int, str]] = {}
    for s in group:
        first = (s.points[0].date_ms, s.points[0].commit)
        starts[s.version] = min(starts.get(s.version, first), first)
    ordered = sorted(starts.items(), key=lambda kv: kv[1])
    return {version: start[1] for version, start in ordered[1:]}


def _natural(text: str) -> tuple:
    """Case IDs in numeric order of their sizes (size_bytes=128 before 1024)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def skipped_count(skipped: Sequence[Skipped]) -> str:
    """"3 files", "1 file and 2 rows": what was left out of a history, whole files and rows apart."""
    rows = sum(1 for item in skipped if item.row)
    parts = [f"{n} {what}{'' if n == 1 else 's'}" for n, what in ((len(skipped) - rows, "file"), (rows, "row")) if n]
    return " and ".join(parts)


def _skipped_para(skipped: list[Skipped]) -> Para:
    shown = "; ".join(item.message for item in skipped[:MAX_SKIPPED_SHOWN])
    more = f"; and {len(skipped) - MAX_SKIPPED_SHOWN} more" if len(skipped) > MAX_SKIPPED_SHOWN else ""
    return Para(f"{skipped_count(skipped)} of the results directory skipped, each for the reason given: nothing "
                f"of theirs is shown (each is named on stderr too): {shown}{more}.")


def history_blocks(results_dir: Path, claims: Sequence[Claim]) -> list[Block]:
    skipped: list[Skipped] = []
    try:
        loaded = load_history(results_dir, skipped)
    finally:
        warn_skipped("report", skipped)
    series = sorted(loaded, key=lambda s: (s.machine, s.benchmark, _natural(s.case_id)))
    for s in series:
        s.reference = reference_for(s, claims)
    groups: dict[tuple, list[Series]] = defaultdict(list)
    for s in series:
        groups[(s.machine, s.benchmark)].append(s)
    commits = {p.commit for s in series for p in s.points}
    blocks: list[Block] = [Heading(2, "History (asv results)"), Para(
        f"{len(groups)} tracked figures ({len(series)} case series) over {len(commits)} commits, from {results_dir}. "
        "One plot per figure, each case over commits; a dashed line is the article's figure where a claim applies. "
        "The table after the plots lists every series with its latest value and its ratio to the article.")]
    if skipped:
        blocks.append(_skipped_para(skipped))
    blocks += [_plot(machine, benchmark, group) for (machine, benchmark), group in groups.items()]
    rows = []
    for s in series:
        last = s.points[-1]
        prev = s.points[-2] if len(s.points) > 1 else None
        change = f"x{last.value / prev.value:.3g}" if prev and prev.value else "-"
        ref = s.reference
        rows.append([s.machine, s.benchmark.rsplit(".", 2)[-2] + "." + s.statistic, s.case_id, s.version or "-",
                     str(len(s.points)), f"{last.commit[:8]} ({_date(last.date_ms)})",
                     f"{last.value:.4g}" + (f" {s.unit}" if s.unit else ""), change,
                     ref.text if ref else "-", f"{last.value / ref.value:.3g}" if ref and ref.value else "-"])
    blocks.append(Heading(3, "Every series"))
    blocks.append(Table(["machine", "figure", "case", "definition", "commits", "latest", "value", "vs previous",
                         "article", "latest / article"], rows))
    return blocks
