"""Local launch: spawn N ranks on this machine and supervise them.

The parent owns the pool's private directory (its rendezvous FileStore: a TCPStore listens on
every interface, whatever address it is given), the per-case deadline and the cleanup. Ranks pin
gloo to the loopback interface, so a local run opens no listener off 127.0.0.1. A rank that
raises, exits or hangs past the timeout turns
its case into a failed/timeout record; the whole pool is then killed (every rank, with anything it
started, as a process group) and a fresh pool carries on with the next case. Nothing waits forever:
each case has a deadline and so does pool start-up. Between batches the pool stays up (see
``Supervisor``), so repeated batches do not pay for spawning ranks again.
"""
from __future__ import annotations

import linecache
import math
import multiprocessing as mp
import os
import re
from multiprocessing import connection as mp_connection
import shutil
import signal
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from harness.core.case import Case
from harness.core.procstat import stopped_state
from harness.core.records import ErrorInfo, Record, utc_now_iso
from harness.run.limit import POOL_START_TIMEOUT_S, overran_by
from harness.run.timing import PlanPolicy
from harness.run.worker import STACK_FILE, Rank, SpawnSpec, spawned_main

POLL_S = 0.1
CLOSE_GRACE_S = 10.0  # idle ranks leave the group within this, or are killed
DEATH_GRACE_S = 3.0  # after a rank dies, how long its peers get to report what they finished
ERROR_GRACE_S = 0.5  # after a rank reports a failure, how long the others get to report theirs


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


POOL_DIR_PREFIX = "critpath-run-"
STACK_WAIT_S = 0.5
_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')
# A Work handle's wait (isend/irecv's request.wait()) runs in C++, so a rank blocked in one shows
# no torch/distributed frame: its innermost frame is the harness line making the call.
_WORK_WAIT = re.compile(r"\.wait\(\s*\)")


def _waits_for_peer(frames: list[tuple[str, str, str]]) -> bool:
    """Whether a main-thread stack (innermost first) is blocked on a peer: in torch.distributed,
    or at a harness line that waits on a torch.distributed Work handle."""
    if any("torch/distributed" in path for path, _, _ in frames):
        return True
    path, line, _ = frames[0]
    return "/harness/" in path and bool(_WORK_WAIT.search(linecache.getline(path, int(line))))


def _where(frames: list[tuple[str, str, str]]) -> str:
    path, line, function = next((f for f in frames if "/harness/" in f[0]), frames[0])
    return f"{function} (harness/{path.split('/harness/')[-1]}:{line})"


def hung_ranks(procs, pool_dir: str) -> tuple[list[int], str]:
    """Which ranks hold the case up rather than waiting for a peer: each live rank dumps its main
    thread's stack (faulthandler, SIGUSR1) before it is killed. A rank stopped by a signal (state T
    in /proc) cannot dump and cannot run, so it is named first, whatever the others show; otherwise
    a rank stuck in its own code is named where it is, and where none is, the one rank that gave no
    dump at all. A rank blocked in a peer wait (torch.distributed, or a Work's wait in harness code)
    is waiting for the one named, never blamed. Returns the ranks blamed and a sentence naming what
    each one did."""
    if not pool_dir:
        return [], ""
    live = [(rank, p) for rank, p in enumerate(procs) if p.exitcode is None and p.pid]
    for rank, proc in live:
        path = os.path.join(pool_dir, STACK_FILE.format(rank=rank))
        try:
            open(path, "w").close()  # truncate: only this dump counts
            os.kill(proc.pid, signal.SIGUSR1)
        except OSError:
            pass
    time.sleep(STACK_WAIT_S)
    busy, waiting, silent = {}, [], []
    for rank, _ in live:
        try:
            text = open(os.path.join(pool_dir, STACK_FILE.format(rank=rank))).read()
        except OSError:
            text = ""
        frames = _FRAME.findall(text.split("\n\n")[0])  # the main thread: the first block
        if not frames:
            silent.append(rank)
        elif _waits_for_peer(frames):
            waiting.append(rank)
        else:
            busy[rank] = _where(frames)
    hung, notes = _stopped(silent, dict(live))
    if hung:
        notes += [f"rank {rank} was in {where}" for rank, where in busy.items()]
    elif busy:
        hung = list(busy)
        notes = [f"rank {rank} hung in {where}" for rank, where in busy.items()]
    else:
        hung, notes = _unanswering(silent)
    if waiting and notes:
        notes.append(f"ranks {waiting} were waiting for it in torch.distributed")
    return hung, "; ".join(notes)


