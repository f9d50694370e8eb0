"""What ``critpath run`` shows on the terminal: the header, each case as it finishes (a bar on a
terminal, one line per case in a CI log), then the tables and the summary line."""
from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, TimeElapsedColumn

from harness.core.console import Console, text_column
from harness.core.contention import tally
from harness.core.escape import for_terminal
from harness.core.records import Record
from harness.run.plan import RunJournal
from harness.run.progress import LiveProgress
from harness.tables.terminal import print_tables


def announce(console: Console, journal: RunJournal, where: str) -> None:
    """The header: the run's ID, what it runs, on what (``where``: the worlds, or the job's nodes)
    and where its directory is."""
    plan = journal.plan
    console.print(f"critpath run {journal.run_id}: {len(plan.cases)} cases, {where}, {plan.backend} -> {journal.path}")


class Reporter(LiveProgress):
    """Progress while the run goes on: a bar on a terminal, one line per case in CI logs."""

    def __init__(self, console: Console, total: int) -> None:
        super().__init__(console, text_column("critpath run", style="bold"), BarColumn(), MofNCompleteColumn(),
                         TimeElapsedColumn(), text_column("{task.description}"))
        self.total = total
        self.done = 0
        self.task = self.progress.add_task("", total=total)

    def started(self, case_id: str) -> None:
        self.progress.update(self.task, description=case_id)

    def finished(self, record: Record) -> None:
        self.done += 1
        self.progress.update(self.task, advance=1)
        summary = record.summary
        figure = f"p50={summary.p50_ns / 1e3:.1f}us" if summary else ""
        line = f"[{self.done}/{self.total}] {record.case_id} {record.label} {figure}".rstrip()
        if record.error is not None:
            line += f" ({record.error.kind}: {record.error.message.splitlines()[0] if record.error.message else ''})"
        line = for_terminal(line)  # an error message is whatever the case printed, escape sequences too
        if self.live:
            self.progress.console.log(line, markup=False, highlight=False) if not record.ok else None
        else:
            self.console.print(line, markup=False, highlight=False)


def finish(console: Console, journal: RunJournal) -> int:
    """The tables and the summary line (cases ok, records contended); exit 0 only when every
    planned case ran and passed."""
    plan, records = journal.plan, journal.records
    print_tables(records)
    failed = [r for r in records if not r.ok]
    console.print(
        f"{len(records) - len(failed)} of {len(plan.cases)} cases ok"
        + (f", {len(failed)} failed" if failed else "")
        + f"; {tally(r.contention_verdict for r in records)}"
        + f"; results in {journal.path}"
    )
    return 0 if not failed and len(records) == len(plan.cases) else 1
