"""Interleaved A/B execution: base and candidate in the same job, one fresh process per repeat.

Order is A B, B A, A B, ... (each pair reverses the last): A B A B interleaving keeps both sides
exposed to the same slow drifts of a shared machine, and reversing every other pair also cancels
a linear drift inside each pair (the side that always went first would otherwise always see the
machine a few seconds earlier). Each process is ``python -m harness run --case ... --out DIR``
started with an argument list (never a shell) from its side's tree; every selected case runs in
each process, so a repeat samples between-process variance for all cases at once. The order of
cases inside a process is shuffled per repeat (the same order on both sides), so no case always
runs first in a fresh process or last after the others have warmed or heated the machine.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from harness.gate.trees import Tree
from harness.gate.values import StatisticError, failure_text, process_value
from harness.records import Record
from harness.store import ResultsFileError, load_records

BASE, CANDIDATE = "base", "candidate"


@dataclass(frozen=True)
class GateCase:
    """One comparison: the name its verdict carries and the case ID each side runs. In a gate
    both IDs are the same; the power benchmark pairs a base case with a costlier candidate."""

    name: str
    base_id: str
    cand_id: str

    @classmethod
    def same(cls, case_id: str) -> "GateCase":
        return cls(case_id, case_id, case_id)


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
class ABRuns:
    cases: list[GateCase]
    runs: list[ProcessRun] = field(default_factory=list)
    stopped: str = ""  # why the loop stopped early, if it did

    def side_runs(self, side: str) -> list[ProcessRun]:
        return [r for r in self.runs if r.side == side]

    def values(self, case: GateCase, side: str, statistic: str) -> tuple[list[float], str]:
        """One value per process of ``side``, or ('', a reason) if any repeat is unusable: a
        failed or missing repeat is never dropped silently, it makes the case could-not-run."""
        case_id = case.base_id if side == BASE else case.cand_id
        runs = self.side_runs(side)
        if not runs:
            return [], f"{side}: no process ran" + (f" ({self.stopped})" if self.stopped else "")
        missing = [r for r in runs if case_id not in r.records]
        if missing:
            first = missing[0]
            why = first.error or f"exit code {first.exit_code}, no record for the case"
            return [], f"{side}: {len(missing)} of {len(runs)} runs have no record of {case_id} (first: {why})"
        records = [r.records[case_id] for r in runs]
        bad = failure_text(records)
        if bad:
            return [], f"{side}: {bad}"
        try:
            return [process_value(rec, statistic) for rec in records], ""
        except StatisticError as exc:
            return [], f"{side}: {exc}"


def run_process(tree: Tree, case_ids: Sequence[str], run_dir: Path, run_args: Sequence[str],
                 timeout_s: float, python: str) -> tuple[int, float, str]:
    args = [python, "-m", "harness", "run"]
    for case_id in case_ids:
        args += ["--case", case_id]
    args += ["--out", str(run_dir), *run_args]
    log = run_dir.with_suffix(".log")
    start = time.perf_counter()
    with open(log, "wb") as out:
        # A session of its own, so a timeout can stop the run and the ranks it spawned together.
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
    if code != 0 and not note and not (run_dir / "results.jsonl").exists():
        # Nothing measured: the log's last error line says why (a failed case is in its record).
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower()]
        note = (errors or lines or ["(no output)"])[-1].strip()
    return code, wall_s, note


def run_interleaved(cases: Sequence[GateCase], base: Tree, cand: Tree, repeats: int, out_dir: Path,
                    run_args: Sequence[str] = (), process_timeout_s: float = 600.0,
                    python: str = sys.executable,
                    progress: Optional[Callable[[ProcessRun], None]] = None, seed: int = 0) -> ABRuns:
    """Run ``repeats`` processes per side, interleaved; records are read back from each run dir."""
    result = ABRuns(list(cases))
    trees = {BASE: base, CANDIDATE: cand}
    shuffler = random.Random(seed)
    for repeat in range(repeats):
        shuffled = list(cases)
        shuffler.shuffle(shuffled)
        ids = {BASE: list(dict.fromkeys(c.base_id for c in shuffled)),
               CANDIDATE: list(dict.fromkeys(c.cand_id for c in shuffled))}
        order = (BASE, CANDIDATE) if repeat % 2 == 0 else (CANDIDATE, BASE)
        for side in order:
            run_dir = Path(out_dir) / side / f"rep-{repeat:03d}"
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            code, wall_s, note = run_process(trees[side], ids[side], run_dir, run_args, process_timeout_s, python)
            run = ProcessRun(side, repeat, run_dir, code, wall_s, error=note)
            if (run_dir / "results.jsonl").exists():
                try:
                    run.records = {r.case_id: r for r in load_records(run_dir)}
                except ResultsFileError as exc:
                    run.error = str(exc)
            result.runs.append(run)
            if progress:
                progress(run)
            if not run.records and repeat == 0:
                # The first process of a side measured nothing: repeating it would only burn time.
                result.stopped = f"{side} repeat 0 produced no records ({run.error or f'exit {code}'}); stopped"
                return result
    return result
