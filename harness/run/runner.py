"""``critpath run``: pick cases, start or join ranks, write the run directory, show progress.

Two ways to get ranks, one worker loop (``harness.run.worker.serve``):
- local (default): this process spawns ``--world`` ranks on 127.0.0.1 and supervises them;
- joined: under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) or Slurm (SLURM_PROCID,
  SLURM_NTASKS > 1, plus MASTER_ADDR/MASTER_PORT), every process is one rank and rank 0 writes.
"""
from __future__ import annotations

import os
import sys
import threading
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from harness.run import fingerprint
from harness.core import registry
from harness.core.case import Case
from harness.core.family import BACKENDS, GridOptions
from harness.core.options import UsageError
from harness.run.progress import LiveProgress
from harness.core.records import ErrorInfo, Record, utc_now_iso
from harness.core.store import RunDir, new_run_id, run_files
from harness.tables.terminal import print_tables
from harness.run.timing import PlanPolicy

PROFILE_POLICY = {
    # quick: enough iterations for stable medians and a p99 in a CI minute, and up to 2 s more per
    # case for a family whose declared tails need more (rpc's p999: 1,000); full: tails to p999.
    "quick": PlanPolicy(warmup=5, target_s=0.2, min_iters=50, max_iters=2000, tail_budget_s=2.0),
    "full": PlanPolicy(warmup=10, target_s=1.0, min_iters=200, max_iters=20000, tail_budget_s=10.0),
}


@dataclass(frozen=True)
class RunOptions:
    families: Optional[tuple[str, ...]] = None
    case_ids: tuple[str, ...] = ()
    profile: str = "quick"
    world: Optional[int] = None
    backend: Optional[str] = None
    sizes_bytes: Optional[tuple[int, ...]] = None
    iters: Optional[int] = None
    warmup: Optional[int] = None
    timeout_s: float = 60.0
    out: Optional[Path] = None
    argv: tuple[str, ...] = field(default_factory=tuple)

    def policy(self) -> PlanPolicy:
        base = PROFILE_POLICY[self.profile]
        return PlanPolicy(
            warmup=base.warmup if self.warmup is None else self.warmup,
            iters=self.iters,
            target_s=base.target_s,
            min_iters=base.min_iters,
            max_iters=base.max_iters,
            tail_budget_s=base.tail_budget_s,
        )


@dataclass(frozen=True)
class RunPlan:
    """What a run decides once, before its first case; the launcher, the workers, the sink, the
    header and run.json all read it, never the options again."""

    run_id: str
    cases: tuple[Case, ...]
    backend: str
    policy: PlanPolicy
    timeout_s: float
    run_dir: Optional[RunDir]  # None on the ranks of a joined job that do not write
    started_at: str
    options: dict  # the options as given, for run.json
    argv: tuple[str, ...]

    @property
    def worlds(self) -> list[int]:
        """The worlds the cases use (a case ID names its own), not --world."""
        return sorted({c.world for c in self.cases})

    def by_world(self) -> dict[int, list[Case]]:
        groups: dict[int, list[Case]] = defaultdict(list)
        for case in self.cases:
            groups[case.world].append(case)
        return dict(groups)

    def meta(self, state: str, records: Sequence[Record]) -> dict:
        """run.json: how far the run got."""
        return {
            "schema": "critpath.run/1",
            "run_id": self.run_id,
            "state": state,
            "argv": list(self.argv),
            "options": self.options,
            "started_at": self.started_at,
            "finished_at": utc_now_iso("seconds") if state != "running" else None,
            "cases_total": len(self.cases),
            "cases_ok": sum(1 for r in records if r.ok),
            "cases_failed": sum(1 for r in records if not r.ok),
        }


def _plan(opts: RunOptions, cases: Sequence[Case], backend: str, run_id: str, run_dir: Optional[RunDir]) -> RunPlan:
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()}
    return RunPlan(run_id, tuple(cases), backend, opts.policy(), opts.timeout_s, run_dir, utc_now_iso("seconds"),
                   options, tuple(opts.argv))


def joined_rank(env=os.environ):
    """The rank this process is in a torchrun/Slurm job, or None for a local launch."""
    from harness.run.worker import Rank, pick_backend

    if "RANK" in env and "WORLD_SIZE" in env:
        rank, world, local = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0))
    elif "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1:
        rank, world, local = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0))
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in env]
        if missing:
            raise UsageError(f"under Slurm, set {' and '.join(missing)} (see README: Slurm) so ranks can meet")
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local))
    else:
        return None
    return Rank(rank, world, local, pick_backend(None, local))


