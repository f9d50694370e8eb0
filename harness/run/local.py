"""The local way of running: this process spawns the ranks on 127.0.0.1 (``--world``, default 2),
supervises them (``harness.run.launcher.Supervisor``: timeouts, dead ranks, a fresh pool after a
failure) and writes the run directory itself."""
from __future__ import annotations

import os

from harness.core.console import Console
from harness.core.family import BACKENDS
from harness.core.fingerprintfile import LOCAL
from harness.core.options import UsageError
from harness.core.records import Record
from harness.core.runmeta import INTERRUPTED
from harness.run import fingerprint
from harness.run.plan import (
    LOCAL_WORLD_RULE,
    MAX_LOCAL_WORLD,
    RunJournal,
    RunOptions,
    RunPlan,
    plan_run,
    refuse_unavailable,
)
from harness.run.reporter import Reporter, announce, finish


def local_plan(opts: RunOptions) -> RunPlan:
    """The plan on --world ranks (default 2) over --backend (default: NCCL where the ranks have GPUs)."""
    # torch (a second or more): only a run that starts ranks loads it, not whoever imports the runner
    from harness.run.worker import backend_unavailable, pick_backend

    world = opts.world or 2
    if not 1 <= world <= MAX_LOCAL_WORLD:
        raise UsageError(f"--world {world}: {LOCAL_WORLD_RULE}")
    backend = opts.backend or pick_backend(None, world - 1)
    if backend not in BACKENDS:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    plan = plan_run(opts, world, backend)
    if not plan.cases:
        raise UsageError("no cases selected")
    too_wide = next((case for case in plan.cases if case.world > MAX_LOCAL_WORLD), None)
    if too_wide is not None:  # a case ID names its own world
        raise UsageError(f"case {too_wide.id} needs world {too_wide.world}: {LOCAL_WORLD_RULE}")
    # Every rank of a case starts on this host.
    refuse_unavailable(opts, backend, backend_unavailable(backend, max(plan.worlds)))
    return plan


def run_local(plan: RunPlan, console: Console) -> int:
    from harness.run.launcher import Supervisor  # imports torch: see local_plan

    journal = RunJournal.open(plan)
    journal.start(fingerprint.collect(plan.backend, max(plan.worlds), LOCAL))
    announce(console, journal, f"world {'/'.join(map(str, plan.worlds))}")
    state = INTERRUPTED
    with Reporter(console, len(plan.cases)) as reporter:

        def keep(record: Record) -> None:
            journal.keep(record)
            reporter.finished(record)

        try:
            for case_world, group in plan.by_world().items():
                with Supervisor(
                    world=case_world, backend=plan.backend, policy=plan.policy, run_id=journal.run_id,
                    case_timeout_s=plan.timeout_s,
                    threads_per_rank=max(1, (os.cpu_count() or 1) // case_world),
                    on_start=reporter.started, on_record=keep,
                ) as supervisor:
                    supervisor.run(group)
            state = "finished"
        finally:
            journal.end(state)
    return finish(console, journal)
