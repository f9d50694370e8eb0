"""Terminal tables (rich) of the rows harness.tables.family builds from the records frame, as the report shows them."""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Optional

from rich.table import Table
from rich.text import Text

from harness.core import registry
from harness.core.console import Console
from harness.core.escape import for_terminal
from harness.core.records import Record
from harness.nccltests.show import imported, imported_notes
from harness.tables.family import MISSING, TextTable, comparison_table, family_table, imported_tables, split_imports
from harness.tables.frame import frame_of


def rich_table(table: TextTable, title: str = "") -> Table:
    """A frame-derived table (harness.tables.family) for the terminal: status cells coloured."""
    out = Table(title=for_terminal(title or table.title) or None, title_justify="left")
    status = [i for i, h in enumerate(table.headers) if h == "status" or h.startswith("status ")]
    for i, header in enumerate(table.headers):
        # a case ID wraps rather than losing its tail (the parameters that tell two cases apart)
        out.add_column(for_terminal(header), justify="left" if i in status or header == "case" else "right",
                       overflow="fold")  # a number cut to "2684354…" reads like a value
    for row in table.rows:
        cells: list = [for_terminal(c) for c in row]
        for i in status:
            if row[i] != MISSING:
                # ok but marked (contended, flagged): the figures are there, and not the case's alone
                colour = "green" if row[i] == "ok" else "yellow" if row[i].startswith("ok, ") else "red"
                cells[i] = Text(cells[i], style=colour)
        out.add_row(*cells)
    return out


def _title(family_name: str) -> str:
    family = registry.FAMILIES.get(family_name)
    return family_name + (f" — {family.description}" if family else "")


def wide_console() -> Console:
    # rich falls back to 80 columns off a terminal; CI logs should keep every column readable.
    probe = Console()
    return probe if probe.is_terminal else Console(width=200)


def _unverified(name: str, group: list[Record], console: Console) -> None:
    """Figures read but not recomputed (harness.core.verify): say how many and why, once per reason."""
    reasons: dict[str, int] = defaultdict(int)
    for record in group:
        for why in set(record.unverifiable.values()):
            reasons[why] += 1
    for why, count in reasons.items():
        console.print(for_terminal(f"{name}: figures of {count} of {len(group)} records not verified: {why}"),
                      markup=False, highlight=False, style="yellow")


def print_tables(records: Iterable[Record], console: Console | None = None, frame=None) -> None:
    """One table per family, as the report builds it from the records frame; an import as its source
    printed it (both sides), then its evidence and trailer."""
    console = console or wide_console()
    records = list(records)
    df = frame_of(records) if frame is None else frame
    measured, imports = split_imports(df)
    for table in imported_tables(imports):
        group = [r for r in records if imported(r).get("file") == table.source]
        console.print(rich_table(table))
        for line in imported_notes(group):
            console.print(for_terminal(line), markup=False, highlight=False,
                          style="red" if line.startswith(("DISAGREES", "FAILED")) else None)
        _unverified(group[0].family, group, console)
    for name in measured["family"].drop_duplicates():
        console.print(rich_table(family_table(measured[measured["family"] == name], registry.FAMILIES.get(name)),
                                 _title(name)))
        _family_notes(name, [r for r in records if r.family == name and not imported(r)], console)


def _family_notes(name: str, group: list[Record], console: Console, prefix: str = "") -> None:
    """Each failed case's error, then the figures not verified, for one family's records."""
    for record in group:
        if record.error is not None:
            # Error text comes from exceptions (gloo prints [file:line]); never parse it as markup.
            console.print(for_terminal(f"{prefix}{record.case_id}: {record.status}: {record.error.kind}: "
                                       f"{record.error.message}"),
                          markup=False, highlight=False, style="red")
    _unverified(prefix + name, group, console)


def print_comparison(frames: list, labels: list[str], console: Console | None = None,
                     records: Optional[list[list[Record]]] = None) -> None:
    """Several runs side by side, one table per family, as the report's comparison; with each
    run's ``records``, every failed case's error and the figures not verified, per run."""
    console = console or wide_console()
    names = list(dict.fromkeys(name for df in frames for name in df["family"]))
    for name in names:
        table = comparison_table([df[df["family"] == name] for df in frames], labels, registry.FAMILIES.get(name))
        console.print(rich_table(table, _title(name)))
        for note in table.notes:
            console.print(for_terminal(note), markup=False, highlight=False)
        for label, run in zip(labels, records or ()):
            _family_notes(name, [r for r in run if r.family == name], console, prefix=f"{label}: ")
