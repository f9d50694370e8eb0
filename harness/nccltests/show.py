"""``critpath show`` for records imported from nccl-tests: what goes under the table (built from
the frame by harness.tables.family): what the record can and cannot give (a mean, no percentiles),
the collective's evidence and the trailer's values with their check against the rows."""
from __future__ import annotations

from typing import Any, Mapping

from harness.core.figures import is_mean_only
from harness.nccltests.evidence import FOUND, ranks_text


def imported(record: Any) -> dict:
    """The record's ``extra.imported`` block, or {} for a record critpath measured."""
    extra = getattr(record, "extra", None)
    block = extra.get("imported") if isinstance(extra, Mapping) else None
    return block if isinstance(block, Mapping) else {}


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
    lines += list(trailer.get("lines", []))  # NCCL's last error message among them
    lines += [f"DISAGREES: {p}" for p in trailer.get("problems", [])]
    return lines + _failed(trailer)


def _failed(trailer: Mapping) -> list[str]:
    return [f"FAILED: {f}" for f in trailer.get("failed", [])]


def imported_alerts(records: list) -> list[str]:
    """What a report must say beside an import's table, whose other notes it leaves to ``critpath
    show``: nccl-tests' own failed check, and NCCL's last error message; [] where there is none."""
    trailer = (imported(records[0]).get("trailer") or {}) if records else {}
    return _failed(trailer) + [f"NCCL's last error message (-J errors): {e}" for e in trailer.get("nccl_errors", [])]
