"""``critpath run``: pick cases, start or join ranks, write the run directory, show progress.

Two ways to get ranks, one worker loop (``harness.worker.serve``):
- local (default): this process spawns ``--world`` ranks on 127.0.0.1 and supervises them;
- joined: under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) or Slurm (SLURM_PROCID,
  SLURM_NTASKS > 1, plus MASTER_ADDR/MASTER_PORT), every process is one rank and rank 0 writes.
"""
from __future__ import annotations

import datetime as _dt
import os
import sys
import threading
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from harness import fingerprint, registry
from harness.case import Case
from harness.family import BACKENDS, GridOptions
from harness.progress import LiveProgress
from harness.records import ErrorInfo, Record
from harness.store import RunDir, new_run_id
from harness.table import print_tables
from harness.timing import PlanPolicy

PROFILE_POLICY = {
    # quick: enough iterations for stable medians and a p99 in a CI minute; full: tails to p999.
    "quick": PlanPolicy(warmup=5, target_s=0.2, min_iters=50, max_iters=2000),
    "full": PlanPolicy(warmup=10, target_s=1.0, min_iters=200, max_iters=20000),
}


class UsageError(ValueError):
    """Bad options or environment: exit code 2 with the message."""


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
        )


def joined_rank(env=os.environ):
    """The rank this process is in a torchrun/Slurm job, or None for a local launch."""
    from harness.worker import Rank, pick_backend

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


def select_cases(opts: RunOptions, grid: GridOptions) -> list[Case]:
    if opts.case_ids:
        try:
            return [registry.parse(cid) for cid in opts.case_ids]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    try:
        families = registry.select(opts.families)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    return registry.cases(families, grid)


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
        state = "ok" if record.ok else record.status if record.status != "ok" else "failed"
        line = f"[{self.done}/{self.total}] {record.case_id} {state} {figure}".rstrip()
        if record.error is not None:
            line += f" ({record.error.kind}: {record.error.message.splitlines()[0] if record.error.message else ''})"
        if self.live:
            self.progress.console.log(line) if not record.ok else None
        else:
            self.console.print(line, markup=False, highlight=False)


def _meta(run_id: str, opts: RunOptions, cases: Sequence[Case], state: str, records: Sequence[Record], started: str) -> dict:
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()}
    return {
        "schema": "critpath.run/1",
        "run_id": run_id,
        "state": state,
        "argv": list(opts.argv),
        "options": options,
        "started_at": started,
        "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds") if state != "running" else None,
        "cases_total": len(cases),
        "cases_ok": sum(1 for r in records if r.ok),
        "cases_failed": sum(1 for r in records if not r.ok),
    }


def run(opts: RunOptions, console: Optional[Console] = None) -> int:
    console = console or Console(stderr=True)
    joined = joined_rank()
    if joined is not None:
        return _run_joined(opts, joined, console)
    return _run_local(opts, console)


def _open_run_dir(opts: RunOptions, run_id: str) -> RunDir:
    path = opts.out or Path("reports") / run_id
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"{path} already holds a run; choose another --out")
    return RunDir(path, run_id)


