"""What a running gate shows: a bar over its budget with the time left on a terminal, one line
per look in a CI log, and what this runner can detect once the first pairs are in."""
from __future__ import annotations

import sys
from typing import Sequence, TextIO

from rich.progress import BarColumn, TimeElapsedColumn

from harness.core.console import Console, text_column
from harness.gate.paired import probe_lines
from harness.gate.schedule import Plan
from harness.run.progress import LiveProgress


class GateProgress(LiveProgress):
    """Hears the schedule's events (``event(kind, data)``) and reports them."""

    def __init__(self, plan: Plan, gate, specs: Sequence, stream: TextIO = sys.stderr) -> None:
        super().__init__(Console(file=stream, highlight=False),
                         text_column("critpath gate", style="bold"), BarColumn(), TimeElapsedColumn(),
                         text_column("of {task.total:.0f} s, at most {task.fields[left]} s left"),
                         text_column("{task.description}"))
        self.plan, self.gate = plan, gate
        self.specs = {s.case_id: s for s in specs}
        self.reported: set[str] = set()
        self.task = self.progress.add_task("", total=plan.budget_s, left=f"{plan.budget_s:.0f}")
        self.looks = 0

    def event(self, kind: str, data: dict) -> None:
        tracks = data["tracks"]
        elapsed = data["elapsed_s"]
        open_n = sum(1 for t in tracks.values() if not t.problem and (t.state is None or t.state.outcome is None))
        self.progress.update(self.task, completed=min(elapsed, self.plan.budget_s),
                             left=f"{max(0.0, self.plan.budget_s - elapsed):.0f}",
                             description=f"pair {data.get('generation', '')}: {len(tracks) - open_n} of "
                                         f"{len(tracks)} cases decided")
        if kind == "generation":
            for t in tracks.values():
                if not t.problem or t.case_id in self.reported:
                    continue
                self.reported.add(t.case_id)
                self.line(f"  could not run: {t.case_id}: {t.problem}")
            if not self.live and data["generation"] == 1:
                self.line(f"  first pair of processes: {data['generation_s']:.1f} s")
        elif kind == "probe":
            for line in probe_lines(tracks, self.specs, self.gate, self.plan, elapsed, data["generation_s"]):
                self.line(f"  probe: {line}")
        elif kind == "look":
            self.looks += 1
            head = "final look" if data["final"] else f"look {self.looks}"
            self.line(f"  {head} at {elapsed:.0f} s:")
            for t in tracks.values():
                s = t.state
                # Each case once it is decided, then no more: a long gate's log stays readable.
                if s is None or t.problem or (s.outcome is not None and t.decided_at_s != elapsed):
                    continue
                verdict = s.outcome or "open"
                self.line(f"    {verdict:<12} {t.case_id}: {s.reason}")

