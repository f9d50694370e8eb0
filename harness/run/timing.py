"""Per-iteration timers and the loop plan.

The timing seam follows pyperf: a timer is handed a step and a number of iterations and returns
one duration per iteration in nanoseconds. Any clock plugs in (``perf_counter_ns`` on CPU, CUDA
events on a GPU, a fake clock in tests). The loop binds locals and does nothing per iteration but
read the clock and store one integer, so its own cost stays well under a microsecond
(``selftest/mode=noop`` measures exactly that).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

Clock = Callable[[], int]


@dataclass(frozen=True)
class LoopPlan:
    """How a case is iterated. Decided once by rank 0 and broadcast, so every rank runs the same
    number of iterations (ranks that calibrate on their own hang a collective)."""

    warmup: int
    iters: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PlanPolicy:
    """How rank 0 turns a warm-up estimate into a plan."""

    warmup: int = 5
    iters: int | None = None  # fixed by --iters; otherwise calibrated
    target_s: float = 0.5  # timed wall time aimed at per case
    min_iters: int = 20
    max_iters: int = 5000
    # Beyond target_s, the most timed wall time a case may take to reach the samples its family's
    # tails need (tail_samples): a slow case gets what fits, and its deeper percentiles read "n too small".
    tail_budget_s: float = 2.0

    def decide(self, step_estimate_ns: float, tail_samples: int = 1) -> LoopPlan:
        """Iterations for ``target_s`` of timed steps, at least ``min_iters`` and, as far as
        ``tail_budget_s`` allows, ``tail_samples``. --iters (``iters``) is taken as given."""
        if self.iters is not None:
            return LoopPlan(self.warmup, self.iters)
        per_step = max(step_estimate_ns, 1.0)
        wanted = math.ceil(self.target_s * 1e9 / per_step)
        affordable = int(self.tail_budget_s * 1e9 // per_step)
        floor = max(self.min_iters, min(tail_samples, affordable))
        return LoopPlan(self.warmup, int(min(max(wanted, floor), max(self.max_iters, floor))))


# Samples are kept in chunks of this many: memory grows with the iterations done, not with the
# iterations asked, so a case stopped at its timeout never held more than it timed.
CHUNK_ITERS = 1 << 16


def time_each(step: Callable[[Any], Any], state: Any, iters: int, clock: Clock = time.perf_counter_ns) -> np.ndarray:
    """Run ``step(state)`` ``iters`` times, timing each call with ``clock`` (ns)."""
    chunks = [np.zeros(0, dtype=np.int64)]
    left = iters
    while left > 0:
        samples = [0] * min(left, CHUNK_ITERS)
        for i in range(len(samples)):
            t0 = clock()
            step(state)
            samples[i] = clock() - t0
        chunks.append(np.asarray(samples, dtype=np.int64))
        left -= len(samples)
    return np.concatenate(chunks)


def time_each_cuda(step: Callable[[Any], Any], state: Any, iters: int) -> np.ndarray:
    """Time each iteration with a pair of CUDA events on the current stream.

    Events are created before the loop (no allocation inside it) and read after one final
    synchronise, so the host never stalls the device between iterations.
    """
    import torch  # only for a CUDA device: the host clocks above need none of it (1.5 s)

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        step(state)
        ends[i].record()
    torch.cuda.synchronize()
    # elapsed_time is in milliseconds with ~0.5 us resolution.
    return np.asarray([round(s.elapsed_time(e) * 1e6) for s, e in zip(starts, ends)], dtype=np.int64)
