"""The joined way of running: under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) or
Slurm (SLURM_PROCID, SLURM_NTASKS > 1, plus MASTER_ADDR/MASTER_PORT), every process is one rank;
rank 0 writes the run directory, and a watchdog on each rank bounds every case, since no parent
supervises them."""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import replace
from typing import NamedTuple, Optional

from harness.core import registry
from harness.core.console import Console
from harness.core.fingerprintfile import JOINED
from harness.core.options import UsageError
from harness.core.records import UNKNOWN_START, ErrorInfo, Record, utc_now_iso
from harness.core.scale import MAX_WORLD
from harness.run import fingerprint
from harness.run.launchenv import env_host, env_int
from harness.run.limit import overran_by
from harness.run.plan import RunJournal, RunOptions, RunPlan, plan_run, refuse_unavailable
from harness.run.reporter import Reporter, announce, finish

MAX_PORT = 65535


def _rendezvous(env) -> None:
    """Where the ranks meet (torch's env://), checked before any rank tries it."""
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
    if missing:
        raise UsageError(f"set {' and '.join(missing)} (torchrun sets them; under Slurm see README: Slurm) "
                         "so ranks can meet")
    env_host(env, "MASTER_ADDR")
    env_int(env, "MASTER_PORT", 1, MAX_PORT)


class Position(NamedTuple):
    """Where this process is in a torchrun/Slurm job."""

    rank: int
    world: int
    local_rank: int
    launcher: str  # "torchrun" or "slurm"


# torchrun's pair: one without the other is a launcher environment half set, not a local run.
TORCHRUN_PAIR = ("RANK", "WORLD_SIZE")


def position(env=os.environ) -> Optional[Position]:
    """The one decision of whether this process is a rank of a torchrun/Slurm job and which one
    (None: a local launch), made alike by ``critpath run`` and by ``critpath accept``, which judges
    on rank 0 alone. RANK without WORLD_SIZE (or the reverse) is refused: read as a local run, every
    rank would run the cases itself and the one that reads RANK=1 would judge none of them."""
    held = [k for k in TORCHRUN_PAIR if k in env]
    if len(held) == 1:
        missing = next(k for k in TORCHRUN_PAIR if k not in env)
        low, high = (0, MAX_WORLD - 1) if held[0] == "RANK" else (1, MAX_WORLD)
        env_int(env, held[0], low, high)  # a value that is no rank or world is named first
        raise UsageError(f"{held[0]} is set but {missing} is not: set both (torchrun does) for a joined run, "
                         "or neither for a local one")
    if held:
        world = env_int(env, "WORLD_SIZE", 1, MAX_WORLD)
        rank, local = env_int(env, "RANK", 0, world - 1), env_int(env, "LOCAL_RANK", 0, world - 1, 0)
        launcher = "torchrun"
    elif "SLURM_PROCID" in env and env_int(env, "SLURM_NTASKS", 1, MAX_WORLD, 1) > 1:
        world = env_int(env, "SLURM_NTASKS", 1, MAX_WORLD)
        rank, local = env_int(env, "SLURM_PROCID", 0, world - 1), env_int(env, "SLURM_LOCALID", 0, world - 1, 0)
        launcher = "slurm"
    else:
        return None
    _rendezvous(env)
    _hold_node_variables(env, launcher, world, local)
    return Position(rank, world, local, launcher)


def _hold_node_variables(env, launcher: str, world: int, local: int) -> None:
    """The node's variables, checked before the ranks meet and against the job's world: a node runs
    at most the job's ranks, a local rank is one of its node's, and a node rank one of the job's
    nodes (torchrun's GROUP_RANK is the node's rank among ``--nnodes`` worker groups of
    LOCAL_WORLD_SIZE ranks each). Read otherwise, the fingerprint would record a layout the job
    cannot have (4 ranks on a node of a 1-rank job)."""
    world_var = "WORLD_SIZE" if launcher == "torchrun" else "SLURM_NTASKS"
    found, local_world = fingerprint.launcher_layout(env)
    local_world_var = fingerprint.local_world_var(env)
    if local_world is not None and local_world > world:
        raise UsageError(f"{local_world_var}={local_world}: expected an integer in [1, {world}], at most the "
                         f"{world} ranks of the job ({world_var}={world})")
    if local_world is not None and local >= local_world:
        local_var = "LOCAL_RANK" if launcher == "torchrun" else "SLURM_LOCALID"
        raise UsageError(f"{local_var}={local}: expected an integer in [0, {local_world - 1}], one of the "
                         f"{local_world} ranks the launcher starts on this node ({local_world_var})")
    if found is None:
        return
    node_var, node = found
    if local_world is None:  # each node holds a rank at least
        nodes, whence = world, f"at most, each node holding a rank of {world_var}={world}"
    elif world % local_world == 0:  # torchrun's: every node runs LOCAL_WORLD_SIZE ranks
        nodes, whence = world // local_world, f"{world_var}={world} / {local_world_var}={local_world}"
    else:  # nodes of unequal sizes: this one holds its ranks, each other one at least
        nodes = world - local_world + 1
        whence = f"at most, of {world_var}={world} with {local_world_var}={local_world} here"
    if node >= nodes:
        raise UsageError(f"{node_var}={node}: expected an integer in [0, {nodes - 1}], one of the {nodes} "
                         f"node(s) of the job ({whence})")


