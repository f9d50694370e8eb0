"""Local launch: spawn N ranks on this machine and supervise them.

The parent owns the rendezvous store (a TCPStore on 127.0.0.1, free port chosen by the kernel),
the per-case deadline and the cleanup. A rank that raises, exits or hangs past the timeout turns
its case into a failed/timeout record; the whole pool is then killed (every rank, with anything it
started, as a process group) and a fresh pool carries on with the next case. Nothing waits forever:
each case has a deadline and so does pool start-up.
"""
from __future__ import annotations

import datetime as _dt
import multiprocessing as mp
import os
import queue as _queue
import signal
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch.distributed as dist

from harness.case import Case
from harness.records import ErrorInfo, Record
from harness.timing import PlanPolicy
from harness.worker import Rank, SpawnSpec, spawned_main

POLL_S = 0.1


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class Supervisor:
    """Runs ``cases`` (all of one world size) on locally spawned ranks."""

    world: int
    backend: str
    policy: PlanPolicy
    run_id: str
    case_timeout_s: float
    start_timeout_s: float = 120.0
    threads_per_rank: int = 1
    on_start: Callable[[str], None] = lambda case_id: None
    on_record: Callable[[Record], None] = lambda record: None
    _ctx: mp.context.BaseContext = field(default_factory=lambda: mp.get_context("spawn"))

    def run(self, cases: Sequence[Case]) -> None:
        pending = list(cases)
        while pending:
            done = self._run_pool(pending)
            pending = pending[done:]

    # One pool: returns how many of ``pending`` got a record (ok or not).
    def _run_pool(self, pending: list[Case]) -> int:
        store = dist.TCPStore(
            "127.0.0.1", 0, self.world, is_master=True, wait_for_workers=False,
            timeout=_dt.timedelta(seconds=self.start_timeout_s),
        )
        events = self._ctx.Queue()
        procs = []
        for rank in range(self.world):
            spec = SpawnSpec(
                Rank(rank, self.world, rank, self.backend), store.port, tuple(pending), self.policy,
                self.run_id, pg_timeout_s=self.case_timeout_s + self.start_timeout_s,
                threads=self.threads_per_rank,
            )
            proc = self._ctx.Process(target=spawned_main, args=(spec, events), name=f"critpath-rank{rank}", daemon=False)
            proc.start()
            procs.append(proc)
        state = _PoolState(deadline=time.monotonic() + self.start_timeout_s, procs=procs)
        try:
            while True:
                try:
                    event = events.get(timeout=POLL_S)
                except _queue.Empty:
                    event = None
                if event is not None:
                    outcome = self._handle(event, pending, state)
                    if outcome is not None:
                        return outcome
                    continue
                dead = [(rank, p.exitcode) for rank, p in enumerate(procs) if p.exitcode is not None]
                if dead:
                    # Events a rank queued just before it exited (its error, or "done") come first.
                    while True:
                        try:
                            event = events.get(timeout=POLL_S)
                        except _queue.Empty:
                            break
                        outcome = self._handle(event, pending, state)
                        if outcome is not None:
                            return outcome
                    lost = [(rank, code) for rank, code in dead if code != 0 or rank not in state.finished]
                    if lost:
                        rank, code = lost[0]
                        error = ErrorInfo("exit", f"rank {rank} {_describe_exit(code)} without reporting an error", rank)
                        self._fail(pending, state, "failed", error)
                        return state.completed + 1
                if time.monotonic() > state.deadline:
                    if state.current:
                        what = f"case did not finish within {self.case_timeout_s:g} s"
                    else:
                        what = "ranks did not reach the next case in time"
                    waiting = sorted(set(range(self.world)) - state.finished)
                    error = ErrorInfo("timeout", f"{what}; killed ranks {waiting}")
                    self._fail(pending, state, "timeout", error)
                    return state.completed + 1
        finally:
            self._kill(procs)
            events.close()
            del store

    def _handle(self, event: tuple, pending: list[Case], state: "_PoolState") -> Optional[int]:
        """Apply one event; returns the pool's outcome when the pool is finished."""
        kind, now = event[0], time.monotonic()
        if kind == "start" and event[1] != state.current:
            state.current, state.started_at, state.since = event[1], _now_iso(), now
            state.deadline = now + self.case_timeout_s
            self.on_start(state.current)
        elif kind == "record":
            record = Record.from_dict(event[1])
            self._expect(pending, state.completed, record.case_id)
            self.on_record(record.with_run_id(self.run_id))
            state.completed += 1
            state.current, state.since = None, now
            state.deadline = now + self.case_timeout_s  # until the next case starts
        elif kind in ("error", "fatal"):
            self._fail(pending, state, "failed", self._root_cause(ErrorInfo(**event[2]), state.procs))
            return state.completed + 1
        elif kind == "done":
            state.finished.add(event[1])
            if len(state.finished) == self.world:
                return state.completed
        return None

    @staticmethod
    def _expect(pending: list[Case], completed: int, case_id: str) -> None:
        if completed >= len(pending) or pending[completed].id != case_id:
            raise RuntimeError(f"rank 0 reported {case_id} out of order")

    @staticmethod
    def _root_cause(error: ErrorInfo, procs) -> ErrorInfo:
        """A rank that died silently makes its peers fail with "connection closed"; name the dead
        rank as the cause when one exits within a short grace period."""
        grace = time.monotonic() + 1.0
        while time.monotonic() < grace:
            dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0, 3)]
            if dead:
                rank, code = dead[0]
                return ErrorInfo(
                    "exit", f"rank {rank} {_describe_exit(code)}; rank {error.rank} then failed: {error.message}",
                    rank, error.traceback,
                )
            time.sleep(0.05)
        return error

    def _fail(self, pending: list[Case], state: "_PoolState", status: str, error: ErrorInfo) -> None:
        case = pending[state.completed]
        self.on_record(
            Record(
                run_id=self.run_id, case_id=case.id, family=case.family,
                family_version=_family_version(case.family), params=dict(case.params),
                status=status, backend=self.backend, world=case.world,
                started_at=state.started_at, wall_s=max(0.0, time.monotonic() - state.since), error=error,
                reduction="max_over_ranks" if case.world > 1 else "single_rank",
            )
        )

    @staticmethod
    def _kill(procs) -> None:
        for proc in procs:
            if proc.exitcode is None and proc.pid:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the rank and its children (setsid)
                except (ProcessLookupError, PermissionError):
                    proc.kill()
        for proc in procs:
            proc.join(timeout=10)


@dataclass
class _PoolState:
    deadline: float
    completed: int = 0
    current: Optional[str] = None
    started_at: str = field(default_factory=_now_iso)
    since: float = field(default_factory=time.monotonic)
    finished: set = field(default_factory=set)
    procs: list = field(default_factory=list)


def _family_version(name: str) -> int:
    from harness import registry

    return registry.get(name).version