def _run_local(opts: RunOptions, console: Console) -> int:
    from harness.launcher import Supervisor
    from harness.worker import pick_backend

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
    run_dir = _open_run_dir(opts, run_id)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    run_dir.write_fingerprint(fingerprint.collect(backend, world, "local"))
    records: list[Record] = []
    run_dir.write_meta(_meta(run_id, opts, cases, "running", records, started))
    console.print(f"critpath run {run_id}: {len(cases)} cases, world {world}, {backend} -> {run_dir.path}")
    by_world: dict[int, list[Case]] = defaultdict(list)
    for case in cases:
        by_world[case.world].append(case)
    state = "interrupted"
    with Reporter(console, len(cases)) as reporter:

        def keep(record: Record) -> None:
            run_dir.append(record)  # on disk before anything else happens
            records.append(record)
            reporter.finished(record)

        try:
            for case_world, group in by_world.items():
                with Supervisor(
                    world=case_world, backend=backend, policy=opts.policy(), run_id=run_id,
                    case_timeout_s=opts.timeout_s,
                    threads_per_rank=max(1, (os.cpu_count() or 1) // case_world),
                    on_start=reporter.started, on_record=keep,
                ) as supervisor:
                    supervisor.run(group)
            state = "finished"
        finally:
            run_dir.write_meta(_meta(run_id, opts, cases, state, records, started))
    return _finish(console, run_dir, records, cases)


def _finish(console: Console, run_dir: RunDir, records: list[Record], cases: Sequence[Case]) -> int:
    print_tables(records)
    failed = [r for r in records if not r.ok]
    console.print(
        f"{len(records) - len(failed)} of {len(cases)} cases ok"
        + (f", {len(failed)} failed" if failed else "")
        + f"; results in {run_dir.path}"
    )
    return 0 if not failed and len(records) == len(cases) else 1


class _FileSink:
    """Joined mode: rank 0 writes the run directory; other ranks report failures on stderr."""

    def __init__(self, me, run_dir: Optional[RunDir], records: list, reporter: Optional[Reporter], backend: str,
                 timeout_s: float) -> None:
        self.me, self.run_dir, self.records, self.reporter, self.backend = me, run_dir, records, reporter, backend
        self.timeout_s = timeout_s
        self.started_at = ""
        self.watchdog: Optional[threading.Timer] = None

    def started(self, case_id: str, rank: int) -> None:
        self.started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
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
            self.reporter.finished(record)

    def failed(self, case_id: str, error: ErrorInfo) -> None:
        if error.kind != "timeout":
            self._disarm()
        if self.run_dir is None:
            print(f"critpath rank {self.me.rank}: {case_id} failed: {error.kind}: {error.message}", file=sys.stderr)
            return
        case = registry.parse(case_id)
        self.record(
            Record(
                run_id=self.run_dir.run_id, case_id=case_id, family=case.family,
                family_version=registry.get(case.family).version, params=dict(case.params),
                status="timeout" if error.kind == "timeout" else "failed", backend=self.backend,
                world=case.world, started_at=self.started_at or "unknown", wall_s=0.0, error=error,
            )
        )

    def finished(self, rank: int) -> None:
        self._disarm()


def _run_joined(opts: RunOptions, me, console: Console) -> int:
    """Every process is one rank of a torchrun/Slurm job. A failing case is recorded by rank 0
    and ends the job (the other ranks may be stuck in a collective with the failed rank); the
    launcher's restart policy or a new run picks up from there."""
    from harness.worker import init_group, serve

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
    run_dir = None
    records: list[Record] = []
    run_id = "joined"
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    if me.rank == 0:
        run_id = new_run_id()
        run_dir = _open_run_dir(opts, run_id)
        layout = fingerprint.node_layout(identities)
        run_dir.write_fingerprint(fingerprint.collect(backend, me.world, "joined", layout))
        run_dir.write_meta(_meta(run_id, opts, cases, "running", records, started))
        console.print(f"critpath run {run_id}: {len(cases)} cases, world {me.world} on {layout['nodes']} node(s) "
                      f"({', '.join(map(str, layout['ranks_per_node']))} ranks), {backend} -> {run_dir.path}")
    reporter = Reporter(console, len(cases)) if me.rank == 0 else None
    sink = _FileSink(me, run_dir, records, reporter, backend, opts.timeout_s)
    ok = serve(cases, me, comm, opts.policy(), run_id, sink)
    if run_dir is not None:
        run_dir.write_meta(_meta(run_id, opts, cases, "finished" if ok else "aborted", records, started))
        code = _finish(console, run_dir, records, cases)
    else:
        code = 0 if ok else 1
    if ok:
        import torch.distributed as dist

        dist.destroy_process_group()
    else:
        os._exit(1)  # peers may be blocked in a collective; do not wait for them
    return code
