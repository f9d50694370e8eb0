"""Fresh ``critpath run`` processes of one side, a fixed number of them: what ``critpath gate
--against TABLE`` measures (only the candidate runs there, so there is nothing to pair).

Each process is ``python -m harness run --case ... --out DIR`` started with an argument list
(never a shell) from the side's tree, in a session of its own so that a timeout or Ctrl-C stops
it with the ranks it spawned.
"""
from __future__ import annotations

import math
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from harness.gate.schedule import RECENT, fits
from harness.gate.trees import CANDIDATE, Tree
from harness.core import figures
from harness.core.figures import FigureUnavailable
from harness.gate.values import failure_text
from harness.core.records import Record
from harness.core.store import RESULTS, ResultsFileError, load_records


@dataclass
class ProcessRun:
    side: str
    repeat: int
    run_dir: Path
    exit_code: int
    wall_s: float
    records: dict[str, Record] = field(default_factory=dict)
    error: str = ""  # why this process gave no usable records, when it did not


@dataclass
class Repeats:
    runs: list[ProcessRun] = field(default_factory=list)
    stopped: str = ""  # why the loop stopped early, if it did
    # The budget's cut, as the A/B loop records its own (gate.json: extra.cut): the repeats it
    # left unstarted because the next would have ended past the budget.
    cut: list = field(default_factory=list)

    def values(self, case_id: str, statistic: str) -> tuple[list[float], str]:
        """One value per process, or ([], a reason) if any repeat is unusable: a failed or
        missing repeat is never dropped silently, it makes the case could-not-run."""
        if not self.runs:
            return [], "no process ran" + (f" ({self.stopped})" if self.stopped else "")
        missing = [r for r in self.runs if case_id not in r.records]
        if missing:
            first = missing[0]
            why = first.error or f"exit code {first.exit_code}, no record for the case"
            return [], f"{len(missing)} of {len(self.runs)} runs have no record of {case_id} (first: {why})"
        records = [r.records[case_id] for r in self.runs]
        bad = failure_text(records)
        if bad:
            return [], bad
        try:
            return [figures.value(rec, statistic) for rec in records], ""
        except FigureUnavailable as exc:
            return [], str(exc)


def run_process(tree: Tree, case_ids: Sequence[str], run_dir: Path, run_args: Sequence[str],
                timeout_s: float, python: str = sys.executable) -> tuple[int, float, str]:
    args = [python, "-m", "harness", "run"]
    for case_id in case_ids:
        args.append(f"--case={case_id}")  # one word: never read as an option
    args += ["--out", str(run_dir), *run_args]
    log = run_dir.with_suffix(".log")
    start = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, cwd=tree.path, env=tree.env(), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
            note = ""
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            note = f"process exceeded {timeout_s:.0f} s and was killed"
        except BaseException:
            # Ctrl-C reaches only this process (the run has its own session): stop the run too.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    wall_s = time.perf_counter() - start
    if code != 0 and not note and not (run_dir / RESULTS).exists():
        # Nothing measured: the log's last error line says why (a failed case is in its record).
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower()]
        note = (errors or lines or ["(no output)"])[-1].strip()
    return code, wall_s, note


def run_repeats(case_ids: Sequence[str], tree: Tree, repeats: int, out: Path, run_args: Sequence[str],
                timeout_s: float, progress: Callable[[ProcessRun], None], budget_s: float = math.inf,
                started_at: Optional[float] = None, clock: Callable[[], float] = time.monotonic) -> Repeats:
    """``repeats`` fresh processes, one after another, none started that would end past
    ``budget_s`` (counted from ``started_at`` on ``clock``; its cost is the recent processes'
    median wall time, so the first always runs)."""
    result = Repeats()
    started_at = clock() if started_at is None else started_at
    for repeat in range(repeats):
        estimate_s = statistics.median(r.wall_s for r in result.runs[-RECENT:]) if result.runs else None
        if not fits(clock() - started_at, estimate_s, budget_s):
            result.cut.append({"repeats_run": repeat, "repeats_planned": repeats, "budget_s": budget_s,
                               "elapsed_s": round(clock() - started_at, 3), "next_repeat_s": round(estimate_s, 3)})
            break
        run_dir = out / CANDIDATE / f"rep-{repeat:03d}"
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        code, wall_s, note = run_process(tree, case_ids, run_dir, run_args, timeout_s * len(case_ids) + 180.0)
        run = ProcessRun(CANDIDATE, repeat, run_dir, code, wall_s, error=note)
        if (run_dir / RESULTS).exists():
            try:
                run.records = {r.case_id: r for r in load_records(run_dir)}
            except ResultsFileError as exc:
                run.error = str(exc)
        result.runs.append(run)
        progress(run)
        if not run.records and repeat == 0:
            # The first process measured nothing: repeating it would only burn time.
            result.stopped = f"candidate repeat 0 produced no records ({run.error or f'exit {code}'}); stopped"
            break
    return result
