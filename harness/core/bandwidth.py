"""algbw / busbw exactly as nccl-tests defines them (doc/PERFORMANCE.md in nccl-tests).

algbw = bytes / time. busbw = algbw * factor, where the factor makes the figure comparable to the
hardware's peak bandwidth whatever the number of ranks.
"""
from __future__ import annotations

from typing import Callable

from harness.core.family import WRONG_COLUMN, Column
from harness.core.figures import Figure

# collective -> (the factor as nccl-tests writes it, the factor of n ranks)
BUS_FACTORS: dict[str, tuple[str, Callable[[int], float]]] = {
    "allreduce": ("2(n-1)/n", lambda n: 2.0 * (n - 1) / n),
    **{c: ("(n-1)/n", lambda n: (n - 1) / n) for c in ("allgather", "reducescatter", "alltoall")},
    **{c: ("1", lambda n: 1.0) for c in ("broadcast", "reduce", "sendrecv")},
}


def bus_factor(collective: str, world: int) -> float:
    """The nccl-tests bus-bandwidth factor for ``collective`` over ``world`` ranks."""
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    if collective not in BUS_FACTORS:
        raise ValueError(f"no bus factor defined for collective {collective!r}")
    return BUS_FACTORS[collective][1](world)


def bandwidth_figures(collective: str, ranks: str = "the case's world") -> tuple[Figure, ...]:
    """The figures nccl-tests prints for a collective, as a family declares them."""
    factor = BUS_FACTORS[collective][0]
    return (
        Figure("time_us", "us", "lower",
               "mean time of one operation, the slowest rank's per iteration (nccl-tests' time)"),
        Figure("algbw_gbps", "GB/s", "higher", "size_bytes / mean time, in 1e9 bytes per second (nccl-tests' algbw)"),
        Figure("busbw_gbps", "GB/s", "higher",
               f"algbw x {factor}, n = {ranks} (nccl-tests' busbw, from the mean time)", headline=True),
    )


def nccl_tests_better(name: str) -> str:
    """Which way is better for a figure nccl-tests prints (``time_us``, ``algbw_gbps``, ``busbw_gbps``),
    as ``bandwidth_figures`` declares it: the direction is the same for every collective."""
    return next(f.better for f in bandwidth_figures("allreduce") if f.name == name)


def busbw_p50_figure(collective: str) -> Figure:
    return Figure("busbw_p50_gbps", "GB/s", "higher",
                  f"busbw from the median time instead of the mean (x {BUS_FACTORS[collective][0]})")


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes per second, as nccl-tests)."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return size_bytes / seconds / 1e9


def busbw_gbps(collective: str, world: int, size_bytes: int, seconds: float) -> float:
    return algbw_gbps(size_bytes, seconds) * bus_factor(collective, world)


# The columns nccl-tests prints for a bandwidth case, after the family's own parameter columns.
BANDWIDTH_COLUMNS = (
    Column("time", figure="time_us", fmt="{:.1f}"),
    Column("algbw", figure="algbw_gbps", fmt="{:.3f}"),
    Column("busbw", figure="busbw_gbps", fmt="{:.3f}"),
    WRONG_COLUMN,
    Column("p50", figure="p50_us", fmt="{:.1f}"),
    Column("p99", figure="p99_us", fmt="{:.1f}"),
)