# More cases than this in one run is a typo in a sweep, not a plan: refused, naming the cap.
MAX_CASES = 10_000


def select_cases(opts: RunOptions, grid: GridOptions) -> list[Case]:
    if opts.case_ids:
        try:
            cases = [registry.parse(cid) for cid in opts.case_ids]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    else:
        try:
            families = registry.select(opts.families)
        except KeyError as exc:
            raise UsageError(exc.args[0]) from None
        cases = registry.cases(families, grid)
    if len(cases) > MAX_CASES:
        raise UsageError(f"{len(cases)} cases selected; a run holds at most {MAX_CASES} (narrow --sizes or --families)")
    return cases


class Reporter(LiveProgress):
    """Progress while the run goes on: a bar on a terminal, one line per case in CI logs."""

    def __init__(self, console: Console, total: int) -> None:
        super().__init__(console, TextColumn("[bold]critpath run"), BarColumn(), MofNCompleteColumn(),
                         TimeElapsedColumn(), TextColumn("{task.description}"))
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
        if self.live:
            self.progress.console.log(line) if not record.ok else None
        else:
            self.console.print(line, markup=False, highlight=False)


def run(opts: RunOptions, console: Optional[Console] = None) -> int:
    console = console or Console(stderr=True)
    joined = joined_rank()
    if joined is not None:
        return _run_joined(opts, joined, console)
    return _run_local(opts, console)


def _open_run_dir(opts: RunOptions, run_id: str) -> RunDir:
    path = opts.out or Path("reports") / run_id
    taken = run_files(path)
    if taken:
        raise UsageError(f"{path} already holds a run ({taken[0]}); choose another --out")
    return RunDir(path, run_id)