def _stopped(silent: list[int], procs: dict) -> tuple[list[int], list[str]]:
    """Of the ranks that gave no stack dump, the one stopped (a stopped rank cannot run its SIGUSR1
    handler), with its state. None where that is not one rank."""
    stopped = [(rank, state) for rank in silent if (state := stopped_state(procs[rank].pid))]
    if len(stopped) != 1:
        return [], []
    rank, state = stopped[0]
    return [rank], [f"rank {rank} was stopped (state {state}) and gave no stack dump"]


def _unanswering(silent: list[int]) -> tuple[list[int], list[str]]:
    """One silent rank alone, none of them stopped, is named as silent; none where there are more."""
    if len(silent) == 1:
        return silent, [f"rank {silent[0]} gave no stack dump"]
    return [], []


def remove_stale_pool_dirs(root: Optional[str] = None) -> None:
    """Pool directories whose process is gone (killed with SIGKILL, so nothing cleaned up)."""
    root = root or tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if not name.startswith(POOL_DIR_PREFIX):
            continue
        pid = name[len(POOL_DIR_PREFIX):].split("-", 1)[0]
        path = os.path.join(root, name)
        if not (pid.isascii() and pid.isdigit()) or os.stat(path).st_uid != os.getuid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass


@contextmanager
def _child_env(**values: str):
    """Environment for the processes started inside: spawn copies os.environ at start."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass
class Supervisor:
    """Runs ``cases`` (all of one world size) on locally spawned ranks.

    The ranks stay up between calls to ``run`` (one pool serves every batch until a case fails
    or ``close``), so a caller that runs the same cases again and again, like a gate worker
    serving many repeats, pays for spawning ranks and joining the group once. Use it as a
    context manager, or call ``close``."""

    world: int
    backend: str
    policy: PlanPolicy
    run_id: str
    case_timeout_s: float
    start_timeout_s: float = POOL_START_TIMEOUT_S
    threads_per_rank: int = 1
    on_start: Callable[[str], None] = lambda case_id: None
    on_record: Callable[[Record], None] = lambda record: None
    _ctx: mp.context.BaseContext = field(default_factory=lambda: mp.get_context("spawn"))
    _pool: Optional["_Pool"] = None

    def __enter__(self) -> "Supervisor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, cases: Sequence[Case], policy: Optional[PlanPolicy] = None) -> None:
        """Every case gets a record (ok, failed or timeout), in order. ``policy`` overrides the
        loop policy for this batch (a gate fixes each case's iterations once for both sides)."""
        pending = list(cases)
        policy = policy or self.policy
        while pending:
            self.start()
            done = self._run_batch(self._pool, pending, policy)
            pending = pending[done:]

    def start(self, wait: bool = False) -> None:
        """Spawn the ranks now; ``run`` would otherwise spawn them on first use. With ``wait``,
        return once every rank has joined the group (a caller about to time something on this
        machine does not want ranks still importing torch beside it)."""
        if self._pool is None:
            self._pool = self._start_pool()
        if wait:
            self._await_up(self._pool)

    def _await_up(self, pool: "_Pool") -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while len(pool.up) < self.world:
            event = pool.events.get(POLL_S)
            if event is not None and event[0] == "up":
                pool.up.add(event[1])
                continue
            if event is not None:
                pool.early.append(event)  # an error before the first batch: that batch reports it
                return
            if any(p.exitcode is not None for p in pool.procs) or time.monotonic() > deadline:
                return  # the first batch finds the dead or late rank and records why

    def close(self) -> None:
        """Ask idle ranks to leave the group, then make sure every one is gone."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for commands in pool.commands:
            try:
                commands.put(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + CLOSE_GRACE_S
        for proc in pool.procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        self._discard(pool)

    def _start_pool(self) -> "_Pool":
        remove_stale_pool_dirs()
        # Mode 0700, named after this process: the store, and every temporary file the ranks and
        # their servers make (their TMPDIR), go when the pool does, or at the next run's start
        # when this process was killed before it could clean up.
        pool_dir = tempfile.mkdtemp(prefix=f"{POOL_DIR_PREFIX}{os.getpid()}-")
        pool = _Pool(pool_dir, _Inbox([]), started_at=time.monotonic())
        try:
            self._spawn_ranks(pool)
        except BaseException:
            # Not yet this supervisor's pool, so close() cannot see it: an interrupt (SIGTERM
            # unwinds as one) between two ranks' starts left the directory and the ranks started.
            self._discard(pool)
            raise
        return pool

    def _spawn_ranks(self, pool: "_Pool") -> None:
        pool_dir = pool.dir
        for rank in range(self.world):
            commands = self._ctx.Queue()
            reader, events = self._ctx.Pipe(duplex=False)
            pool.events.readers.append(reader)
            spec = SpawnSpec(
                Rank(rank, self.world, rank, self.backend), pool_dir, self.run_id,
                pg_timeout_s=self.case_timeout_s + self.start_timeout_s, threads=self.threads_per_rank,
            )
            proc = self._ctx.Process(target=spawned_main, args=(spec, commands, events), name=f"critpath-rank{rank}",
                                     daemon=False)
            pool.procs.append(proc)  # before its start: an interrupt inside start() still finds it to kill
            pool.commands.append(commands)
            with _child_env(TMPDIR=pool_dir):
                proc.start()
            events.close()  # the rank holds the writing end; EOF then means the rank is gone

    def _discard(self, pool: "_Pool") -> None:
        self._kill(pool.procs)
        pool.events.close()
        for q in pool.commands:
            q.close()
        shutil.rmtree(pool.dir, ignore_errors=True)

    # One batch on one pool: returns how many of ``pending`` got a record (ok or not). A failed
    # case ends the pool (its peers may be stuck in a collective with the failed rank).
    def _run_batch(self, pool: "_Pool", pending: list[Case], policy: PlanPolicy) -> int:
        for commands in pool.commands:
            commands.put((tuple(pending), policy))
        # The first batch of a pool includes spawning and joining the group.
        # That is start_timeout_s, not case_timeout_s (--timeout): ranks import torch and rendezvous
        # before the first case, which on a loaded machine takes longer than a short --timeout.
        starting = pool.batches == 0
        limit_s = self.start_timeout_s if starting else self.case_timeout_s
        pool.batches += 1
        state = _PoolState(deadline=time.monotonic() + limit_s, procs=pool.procs, early=pool.early, inbox=pool.events,
                           pool_dir=pool.dir, starting=starting)
        procs, events = pool.procs, pool.events
        outcome: Optional[int] = None
        try:
            while outcome is None:
                outcome = self._poll(events, procs, pending, state)
            return outcome
        finally:
            if outcome is None or state.failed:
                self._pool = None
                self._discard(pool)

    def _poll(self, events, procs, pending: list[Case], state: "_PoolState") -> Optional[int]:
        event = state.early.pop(0) if state.early else events.get(POLL_S)
        if event is not None:
            return self._handle(event, pending, state)
        dead = [(rank, p.exitcode) for rank, p in enumerate(procs) if p.exitcode is not None]
        if dead:
            # What the others say next comes first: a peer may still deliver the record of the
            # case it finished before this rank died (its events can lag on a busy
            # machine), and then fail on the next case naming the dead rank. Blame only what
            # nobody accounts for within the grace.
            grace = time.monotonic() + DEATH_GRACE_S
            while time.monotonic() < grace:
                event = events.get(POLL_S)
                if event is None:
                    if all(p.exitcode is not None for p in procs) and not events.readers:
                        break  # nobody left to report anything
                    continue
                outcome = self._handle(event, pending, state)
                if outcome is not None:
                    return outcome
            rank, code = dead[0]
            error = ErrorInfo("exit", f"rank {rank} {_describe_exit(code)} without reporting an error", rank)
            self._fail(pending, state, error)
            return state.completed + 1
        if time.monotonic() > state.deadline:
            if state.current:
                what = f"case did not finish within {self.case_timeout_s:g} s"
            elif state.starting and state.completed == 0:
                what = f"ranks did not start within {self.start_timeout_s:g} s (a pool's start, which --timeout does not bound)"
            else:
                what = "ranks did not reach the next case in time"
            waiting = sorted(set(range(self.world)) - state.finished)
            hung, where = hung_ranks(state.procs, state.pool_dir)
            why = f"; {where}" if where else ""
            error = ErrorInfo("timeout", f"{what}{why}; killed ranks {waiting}", hung[0] if len(hung) == 1 else None)
            self._fail(pending, state, error)
            return state.completed + 1
        return None

    def _handle(self, event: tuple, pending: list[Case], state: "_PoolState") -> Optional[int]:
        """Apply one event; returns the batch's outcome when the batch is finished."""
        kind, now = event[0], time.monotonic()
        if kind == "up":
            return None  # a rank joined the group; its cases come next
        if kind == "start" and event[1] != state.current:
            state.current, state.started_at, state.since = event[1], utc_now_iso(), now
            state.deadline = now + self.case_timeout_s
            self.on_start(state.current)
        elif kind == "record":
            record = Record.from_dict(event[1])
            self._expect(pending, state.completed, record.case_id)
            overran = overran_by(now - state.since, self.case_timeout_s) if state.current else ""
            if overran:  # it ended between two polls but past its limit: not an ok case
                self._fail(pending, state, ErrorInfo("timeout", overran, None))
                return state.completed + 1
            self.on_record(record.with_run_id(self.run_id))
            state.completed += 1
            state.current, state.since = None, now
            state.deadline = now + self.case_timeout_s  # until the next case starts
        elif kind in ("error", "fatal"):
            self._fail(pending, state, self._root_cause(self._first_error(event, state), state.procs))
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

    def _first_error(self, event: tuple, state: "_PoolState") -> ErrorInfo:
        """Every rank that fails says so, and its peers then fail too, on a closed connection:
        the cause is the failure that happened first. Gather the other ranks' reports for a
        moment and take the earliest by the ranks' common monotonic clock."""
        reports = [event]
        grace = time.monotonic() + ERROR_GRACE_S
        while time.monotonic() < grace and len(reports) < self.world:
            more = state.inbox.get(POLL_S)
            if more is None:
                if all(p.exitcode is not None for p in state.procs) and not state.inbox.readers:
                    break
                continue
            if more[0] in ("error", "fatal"):
                reports.append(more)
        earliest = min(reports, key=lambda e: e[3] if len(e) > 3 else math.inf)
        return ErrorInfo(**earliest[2])

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

    def _fail(self, pending: list[Case], state: "_PoolState", error: ErrorInfo) -> None:
        state.failed = True
        case = pending[state.completed]
        self.on_record(Record.failure(case, self.run_id, error, self.backend, state.started_at,
                                      max(0.0, time.monotonic() - state.since)))

    @staticmethod
    def _kill(procs) -> None:
        for proc in procs:
            if not proc.pid:
                continue
            # The rank's whole group (setsid): its servers too, even when the rank itself is
            # already dead (a rank that died left them in its group, not with it).
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                if proc.exitcode is None:
                    proc.kill()
        for proc in procs:
            if proc.pid:  # one an interrupt kept from starting has nothing to join
                proc.join(timeout=10)


class _Inbox:
    """Events from every rank, each over a pipe of its own.

    One shared multiprocessing Queue would be simpler, but its writers share a lock: a rank
    that dies while its feeder thread holds that lock (``os._exit`` in a step, a SIGKILL) leaves
    every other rank unable to report anything, and the case they finished is then lost. With a
    pipe per rank nothing is shared, and a pipe cut mid-message is just that rank's end."""

    def __init__(self, readers: Sequence) -> None:
        self.readers = list(readers)
        self.ready: list = []

    def get(self, timeout: float) -> Optional[tuple]:
        """The next event, or None if none came within ``timeout``."""
        if not self.ready and self.readers:
            for reader in mp_connection.wait(self.readers, timeout):
                try:
                    self.ready.append(reader.recv())
                except (EOFError, OSError):
                    self.readers.remove(reader)  # the rank is gone; its exit code says how
        elif not self.readers:
            time.sleep(timeout)
        return self.ready.pop(0) if self.ready else None

    def close(self) -> None:
        for reader in self.readers:
            reader.close()
        self.readers = []


@dataclass
class _Pool:
    """Ranks that are up, with the directory of the store they met at and a command queue each."""

    dir: str  # the pool's private directory (its FileStore, the ranks' TMPDIR and stacks), removed with it
    events: Any
    started_at: float
    procs: list = field(default_factory=list)
    commands: list = field(default_factory=list)
    batches: int = 0
    up: set = field(default_factory=set)  # ranks that have joined the group
    early: list = field(default_factory=list)  # events read while waiting for ranks to join


@dataclass
class _PoolState:
    deadline: float
    completed: int = 0
    current: Optional[str] = None
    started_at: str = field(default_factory=utc_now_iso)
    since: float = field(default_factory=time.monotonic)
    finished: set = field(default_factory=set)
    procs: list = field(default_factory=list)
    failed: bool = False
    early: list = field(default_factory=list)
    inbox: Optional[_Inbox] = None
    pool_dir: str = ""  # where each rank dumps its stack when asked (which rank hung)
    starting: bool = False  # the pool's first batch: its ranks start and join the group in it


