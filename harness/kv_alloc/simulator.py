"""Continuous batching, modelled: requests in, allocator calls out.

Time runs in decode steps of ``step_s`` seconds. A request arriving at ``t`` seconds of the trace
joins the queue at step ``floor(t / speedup / step_s)`` (``speedup`` > 1 replays the trace faster,
i.e. at a higher load). The scheduler is first-come first-served:

- Admission: while fewer than ``max_batch`` requests run, the head of the queue is admitted if
  the allocator can hold its initial allocation (the policy's: prompt + max tokens, prompt + one
  chunk, or the prompt's blocks). If it cannot, admission waits for memory to be freed
  (head-of-line); a request that cannot fit even with nothing else running is rejected.
- Decode: every running request stores one more token per step. When it outgrows its capacity
  the policy grows it (a bigger buffer replacing the old, or one more block). A growth that hits
  out-of-memory is a *decode OOM*: the request is preempted (its memory freed, and it goes back
  to the head of the queue to be recomputed from its prompt and the tokens it had), as vLLM does;
  a server without preemption would fail the request there.
- Completion: after its last token the request's memory is freed.

The simulator is event-driven (nothing happens between a request's growth points), records
every successful malloc/free in an event log that can be replayed on any allocator, and samples
the allocator's statistics on a fixed step grid for the time series.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from harness.kv_alloc.base import OutOfMemory
from harness.kv_alloc.traces import Trace
from harness.kv_alloc.workload import Policy, ReserveMax

# The allocator calls one replay logs (mallocs and frees): the log is held in memory twice, as lists
# while it is written and as arrays after. The whole azure_conv trace under per_block of 16 tokens,
# the largest shipped workload, logs 5.5 million in 44 s at 629 MB; one token a block would log 16
# times that. Past this many mallocs the replay stops with an error naming the bound.
MAX_LOG_MALLOCS = 1 << 22


class ReplayTooLarge(ValueError):
    """The replay would log more allocator calls than ``MAX_LOG_MALLOCS`` allows."""


SERIES = ("step", "reserved_bytes", "allocated_bytes", "internal_waste_bytes", "free_bytes",
          "largest_free_extent_bytes", "token_bytes", "running", "queued")


@dataclass(frozen=True)
class SimConfig:
    bytes_per_token: int
    step_s: float = 0.02
    speedup: float = 1.0
    max_batch: int = 256
    samples: int = 200  # points of the time series over the arrival window


@dataclass
class SimResult:
    requests: int
    admitted: int  # first admissions
    completed: int
    rejected: int  # could not fit even alone
    decode_ooms: int  # growth failures of running requests (each one a preemption)
    admission_waits: int  # admission attempts that found no memory (the request stayed queued)
    steps: int
    last_arrival_step: int
    mallocs: int
    frees: int
    series: dict = field(default_factory=dict)  # name -> np.ndarray, see SERIES
    event_ids: np.ndarray = None  # per op: the allocation's id in the log
    event_sizes: np.ndarray = None  # per op: bytes for a malloc, 0 for a free


class _Req:
    __slots__ = ("rid", "arrival", "prompt", "output", "start", "capacity", "handles", "gen", "admitted_once")

    def __init__(self, rid: int, arrival: int, prompt: int, output: int) -> None:
        self.rid = rid
        self.arrival = arrival
        self.prompt = prompt  # tokens in the KV at admission (grows on recompute after preemption)
        self.output = output  # tokens still to generate
        self.start = 0
        self.capacity = 0
        self.handles: list[tuple[int, int]] = []  # (log id, allocator handle)
        self.gen = 0  # bumps on preemption, so stale events are ignored
        self.admitted_once = False


_GROW, _DONE = 0, 1


def simulate(trace: Trace, policy: Policy, allocator, config: SimConfig) -> SimResult:
    bpt = config.bytes_per_token
    cap_out = policy.max_new_tokens if isinstance(policy, ReserveMax) else None
    arrivals = np.floor(trace.arrival_s / config.speedup / config.step_s).astype(np.int64)
    reqs = [
        _Req(i, int(a), int(p), int(min(o, cap_out) if cap_out else o))
        for i, (a, p, o) in enumerate(zip(arrivals, trace.prompt_tokens, trace.output_tokens))
    ]
    last_arrival = int(arrivals[-1])
    every = max(1, -(-last_arrival // max(1, config.samples)))
    series: dict[str, list] = {k: [] for k in SERIES}
    ev_ids: list[int] = []
    ev_sizes: list[int] = []
    malloc, free = allocator.malloc, allocator.free
    counts = dict(admitted=0, completed=0, rejected=0, decode_ooms=0, admission_waits=0)
    next_log_id = [0]
    heap: list = []
    seq = [0]
    queue: deque[_Req] = deque()
    running: dict[int, _Req] = {}
    # After a failed admission, retrying before anything is freed can only fail again.
    blocked = [False]

    def do_malloc(tokens: int) -> tuple[int, int]:
        size = tokens * bpt
        handle = malloc(size)  # may raise OutOfMemory
        lid = next_log_id[0]
        if lid >= MAX_LOG_MALLOCS:
            raise ReplayTooLarge(f"the replay passed MAX_LOG_MALLOCS = {MAX_LOG_MALLOCS} allocator mallocs of "
                                 f"{trace.name} (fewer requests, or more block_tokens)")
        next_log_id[0] += 1
        ev_ids.append(lid)
        ev_sizes.append(size)
        return lid, handle

    def do_free(entry: tuple[int, int]) -> None:
        free(entry[1])
        blocked[0] = False
        ev_ids.append(entry[0])
        ev_sizes.append(0)

    def push(step: int, kind: int, req: _Req) -> None:
        seq[0] += 1
        heapq.heappush(heap, (step, kind, seq[0], req.gen, req))

    def schedule(req: _Req) -> None:
        k = req.capacity - req.prompt + 1  # the step whose token no longer fits
        if k <= req.output:
            push(req.start + k, _GROW, req)
        push(req.start + req.output, _DONE, req)

    def try_admit(now: int) -> None:
        if blocked[0] and running:
            return
        while queue and len(running) < config.max_batch:
            req = queue[0]
            sizes, cap = policy.initial(req.prompt, req.output)
            got: list[tuple[int, int]] = []
            try:
                for tokens in sizes:
                    got.append(do_malloc(tokens))
            except OutOfMemory:
                for entry in got:
                    do_free(entry)
                counts["admission_waits"] += 1
                if running:
                    blocked[0] = True
                    return
                queue.popleft()
                counts["rejected"] += 1
                continue
            queue.popleft()
            req.handles, req.capacity, req.start = got, cap, now
            if not req.admitted_once:
                req.admitted_once = True
                counts["admitted"] += 1
            running[req.rid] = req
            schedule(req)

    def preempt(req: _Req, now: int) -> None:
        stored = now - req.start - 1  # tokens generated before the one that did not fit
        for entry in req.handles:
            do_free(entry)
        req.handles = []
        req.gen += 1
        req.prompt += stored
        req.output -= stored
        del running[req.rid]
        queue.appendleft(req)

    def sample(step: int) -> None:
        s = allocator.stats()
        tokens = 0
        for r in running.values():
            tokens += r.prompt + min(step - r.start, r.output)
        for key, value in (("step", step), ("reserved_bytes", s.reserved_bytes),
                           ("allocated_bytes", s.allocated_bytes), ("internal_waste_bytes", s.internal_waste_bytes),
                           ("free_bytes", s.free_bytes), ("largest_free_extent_bytes", s.largest_free_extent_bytes),
                           ("token_bytes", tokens * bpt), ("running", len(running)), ("queued", len(queue))):
            series[key].append(value)

    i_arr, n = 0, len(reqs)
    now = 0
    next_sample = 0
    while True:
        t_next = min(heap[0][0] if heap else np.iinfo(np.int64).max, reqs[i_arr].arrival if i_arr < n else np.iinfo(np.int64).max)
        if t_next == np.iinfo(np.int64).max:
            if queue:  # nothing running and nothing arriving: the head can never fit
                try_admit(now)
                continue
            break
        while next_sample < t_next:
            sample(next_sample)
            next_sample += every
            if next_sample > last_arrival and len(series["step"]) >= 2 * config.samples:
                # The drain after the last arrival can be far longer than the arrival window;
                # thin it out (the window's own samples stay evenly spaced).
                every *= 2
        now = int(t_next)
        while i_arr < n and reqs[i_arr].arrival <= now:
            queue.append(reqs[i_arr])
            i_arr += 1
        while heap and heap[0][0] <= now:
            _, kind, _, gen, req = heapq.heappop(heap)
            if gen != req.gen:
                continue
            if kind == _DONE:
                for entry in req.handles:
                    do_free(entry)
                req.handles = []
                del running[req.rid]
                counts["completed"] += 1
                continue
            growth = policy.grow(req.capacity)
            try:
                entry = do_malloc(growth.add_tokens)
            except OutOfMemory:
                counts["decode_ooms"] += 1
                preempt(req, now)
                continue
            if growth.replace:
                for old in req.handles:
                    do_free(old)
                req.handles = [entry]
            else:
                req.handles.append(entry)
            req.capacity = growth.new_capacity
            k = req.capacity - req.prompt + 1
            if k <= req.output:
                push(req.start + k, _GROW, req)
        try_admit(now)
    sample(max(now, next_sample))
    sizes = np.asarray(ev_sizes, dtype=np.int64)
    return SimResult(
        requests=n, steps=now, last_arrival_step=int(arrivals[-1]), mallocs=int((sizes > 0).sum()), frees=int((sizes == 0).sum()),
        series={k: np.asarray(v, dtype=np.int64) for k, v in series.items()},
        event_ids=np.asarray(ev_ids, dtype=np.int64), event_sizes=sizes, **counts,
    )


def replay(event_ids, event_sizes, allocator, start: int = 0, stop: int | None = None, handles=None) -> None:
    """Replay logged ops ``[start, stop)``; ``handles`` maps log ids to live handles between
    calls (a list long enough for every id in the log)."""
    malloc, free = allocator.malloc, allocator.free
    ids = event_ids.tolist() if hasattr(event_ids, "tolist") else event_ids
    sizes = event_sizes.tolist() if hasattr(event_sizes, "tolist") else event_sizes
    if handles is None:
        handles = [0] * (max(ids) + 1 if len(ids) else 0)
    for i in range(start, len(ids) if stop is None else stop):
        size = sizes[i]
        if size:
            handles[ids[i]] = malloc(size)
        else:
            free(handles[ids[i]])
