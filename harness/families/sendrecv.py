"""Point-to-point send/recv sweep, as nccl-tests' sendrecv_perf.

Every rank sends ``size_bytes`` to rank+1 and receives the same amount from rank-1 (mod world), all
at once (``batch_isend_irecv``), so with two ranks both directions of the link carry data at the same
time. time = one exchange; algbw = size / time; busbw = algbw (sendrecv bus factor 1).

Timing runs on the buffers as allocated; the check afterwards fills each send buffer with a pattern
that names its sender and compares every received element with the pattern of rank-1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from harness.core.bandwidth import BANDWIDTH_COLUMNS, algbw_gbps, bandwidth_figures, busbw_gbps, busbw_p50_figure
from harness.core.case import Case
from harness.core.family import (BACKEND, DTYPE_BYTES, CheckResult, Column, Family, GridOptions, RankContext, bytes_param,
                                 grid_sizes, world_param)
from harness.core.sizes import format_size, parse_sizes
from harness.core.stats import Summary

QUICK_SIZES = "4K:16M:x4"
FULL_SIZES = "1K:64M:x2"
ELEMENT_DTYPE = "float32"
ELEMENT_BYTES = DTYPE_BYTES[ELEMENT_DTYPE]


def grid(options: GridOptions) -> list[Case]:
    if options.world < 2:
        return []  # send/recv needs a peer
    sizes = options.sizes_bytes or parse_sizes(FULL_SIZES if options.profile == "full" else QUICK_SIZES)
    return [FAMILY.case(backend=options.backend, size_bytes=size, world=options.world)
            for size in grid_sizes(FAMILY.name, sizes, FAMILY.element_dtype)]


@dataclass
class State:
    ctx: RankContext
    send: Any  # torch.Tensor
    recv: Any
    ops: list
    exchange: Optional[Callable[[list], list]] = None  # torch.distributed.batch_isend_irecv, bound by setup


def setup(ctx: RankContext, case: Case) -> State:
    p = case.params
    if p["backend"] != ctx.backend:
        raise ValueError(f"case is for backend {p['backend']!r} but this run uses {ctx.backend!r}")
    if p["world"] != ctx.world:
        raise ValueError(f"case is for world {p['world']} but this run has {ctx.world} ranks")
    # torch is imported here, not with the module: listing or verifying cases needs none of it.
    import torch
    import torch.distributed as dist

    count = _count(case)
    send = torch.zeros(count, dtype=torch.float32, device=ctx.device)
    recv = torch.zeros(count, dtype=torch.float32, device=ctx.device)
    nxt, prv = (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world
    ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
    state = State(ctx, send, recv, ops, dist.batch_isend_irecv)
    step(state)  # first exchange opens the pair's connection outside the timing
    return state


def step(state: State) -> None:
    for work in state.exchange(state.ops):
        work.wait()


def _pattern(count: int, rank: int, device):
    import torch

    # Small integers: exact in float32, different for every sender and every position.
    return ((torch.arange(count, device=device) * 7 + rank * 13 + 1) % 251).to(torch.float32)


def check(state: State) -> CheckResult:
    import torch

    ctx = state.ctx
    count = state.send.numel()
    state.send.copy_(_pattern(count, ctx.rank, state.send.device))
    state.recv.fill_(-1.0)
    step(state)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    expected = _pattern(count, (ctx.rank - 1) % ctx.world, state.recv.device)
    wrong = int((state.recv != expected).sum())
    return CheckResult(wrong=wrong, checked=count)


def report(state: State) -> dict:
    return {"impl": "batch_isend_irecv: isend to rank+1 and irecv from rank-1, waited together"}


def metrics(case: Case, summary: Summary, reports: list[dict]) -> dict[str, float]:
    size, world = case.params["size_bytes"], case.params["world"]
    mean_s, p50_s = summary.mean_ns / 1e9, summary.p50_ns / 1e9
    return {
        "time_us": summary.mean_ns / 1e3,
        "algbw_gbps": algbw_gbps(size, mean_s),
        "busbw_gbps": busbw_gbps("sendrecv", world, size, mean_s),
        "busbw_p50_gbps": busbw_gbps("sendrecv", world, size, p50_s),
    }


def _count(case) -> int:
    """The float32 elements each rank sends of ``case`` (a Case or a record: anything with params)."""
    return case.params["size_bytes"] // ELEMENT_BYTES


FAMILY = Family(
    name="sendrecv",
    version=1,
    description="P2P send/recv to the next rank, all ranks at once (nccl-tests sendrecv: algbw, busbw factor 1)",
    params=(
        BACKEND,
        bytes_param("size_bytes", "bytes each rank sends (float32 elements)", low=ELEMENT_BYTES),
        world_param(2, "number of ranks (a peer each)"),
    ),
    element_dtype=ELEMENT_DTYPE,
    figures=(*bandwidth_figures("sendrecv"), busbw_p50_figure("sendrecv")),
    grid=grid,
    setup=setup,
    step=step,
    metrics=metrics,
    check=check,
    checked_per_rank=_count,  # check() compares every element received
    report=report,
    columns=(
        Column("size", lambda r: format_size(r.params["size_bytes"])),
        Column("count", _count),
        *BANDWIDTH_COLUMNS,
    ),
)
