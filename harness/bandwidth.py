"""algbw / busbw exactly as nccl-tests defines them (doc/PERFORMANCE.md in nccl-tests).

algbw = bytes / time. busbw = algbw * factor, where the factor makes the figure comparable to the
hardware's peak bandwidth whatever the number of ranks.
"""
from __future__ import annotations


def bus_factor(collective: str, world: int) -> float:
    """The nccl-tests bus-bandwidth factor for ``collective`` over ``world`` ranks."""
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    n = world
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise ValueError(f"no bus factor defined for collective {collective!r}")


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes per second, as nccl-tests)."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return size_bytes / seconds / 1e9


def busbw_gbps(collective: str, world: int, size_bytes: int, seconds: float) -> float:
    return algbw_gbps(size_bytes, seconds) * bus_factor(collective, world)
