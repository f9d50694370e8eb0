"""Terminal tables (rich): one per family, with the family's own columns after the case status."""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from rich.console import Console
from rich.table import Table

from harness import registry
from harness.records import Record


def _status(record: Record) -> str:
    colour = "green" if record.ok else "red"
    return f"[{colour}]{record.label}[/{colour}]"


def family_table(family_name: str, records: list[Record]) -> Table:
    family = registry.FAMILIES.get(family_name)
    columns = family.table_columns() if family else []
    table = Table(title=f"{family_name}" + (f" — {family.description}" if family else ""), title_justify="left")
    if not columns:
        table.add_column("case")
    for column in columns:
        table.add_column(column.header, justify="right")
    table.add_column("status")
    for record in records:
        cells = [c.render(record) for c in columns] if columns else [record.case_id]
        table.add_row(*cells, _status(record))
    return table


def wide_console() -> Console:
    # rich falls back to 80 columns off a terminal; CI logs should keep every column readable.
    probe = Console()
    return probe if probe.is_terminal else Console(width=200)


def _unverified(name: str, group: list[Record], console: Console) -> None:
    """Figures read but not recomputed (harness.verify): say how many and why, once per reason."""
    reasons: dict[str, int] = defaultdict(int)
    for record in group:
        for why in set(record.unverifiable.values()):
            reasons[why] += 1
    for why, count in reasons.items():
        console.print(f"{name}: figures of {count} of {len(group)} records not verified: {why}",
                      markup=False, highlight=False, style="yellow")


def print_tables(records: Iterable[Record], console: Console | None = None) -> None:
    from harness.nccltests_show import imported, print_imported

    console = console or wide_console()
    by_family: dict[str, list[Record]] = defaultdict(list)
    imports: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        # An import is shown as its source printed it (both sides, its trailer), not in the family's
        # columns, which may read percentiles that a mean-only record does not have.
        (imports if imported(record) else by_family)[record.family].append(record)
    if imports:
        print_imported([r for group in imports.values() for r in group], console)
        for name, group in imports.items():
            _unverified(name, group, console)
    for name, group in by_family.items():
        console.print(family_table(name, group))
        for record in group:
            if record.error is not None:
                # Error text comes from exceptions (gloo prints [file:line]); never parse it as markup.
                console.print(f"{record.case_id}: {record.status}: {record.error.kind}: {record.error.message}",
                              markup=False, highlight=False, style="red")
        _unverified(name, group, console)
