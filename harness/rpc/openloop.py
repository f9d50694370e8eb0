"""Open-loop load at a fixed offered rate, timed from the intended send time.

A closed-loop client waits for each reply before sending the next request, so when the server
stalls it simply stops asking: one slow reply is one slow sample, and the requests that *would*
have been sent during the stall are never counted (coordinated omission). Here request ``i`` is
due at ``start + i / rate``; its latency runs from that intended time to its reply, so a stall
delays every request scheduled behind it and shows up in the tail as it would for real traffic.
The uncorrected figure (from the actual send) is kept beside it, so the difference is visible.

Batching with a coalescing window: requests due within ``window_ns`` of the first one held (and
at most ``batch`` of them) go out together in one send; each still counts from its own
intended time, so the wait in the window is part of its latency.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

# Sleep until this close to a deadline, then poll the clock: time.sleep overshoots by 50 us on an
# idle host and by far more on a busy one.
SPIN_BEFORE_NS = 1_000_000
LEAD_NS = 1_000_000  # the first request is due this long after the schedule is made


@dataclass(frozen=True)
class OpenLoopResult:
    corrected_ns: np.ndarray  # reply time - intended send time, one per request
    uncorrected_ns: np.ndarray  # reply time - actual send time of its batch
    send_lag_ns: np.ndarray  # actual send time - intended send time: the generator's own lateness
    late_sends: int  # batches sent more than 1 ms after their last request's intended time
    elapsed_ns: int  # first intended send to last reply


def wait_until(deadline_ns: int, clock: Callable[[], int]) -> None:
    remaining = deadline_ns - clock()
    if remaining > SPIN_BEFORE_NS:
        time.sleep((remaining - SPIN_BEFORE_NS) / 1e9)
    while clock() < deadline_ns:
        pass


def run(send: Callable[[int], None], iters: int, rate_hz: float, clock: Callable[[], int] = time.perf_counter_ns,
        batch: int = 1, window_ns: int = 0, wait: Optional[Callable[[int], None]] = None) -> OpenLoopResult:
    """``send(n)`` sends ``n`` requests as one batch and returns when all replies are in.
    ``wait(deadline_ns)`` returns at the deadline (default: sleep, then poll ``clock``); tests pass
    a fake clock and a fake wait to make the schedule deterministic."""
    if wait is None:
        wait = lambda deadline: wait_until(deadline, clock)  # noqa: E731
    if rate_hz <= 0:
        raise ValueError(f"rate_hz must be > 0, got {rate_hz}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    interval_ns = 1e9 / rate_hz
    corrected = np.empty(iters, dtype=np.int64)
    uncorrected = np.empty(iters, dtype=np.int64)
    lag = np.empty(iters, dtype=np.int64)
    start = clock() + LEAD_NS
    late = 0
    i = 0
    done = start
    while i < iters:
        first_due = start + int(i * interval_ns)
        wait(first_due)
        j = i + 1
        close_at = first_due + window_ns
        while j < iters and j - i < batch:
            due = start + int(j * interval_ns)
            if due > close_at:
                break
            wait(due)
            j += 1
        sent = clock()
        if sent - (start + int((j - 1) * interval_ns)) > 1_000_000:
            late += 1
        send(j - i)
        done = clock()
        for k in range(i, j):
            corrected[k] = done - (start + int(k * interval_ns))
            uncorrected[k] = done - sent
            lag[k] = sent - (start + int(k * interval_ns))
        i = j
    return OpenLoopResult(corrected, uncorrected, lag, late, done - start)
