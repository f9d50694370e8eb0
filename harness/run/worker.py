"""The rank side of a run: join a process group, run cases in order, hand records to a sink.

The same loop serves both ways of starting ranks:
- spawned locally by ``harness.run.launcher`` (the sink is a pipe to the supervising parent, which
  owns timeouts and writes the run directory);
- started by torchrun or Slurm (the sink on rank 0 writes the run directory itself).
"""
from __future__ import annotations

import datetime as _dt
import faulthandler
import os
import signal
import socket
import time
import traceback
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

import torch
import torch.distributed as dist

from harness.core import registry
from harness.core.case import Case
from harness.run.driver import Collectives, run_case
from harness.core.family import RankContext
from harness.run.lifetime import die_with_parent
from harness.core.records import ErrorInfo, Record
from harness.run.timing import PlanPolicy


class Sink(Protocol):
    def started(self, case_id: str, rank: int) -> None: ...
    def record(self, record: Record) -> None: ...
    def failed(self, case_id: str, error: ErrorInfo) -> None: ...
    def finished(self, rank: int) -> None: ...


@dataclass(frozen=True)
class Rank:
    rank: int
    world: int
    local_rank: int
    backend: str


def pick_backend(requested: Optional[str], local_rank: int) -> str:
    """NCCL when this rank has a GPU of its own, else gloo; ``requested`` overrides."""
    if requested:
        return requested
    return "gloo" if backend_unavailable("nccl", local_rank + 1) else "nccl"


def backend_unavailable(backend: str, ranks_here: int) -> str:
    """Why ``backend`` cannot join ``ranks_here`` ranks on this host with this torch build, '' when
    it can: asked before a run starts, so that it is refused once instead of failing every case
    ("Distributed package doesn't have NCCL built in")."""
    if not getattr(dist, f"is_{backend}_available")():
        return f"this torch build has no {backend} backend (torch.distributed.is_{backend}_available() is False)"
    if backend == "nccl":  # each rank drives a CUDA device of its own (device_for)
        devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if devices < ranks_here:
            return (f"NCCL runs each rank on a CUDA device of its own: {ranks_here} rank(s) on this host, "
                    f"{devices} CUDA device(s)")
    return ""


def device_for(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_group(me: Rank, timeout_s: float, store=None) -> Collectives:
    """Join the default group and make the gloo control group used for bookkeeping."""
    timeout = _dt.timedelta(seconds=timeout_s)
    kwargs = {"store": store} if store is not None else {"init_method": "env://"}
    dist.init_process_group(me.backend, rank=me.rank, world_size=me.world, timeout=timeout, **kwargs)
    control = dist.new_group(backend="gloo", timeout=timeout) if me.world > 1 else None
    return Collectives(control, me.world)


def serve(cases: Sequence[Case], me: Rank, comm: Collectives, policy: PlanPolicy, run_id: str, sink: Sink) -> bool:
    """Run ``cases`` in order. Returns False after the first failing case: the other ranks may be
    blocked inside a collective with this one, so this process must not go on alone."""
    device = device_for(me.backend, me.local_rank)
    ctx = RankContext(me.rank, me.world, me.local_rank, me.backend, device, dist.group.WORLD)
    single = Collectives(None, 1)
    for case in cases:
        if case.world not in (1, me.world):
            if me.rank == 0:
                sink.failed(case.id, ErrorInfo("world", f"case needs {case.world} ranks; this job has {me.world}"))
            continue
        # One-rank cases (servers, simulators) run on rank 0 alone while the others move on.
        solo = case.world == 1 and me.world > 1
        if solo and me.rank != 0:
            continue
        sink.started(case.id, me.rank)
        try:
            record = run_case(
                registry.get(case.family), case,
                RankContext(0, 1, me.local_rank, me.backend, device, None) if solo else ctx,
                single if solo else comm, policy, run_id,
            )
            if record is not None:
                record.to_json()  # validate here: a family's invalid figures fail its case, not the run
                sink.record(record)
        except BaseException as exc:  # noqa: BLE001 - every failure must become a record
            if isinstance(exc, KeyboardInterrupt):
                raise
            sink.failed(case.id, ErrorInfo(type(exc).__name__, str(exc), me.rank, traceback.format_exc()))
            return False
    sink.finished(me.rank)
    return True


class PipeSink:
    """Events to the supervising parent over this rank's own pipe (see launcher._Inbox for why
    not a queue shared by all ranks)."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def put(self, event: tuple) -> None:
        self.conn.send(event)

    def started(self, case_id: str, rank: int) -> None:
        self.put(("start", case_id, rank))

    def record(self, record: Record) -> None:
        self.put(("record", record.to_dict()))

    def failed(self, case_id: str, error: ErrorInfo) -> None:
        # The time on the host's monotonic clock lets the supervisor tell which rank failed first.
        self.put(("error", case_id, error.to_dict(), time.monotonic()))

    def finished(self, rank: int) -> None:
        self.put(("done", rank))

    def flush(self) -> None:
        # send() has written each event whole before returning; closing tells the parent we are done.
        self.conn.close()


@dataclass(frozen=True)
class SpawnSpec:
    me: Rank
    pool_dir: str  # the supervisor's private directory: the FileStore and this rank's stack dump
    run_id: str
    pg_timeout_s: float
    threads: int


# In the pool directory: the ranks' rendezvous, and a rank's main-thread stack dumped on SIGUSR1.
STORE_FILE = "store"
STACK_FILE = "stack-{rank}.txt"


def loopback_interface() -> str:
    """The loopback interface's name ("lo" on Linux, "lo0" on macOS)."""
    names = [name for _, name in socket.if_nameindex()]
    return next((n for n in names if n in ("lo", "lo0")), next((n for n in names if n.startswith("lo")), "lo"))


def spawned_main(spec: SpawnSpec, commands, events) -> None:
    """Entry point of a locally spawned rank (multiprocessing, spawn start method).

    The rank joins the group once, then serves batches of cases from ``commands`` until it gets
    None (the supervisor is done with it) or a case fails (its peers may be stuck in a collective
    with it, so the pool ends and the supervisor starts a fresh one)."""
    # Own session: the supervisor kills this rank and anything it started (servers) as a group.
    os.setsid()
    die_with_parent()
    # On SIGUSR1, this rank's stack into the pool directory: when a case times out, the
    # supervisor reads which rank was stuck in its own code and which waited for a peer.
    stack_file = open(os.path.join(spec.pool_dir, STACK_FILE.format(rank=spec.me.rank)), "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=False)
    torch.set_num_threads(spec.threads)
    sink = PipeSink(events)
    ok = False
    try:
        # gloo would bind the interface of the host name; a local run keeps every pair on loopback.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
        store = dist.FileStore(os.path.join(spec.pool_dir, STORE_FILE), spec.me.world)
        comm = init_group(spec.me, spec.pg_timeout_s, store=store)
        sink.put(("up", spec.me.rank))
        ok = True
        while ok:
            batch = commands.get()
            if batch is None:
                break
            cases, policy = batch
            ok = serve(cases, spec.me, comm, policy, spec.run_id, sink)
        if ok:
            dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001
        ok = False
        if not isinstance(exc, KeyboardInterrupt):
            error = ErrorInfo(type(exc).__name__, str(exc), spec.me.rank, traceback.format_exc())
            sink.put(("fatal", spec.me.rank, error.to_dict(), time.monotonic()))
    finally:
        sink.flush()
    os._exit(0 if ok else 3)
