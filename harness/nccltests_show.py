"""``critpath show`` for records imported from nccl-tests: the table as nccl-tests printed it
(both sides, #wrong per side), what the record can and cannot give (a mean, no percentiles),
the collective's evidence and the trailer's values with their check against the rows."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping

from rich.console import Console
from rich.table import Table

from harness.figures import FigureUnavailable, is_mean_only
from harness.figures import value as figure_value
from harness.nccltests_evidence import FOUND, ranks_text
from harness.sizes import format_size


def imported(record: Any) -> dict:
    """The record's ``extra.imported`` block, or {} for a record critpath measured."""
    extra = getattr(record, "extra", None)
    block = extra.get("imported") if isinstance(extra, Mapping) else None
    return block if isinstance(block, Mapping) else {}


def _figure(side: Any, key: str, fmt: str = "{:.2f}") -> str:
    if not isinstance(side, Mapping) or side.get(key) is None:
        return "-"
    return fmt.format(side[key])


def _check(side: Any) -> str:
    if not isinstance(side, Mapping):
        return "-"
    if "max_error" in side:  # before nccl-tests 2.13: the largest deviation, not a count
        return "N/A" if side["max_error"] is None else f"{side['max_error']:.0e}"
    return "N/A" if side.get("wrong") is None else str(side["wrong"])


def _percentiles(record: Any) -> str:
    if is_mean_only(record):
        return "mean only"
    try:
        return f"{figure_value(record, 'p50_us'):.2f} / {figure_value(record, 'p99_us'):.2f}"
    except FigureUnavailable:
        return "-"


def imported_table(records: list) -> Table:
    first = imported(records[0])
    old = any("max_error" in (imported(r).get("in_place") or imported(r).get("out_of_place") or {}) for r in records)
    check = "error" if old else "#wrong"
    mean = "mean of {} iterations per row".format(first.get("iters", "?")) if is_mean_only(records[0]) \
        else "per-iteration samples"
    table = Table(title=f"{first.get('file')} — nccl-tests {first.get('collective')}, {ranks_text(first.get('ranks', 0))}, "
                        f"imported ({mean})", title_justify="left")
    for header in ("size", "count", "type", "redop", "root"):
        table.add_column(header, justify="right")
    for place in ("out-of-place", "in-place"):
        for header in ("time (us)", "algbw (GB/s)", "busbw (GB/s)", check):
            table.add_column(f"{header}\n{place}", justify="right")
    table.add_column("p50 / p99 (us)", justify="right")
    table.add_column("status")
    for record in records:
        block = imported(record)
        cells = [format_size(record.params.get("size_bytes", 0)), str(block.get("count", "-")),
                 str(block.get("type", "-")), "-" if block.get("redop") is None else (block["redop"] or "(empty)"),
                 "-" if block.get("root") is None else str(block["root"])]
        for name in ("out_of_place", "in_place"):
            side = block.get(name)
            cells += [_figure(side, "time_us"), _figure(side, "algbw_gbps"), _figure(side, "busbw_gbps"), _check(side)]
        colour = "green" if record.ok else "red"
        table.add_row(*cells, _percentiles(record), f"[{colour}]{record.label}[/{colour}]")
    return table


def imported_notes(records: list) -> list[str]:
    """What goes under the table: the collective and its evidence, what a mean-only record lacks,
    the trailer and its check against the rows."""
    first = imported(records[0])
    lines = [f"collective {first.get('collective')}, {FOUND.get(first.get('collective_from'), '?')}; "
             f"{ranks_text(first.get('ranks', 0))} from {first.get('ranks_from', '?')}"]
    lines += [f"  - {e}" for e in first.get("evidence", [])]
    if any(is_mean_only(r) for r in records):
        lines.append("percentiles: none. nccl-tests prints the mean over its iterations, so each record holds "
                     "that one mean: p50 and p99 are not known (mean only)")
    trailer = first.get("trailer") or {}
    lines += list(trailer.get("lines", []))
    lines += [f"DISAGREES: {p}" for p in trailer.get("problems", [])]
    return lines


def print_imported(records: Iterable, console: Console) -> None:
    by_file: dict = defaultdict(list)
    for record in records:
        by_file[(imported(record).get("file"), record.run_id)].append(record)
    for group in by_file.values():
        console.print(imported_table(group))
        for line in imported_notes(group):
            console.print(line, markup=False, highlight=False, style="red" if line.startswith("DISAGREES") else None)