def _run_local(opts: RunOptions, console: Console) -> int:
    from harness.run.launcher import Supervisor
    from harness.run.worker import pick_backend

    world = opts.world or 2
    if world < 1:
        raise UsageError("--world must be >= 1")
    backend = opts.backend or pick_backend(None, world - 1)
    if backend not in BACKENDS:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    grid = GridOptions(opts.profile, world, backend, opts.sizes_bytes)
    cases = select_cases(opts, grid)
    if not cases:
        raise UsageError("no cases selected")
    run_id = new_run_id()
    plan = _plan(opts, cases, backend, run_id, _open_run_dir(opts, run_id))
    run_dir = plan.run_dir
    run_dir.write_fingerprint(fingerprint.collect(backend, max(plan.worlds), "local"))
    records: list[Record] = []
    run_dir.write_meta(plan.meta("running", records))
    console.print(f"critpath run {run_id}: {len(cases)} cases, world {'/'.join(map(str, plan.worlds))}, {backend} "
                  f"-> {run_dir.path}")
    state = "interrupted"
    with Reporter(console, len(cases)) as reporter:

        def keep(record: Record) -> None:
            run_dir.append(record)  # on disk before anything else happens
            records.append(record)
            run_dir.write_meta(plan.meta("running", records))  # how far it got, if it is killed next
            reporter.finished(record)

        try:
            for case_world, group in plan.by_world().items():
                with Supervisor(
                    world=case_world, backend=backend, policy=plan.policy, run_id=run_id,
                    case_timeout_s=plan.timeout_s,
                    threads_per_rank=max(1, (os.cpu_count() or 1) // case_world),
                    on_start=reporter.started, on_record=keep,
                ) as supervisor:
                    supervisor.run(group)
            state = "finished"
        finally:
            run_dir.write_meta(plan.meta(state, records))
    return _finish(console, plan, records)


def _finish(console: Console, plan: RunPlan, records: list[Record]) -> int:
    print_tables(records)
    failed = [r for r in records if not r.ok]
    console.print(
        f"{len(records) - len(failed)} of {len(plan.cases)} cases ok"
        + (f", {len(failed)} failed" if failed else "")
        + f"; results in {plan.run_dir.path}"
    )
    return 0 if not failed and len(records) == len(plan.cases) else 1


class _FileSink:
    """Joined mode: rank 0 writes the run directory; other ranks report failures on stderr."""

    def __init__(self, me, run_dir: Optional[RunDir], records: list, reporter: Optional[Reporter], backend: str,
                 timeout_s: float) -> None:
        self.me, self.run_dir, self.records, self.reporter, self.backend = me, run_dir, records, reporter, backend
        self.timeout_s = timeout_s
        self.plan: Optional["RunPlan"] = None  # set by the joined run once planned: progress goes to run.json
        self.started_at = ""
        self.watchdog: Optional[threading.Timer] = None

    def started(self, case_id: str, rank: int) -> None:
        self.started_at = utc_now_iso()
        if self.reporter:
            self.reporter.started(case_id)
        # No supervising parent here: a watchdog thread bounds the case. A collective stuck on a
        # dead peer raises on its own (the group timeout); this catches a rank stuck anywhere else.
        self._disarm()
        self.watchdog = threading.Timer(self.timeout_s, self._expired, args=(case_id,))
        self.watchdog.daemon = True
        self.watchdog.start()

    def _disarm(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None

    def _expired(self, case_id: str) -> None:
        self.watchdog = None
        self.failed(case_id, ErrorInfo("timeout", f"case did not finish within {self.timeout_s:g} s", self.me.rank))
        os._exit(124)

    def record(self, record: Record) -> None:
        self._disarm()
        if self.run_dir is not None:
            self.run_dir.append(record)
            self.records.append(record)
            if self.plan is not None:
                self.run_dir.write_meta(self.plan.meta("running", self.records))
            self.reporter.finished(record)

    def failed(self, case_id: str, error: ErrorInfo) -> None:
        if error.kind != "timeout":
            self._disarm()
        if self.run_dir is None:
            print(f"critpath rank {self.me.rank}: {case_id} failed: {error.kind}: {error.message}", file=sys.stderr)
            return
        self.record(Record.failure(registry.parse(case_id), self.run_dir.run_id, error, self.backend,
                                   self.started_at or "unknown"))

    def finished(self, rank: int) -> None:
        self._disarm()


def _run_joined(opts: RunOptions, me, console: Console) -> int:
    """Every process is one rank of a torchrun/Slurm job. A failing case is recorded by rank 0
    and ends the job (the other ranks may be stuck in a collective with the failed rank); the
    launcher's restart policy or a new run picks up from there."""
    from harness.run.worker import init_group, serve

    if opts.world not in (None, me.world):
        raise UsageError(f"--world {opts.world} but the job has WORLD_SIZE={me.world}")
    backend = opts.backend or me.backend
    me = type(me)(me.rank, me.world, me.local_rank, backend)
    grid = GridOptions(opts.profile, me.world, backend, opts.sizes_bytes)
    cases = select_cases(opts, grid)
    comm = init_group(me, opts.timeout_s)
    # Every rank says where it runs (over the gloo control group, before any case) so rank 0 can
    # record the node layout: a result from 2 x 8 GPUs means little without it.
    identities = comm.gather(fingerprint.rank_identity(me.rank, me.local_rank), me.rank)
    records: list[Record] = []
    run_id = new_run_id() if me.rank == 0 else "joined"
    plan = _plan(opts, cases, backend, run_id, _open_run_dir(opts, run_id) if me.rank == 0 else None)
    if plan.run_dir is not None:
        layout = fingerprint.node_layout(identities)
        plan.run_dir.write_fingerprint(fingerprint.collect(backend, me.world, "joined", layout))
        plan.run_dir.write_meta(plan.meta("running", records))
        console.print(f"critpath run {run_id}: {len(cases)} cases, world {me.world} on {layout['nodes']} node(s) "
                      f"({', '.join(map(str, layout['ranks_per_node']))} ranks), {backend} -> {plan.run_dir.path}")
    reporter = Reporter(console, len(cases)) if me.rank == 0 else None
    sink = _FileSink(me, plan.run_dir, records, reporter, backend, plan.timeout_s)
    sink.plan = plan
    ok = serve(list(plan.cases), me, comm, plan.policy, run_id, sink)
    if plan.run_dir is not None:
        plan.run_dir.write_meta(plan.meta("finished" if ok else "aborted", records))
        code = _finish(console, plan, records)
    else:
        code = 0 if ok else 1
    if ok:
        import torch.distributed as dist

        dist.destroy_process_group()
    else:
        os._exit(1)  # peers may be blocked in a collective; do not wait for them
    return code
