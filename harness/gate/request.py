"""What ``critpath gate`` and ``critpath compare`` were asked, read once from the command line: the
sides, the cases, how long to measure, the config, and where and under which exit rules the
result goes. Everything below the command handlers reads these, never the parsed arguments."""
from __future__ import annotations

import datetime as _dt
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from harness.core.claim import claim_dir
from harness.core.escape import for_terminal
from harness.core.nesting import overlap
from harness.core.options import UsageError, absolute, print_error
from harness.core.runfiles import GATE_SIDES, holds_gate
from harness.gate.config import GateConfig
from harness.gate.outputs import GateResult, check_markdown, write_outputs
from harness.gate.schedule import Plan
from harness.gate.stats import Outcome, Policy, Unit


def _default_out(kind: str) -> Path:
    # Absolute, as every path of a request is (harness.core.options.absolute): the sides' processes
    # write their records here from their own worktrees.
    return absolute(Path("reports")) / f"{kind}-{_dt.datetime.now(_dt.timezone.utc):%Y%m%d-%H%M%S}"


@dataclass(frozen=True)
class GateOutputs:
    """Where a result is written, and the exit rules it is judged by."""

    command: str  # gate or compare: names the command in an error line
    out: Optional[Path]  # None: reports/<kind>-<time>
    markdown: Optional[Path]  # also appended here (a CI step summary)
    fail_on_inconclusive: bool = False
    allow_inconclusive: bool = False

    def out_dir(self, kind: str) -> Path:
        return self.out or _default_out(kind)

    def check(self, kind: str) -> None:
        """UsageError when the result could not be written where it is asked (``--markdown``):
        called once the command's inputs are known, before anything is measured."""
        if self.markdown is not None:
            check_markdown(self.markdown, self.out_dir(kind))

    def check_out(self, kind: str, sides: Sequence[Path] = ()) -> None:
        """UsageError when --out may not take this command's result at all, before anything runs:
        a gate's directory, whose result only that gate writes (``runfiles``), or a directory that
        is, lies inside or holds one of the ``sides`` compared (``nesting.overlap``): the result
        would lie among the runs it reads, or be written inside the gate being read."""
        out = self.out_dir(kind)
        if holds_gate(out):
            raise UsageError(f"--out {out} is the directory of a gate (it holds {'/ and '.join(GATE_SIDES)}/), whose "
                             "gate.json, gate.xml and gate.md only that gate writes; choose another --out")
        for label, side in zip(SIDE_LABELS, sides):
            how = overlap(out, side)
            if how:
                raise UsageError(f"--out {out} {how} the {label} side {side}: the result would be written among "
                                 "the runs it compares; choose an --out outside both sides")

    def result(self, mode: str, statistic: str, policy: Optional[Policy] = None, unit: str = Unit.PROCESS,
               **kw) -> GateResult:
        return GateResult(mode, statistic, unit, policy or Policy(), fail_on_inconclusive=self.fail_on_inconclusive,
                          allow_inconclusive=self.allow_inconclusive, **kw)

    def finish(self, result: GateResult, out: Path, own: bool = False) -> int:
        """Write the result, print its headline and every case that changed; its exit code.
        ``own``: the gate that measured ``out`` writes its own result (``write_outputs``)."""
        with claim_dir(out, self.command):  # a gate refused before it ran claims --out here; one that ran holds it
            paths = write_outputs(result, out, self.markdown, own)
        print(for_terminal(result.headline))
        for case_id, v in result.verdicts.items():
            if v.outcome != Outcome.UNCHANGED:
                print(for_terminal(f"  {v.outcome:<13} {case_id}: {v.reason}"))
        for w in result.warnings:
            print(for_terminal(f"warning: {w}"), file=sys.stderr)
        print(f"gate results: {paths['json']}, {paths['junit']}, {paths['markdown']}")
        return result.exit_code

    def error(self, mode: str, message: str, statistic: str = GateConfig.statistic) -> int:
        """A gate that could not run still leaves its outputs, saying why."""
        code = self.finish(self.result(mode, statistic, error=message), self.out_dir(mode))
        print_error(self.command, message)
        return code


SIDE_LABELS = ("base", "candidate")  # a compare's two sides, as its messages name them
AB, AGAINST = "ab", "against"  # the gate's modes: base against candidate, or the candidate against a table
# The options only one mode reads; every other option of ``critpath gate`` is read by both. Given
# to the other mode, one would be ignored in silence, so the request is refused naming it.
MODE_ONLY = {"--case": AB, "--families": AB, "--full": AB, "--rounds": AB, "--window": AB, "--max-pairs": AB,
             "--allow-inconclusive": AB, "--between-gates": AB, "--toggle": AB, "--repeats": AGAINST}
# Why an option of the other mode has no meaning in this one: what this mode measures instead.
_MODE_MEASURES = {
    AB: "to an A/B gate (--base REF), which measures pairs of processes, interleaved, until --budget "
        "(or --max-pairs) ends it",
    AGAINST: "with --against FILE: the cases are the table's entries, and only the candidate runs, "
             "--repeats fresh processes of a fixed-size test",
}


@dataclass(frozen=True)
class GateRequest:
    """``critpath gate``: base against candidate in this job, or the candidate against a table."""

    base: Optional[str]  # a git ref
    candidate: str  # a git ref, or the working tree
    against: Optional[Path]  # a baseline table instead of a base
    repo: Path
    case_ids: tuple[str, ...]  # named with --case, in order
    families: Optional[tuple[str, ...]]
    profile: str  # the families' grid: quick or full
    plan: Plan  # the budget, rounds, window, iterations and per-case limit
    repeats: int  # with --against: candidate processes
    config: GateConfig
    outputs: GateOutputs
    given: frozenset[str] = frozenset()  # the options of MODE_ONLY that the command line gave
    between: Optional[Mapping] = None  # --between-gates: case -> between.Heterogeneity of stored A/A gates

    @property
    def mode(self) -> str:
        return AGAINST if self.against else AB

    def unmeasured(self) -> dict:
        """The sides of a gate that stopped before its result: the refs asked for, and that no
        measurement of them reached it (rounds already run stay on disk under --out)."""
        base = str(self.against) if self.against else self.base
        return {"base": {"ref": base, "measured": False}, "candidate": {"ref": self.candidate, "measured": False}}

    def refusal(self) -> str:
        """Why these options cannot make a gate, or "" when they can."""
        if self.against and self.base:
            return "give --base REF or --against FILE, not both"
        if not self.against and not self.base:
            return "--base REF (or --against FILE) is required"
        foreign = [option for option, mode in MODE_ONLY.items() if mode != self.mode and option in self.given]
        if foreign:
            them = "it" if len(foreign) == 1 else "them"
            return f"{', '.join(foreign)} {'does' if len(foreign) == 1 else 'do'} not apply " \
                   f"{_MODE_MEASURES[self.mode]}; drop {them}"
        if not self.case_ids and not self.families and not self.against:
            return "select cases with --case ID or --families F"
        if "--full" in self.given and not self.families:
            return "--full selects the full grid of --families; give --families F, or drop --full"
        return ""


@dataclass(frozen=True)
class CompareRequest:
    """``critpath compare``: the gate's statistics on two stored sides."""

    run_a: Path  # base: a run directory, a directory of them, or a gate's side
    run_b: Path  # candidate: the same
    config: GateConfig
    outputs: GateOutputs
