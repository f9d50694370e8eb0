"""What a stage does besides talking: message layout, emulated link latency, compute emulation.

Messages are int64 tensors: a 4-word header (send timestamp, index, step, kind) and a payload whose
contents every stage can predict, so the receiver checks each microbatch exactly.

Emulated link latency (``rtt_us`` > 0) is done in user space on the receiving side: the sender
stamps CLOCK_MONOTONIC into the header just before posting the send, and the receiver, once the
message is in, waits until stamp + one-way latency before using it. The sender is never held up,
like a real wire. The emulated value is a floor on each hop, not an addition: a hop takes
max(emulated, real transport time). CLOCK_MONOTONIC is shared by the processes of one host only,
so emulation refuses to run across hosts.

Compute emulation (``compute`` parameter), each says what it measures:
- ``spin``: a calibrated CPU busy loop (a fixed amount of Python work, sized in setup to take the
  configured time on an idle core). It needs a core: with more spinning stages than usable cores
  the loop stretches, and the family flags the case as oversubscribed.
- ``sleep``: emulated device time. The stage sleeps (then spins at most ``SPIN_TAIL_NS`` for
  precision) until the configured time has passed, as a host waits for a GPU kernel. Stages do
  not compete for cores, so on a small machine this is the variant whose timing stays honest.
- ``matmul``: real work on a GPU (CUDA only): repeated square matmuls, count calibrated in setup,
  synchronised before the stage sends.
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

HEADER_WORDS = 4  # stamp_ns, index, step, kind
KIND_CODES = {"act": 1, "grad": 2, "arr": 3, "rel": 4, "ret": 5}
SMALL_MESSAGE_WORDS = HEADER_WORDS + 4
SPIN_TAIL_NS = 200_000
COMPUTE_MODES = ("spin", "sleep", "matmul")
_monotonic_ns = time.monotonic_ns  # CLOCK_MONOTONIC: one timeline for every process of a host


def payload_words(act_bytes: int) -> int:
    words = act_bytes // 8 - HEADER_WORDS
    if words < 1:
        raise ValueError(f"act_bytes={act_bytes} leaves no payload after the {HEADER_WORDS * 8}-byte header")
    return words


def wait_until_ns(deadline_ns: int) -> None:
    """Sleep to within SPIN_TAIL_NS of the deadline, then spin: a sleep alone overshoots by ~0.1 ms
    on an idle machine and more on a loaded one."""
    remaining = deadline_ns - _monotonic_ns()
    if remaining > SPIN_TAIL_NS:
        time.sleep((remaining - SPIN_TAIL_NS) / 1e9)
    while _monotonic_ns() < deadline_ns:
        pass


def stamp(message: torch.Tensor) -> None:
    message[0] = _monotonic_ns()


def hold(message: torch.Tensor, one_way_ns: int) -> None:
    """Deliver no earlier than stamp + one-way latency (the emulated wire)."""
    if one_way_ns > 0:
        wait_until_ns(int(message[0].item()) + one_way_ns)


def same_host_or_raise(hosts: list[str]) -> None:
    if len(set(hosts)) > 1:
        raise ValueError(
            f"emulated link latency needs every stage on one host (one CLOCK_MONOTONIC); got {sorted(set(hosts))}"
        )


def hostname() -> str:
    return socket.gethostname()


# ---- compute ----------------------------------------------------------------------------------
def _busy(iterations: int) -> int:
    # Plain interpreter work: no syscalls, no allocation, nothing the OS can do on another core.
    x = 0
    for i in range(iterations):
        x += i
    return x


@dataclass(frozen=True)
class SpinCalibration:
    iterations_per_s: float
    probe_iterations: int

    def iterations(self, seconds: float) -> int:
        return max(1, round(self.iterations_per_s * seconds))


def calibrate_spin(probe_s: float = 0.002, repeats: int = 15, clock: Callable[[], int] = time.perf_counter_ns) -> SpinCalibration:
    """Iterations per second of ``_busy`` on an idle core: the fastest of several probes, since a
    probe can only be slowed (preemption, another stage on the core), never sped up."""
    n = 1000
    while True:  # grow the probe until it takes long enough to time well
        t0 = clock()
        _busy(n)
        if clock() - t0 >= probe_s * 1e9 or n > 1 << 26:
            break
        n *= 2
    best_ns = None
    for _ in range(repeats):
        t0 = clock()
        _busy(n)
        elapsed = clock() - t0
        best_ns = elapsed if best_ns is None else min(best_ns, elapsed)
    return SpinCalibration(n / (max(best_ns, 1) / 1e9), n)


class Compute:
    """A stage's compute of a given duration; ``run(seconds)`` does it, and nothing else."""

    mode: str
    what: str

    def run(self, seconds: float) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class SpinCompute(Compute):
    mode = "spin"
    what = "calibrated CPU busy loop (fixed work sized on an idle core; stretches if the core is shared)"

    def __init__(self, calibration: SpinCalibration) -> None:
        self.calibration = calibration
        self._iters: dict[float, int] = {}

    def run(self, seconds: float) -> None:
        n = self._iters.get(seconds)
        if n is None:
            n = self._iters[seconds] = self.calibration.iterations(seconds)
        _busy(n)


class SleepCompute(Compute):
    mode = "sleep"
    what = "emulated device time: sleep until the compute time has passed (host waits as for a GPU kernel)"

    def run(self, seconds: float) -> None:
        wait_until_ns(_monotonic_ns() + int(seconds * 1e9))


class MatmulCompute(Compute):
    mode = "matmul"
    what = "real GPU matmuls (count calibrated in setup), synchronised at the end"

    def __init__(self, device, side: int = 1024) -> None:
        import torch  # here, not at module level: the pipeline family's declarations need no torch

        self._torch = torch
        if getattr(device, "type", "cpu") != "cuda" or not torch.cuda.is_available():
            raise ValueError("compute=matmul needs a CUDA device (backend nccl); use spin or sleep on CPU")
        self.a = torch.randn(side, side, device=device)
        self.b = torch.randn(side, side, device=device)
        self.c = torch.empty(side, side, device=device)
        for _ in range(3):
            torch.mm(self.a, self.b, out=self.c)
        torch.cuda.synchronize()
        reps = 20
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            torch.mm(self.a, self.b, out=self.c)
        end.record()
        torch.cuda.synchronize()
        self.per_mm_s = start.elapsed_time(end) / 1e3 / reps
        self._count: dict[float, int] = {}

    def run(self, seconds: float) -> None:
        torch = self._torch
        n = self._count.get(seconds)
        if n is None:
            n = self._count[seconds] = max(1, round(seconds / self.per_mm_s))
        for _ in range(n):
            torch.mm(self.a, self.b, out=self.c)
        torch.cuda.synchronize()


def make_compute(mode: str, device) -> Compute:
    if mode == "spin":
        return SpinCompute(calibrate_spin())
    if mode == "sleep":
        return SleepCompute()
    if mode == "matmul":
        return MatmulCompute(device)
    raise ValueError(f"compute must be one of {COMPUTE_MODES}, got {mode!r}")