def joined_rank(env=os.environ):
    """The rank this process is in a torchrun/Slurm job, or None for a local launch."""
    # torch (a second or more): only a run that has ranks loads it, not whoever imports the runner
    from harness.run.worker import Rank, pick_backend

    me = position(env)
    if me is None:
        return None
    if me.launcher == "slurm":  # torch's env:// reads torchrun's names
        os.environ.update(RANK=str(me.rank), WORLD_SIZE=str(me.world), LOCAL_RANK=str(me.local_rank))
    return Rank(me.rank, me.world, me.local_rank, pick_backend(None, me.local_rank))


def joined_plan(opts: RunOptions, me) -> RunPlan:
    """The same plan on every rank, made before the ranks meet: a bad selection fails each of them
    alike instead of leaving the others waiting for it."""
    from harness.run.worker import backend_unavailable  # torch: joined_rank has loaded it

    if opts.world not in (None, me.world):
        raise UsageError(f"--world {opts.world} but the job has WORLD_SIZE={me.world}")
    backend = opts.backend or me.backend
    refuse_unavailable(opts, backend, backend_unavailable(backend, me.local_rank + 1))  # this rank's device
    return plan_run(opts, me.world, backend)


class _FileSink:
    """Rank 0 keeps each record in the journal; other ranks report failures on stderr."""

    def __init__(self, me, journal: Optional[RunJournal], reporter: Optional[Reporter], plan: RunPlan) -> None:
        self.me, self.journal, self.reporter = me, journal, reporter
        self.backend, self.timeout_s = plan.backend, plan.timeout_s
        self.started_at = ""
        self.started_s = 0.0  # monotonic, when the current case started
        self.watchdog: Optional[threading.Timer] = None

    def started(self, case_id: str, rank: int) -> None:
        self.started_at, self.started_s = utc_now_iso(), time.monotonic()
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
        overran = overran_by(time.monotonic() - self.started_s, self.timeout_s) if record.ok else ""
        if overran:  # it ended before the watchdog ran, but past its limit: not an ok case
            record = Record.failure(registry.parse(record.case_id), record.run_id, ErrorInfo("timeout", overran, self.me.rank),
                                    self.backend, self.started_at or UNKNOWN_START)
        if self.journal is not None:
            self.journal.keep(record)
            self.reporter.finished(record)

    def failed(self, case_id: str, error: ErrorInfo) -> None:
        if error.kind != "timeout":
            self._disarm()
        if self.journal is None:
            print(f"critpath rank {self.me.rank}: {case_id} failed: {error.kind}: {error.message}", file=sys.stderr)
            return
        self.record(Record.failure(registry.parse(case_id), self.journal.run_id, error, self.backend,
                                   self.started_at or UNKNOWN_START))

    def finished(self, rank: int) -> None:
        self._disarm()


def run_joined(plan: RunPlan, me, console: Console) -> int:
    """Every process is one rank of a torchrun/Slurm job. A failing case is recorded by rank 0
    and ends the job (the other ranks may be stuck in a collective with the failed rank); the
    launcher's restart policy or a new run picks up from there."""
    import torch.distributed as dist  # torch: see joined_rank

    from harness.run.worker import init_group, serve

    me = replace(me, backend=plan.backend)
    comm = init_group(me, plan.timeout_s)
    # Every rank says where it runs (over the gloo control group, before any case) so rank 0 can
    # record the node layout: a result from 2 x 8 GPUs means little without it.
    identities = comm.gather(fingerprint.rank_identity(me.rank, me.local_rank), me.rank)
    journal = RunJournal.open(plan) if me.rank == 0 else None
    reporter = None
    if journal is not None:
        layout = fingerprint.node_layout(identities)
        journal.start(fingerprint.collect(plan.backend, me.world, JOINED, layout))
        announce(console, journal, f"world {me.world} on {layout['nodes']} node(s) "
                                   f"({', '.join(map(str, layout['ranks_per_node']))} ranks)")
        reporter = Reporter(console, len(plan.cases))
    ok = serve(list(plan.cases), me, comm, plan.policy, journal.run_id if journal else "joined",
               _FileSink(me, journal, reporter, plan))
    if journal is not None:
        journal.end("finished" if ok else "aborted")
        code = finish(console, journal)
    else:
        code = 0 if ok else 1
    if ok:
        dist.destroy_process_group()
    else:
        os._exit(1)  # peers may be blocked in a collective; do not wait for them
    return code
