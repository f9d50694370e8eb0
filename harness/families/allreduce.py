"""AllReduce (sum, in place): the backend's own algorithm vs ring vs tree.

- ``backend=nccl``: ``algo=native`` is NCCL's own choice; ``ring``/``tree`` set ``NCCL_ALGO`` for a
  communicator of their own (NCCL reads the variable when a communicator is created).
- ``backend=gloo``: ``algo=native`` is gloo's allreduce; ``ring``/``tree`` are built from
  point-to-point ops (``harness.collectives.p2p_allreduce``), so ring vs tree exists without GPUs.

Timing runs on a zero-filled buffer so repeated in-place sums stay finite (no inf/denormal
slow paths); the check afterwards refills with integers whose sums are exact in every dtype used.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from harness.core.bandwidth import BANDWIDTH_COLUMNS, algbw_gbps, bandwidth_figures, busbw_gbps, busbw_p50_figure
from harness.core.case import Case, Param
from harness.collectives import crossover, plots
from harness.core.family import (BACKEND, DTYPE_BYTES, CheckResult, Column, Family, Finding, GridOptions, Plot,
                                 RankContext, bytes_param, grid_sizes, world_param)
from harness.core.sizes import format_size, parse_sizes
from harness.core.stats import Summary

QUICK_SIZES = "8:1M:x2"
FULL_SIZES = "8:64M:x2"
ALGOS = ("native", "ring", "tree")
NCCL_ALGO_NAMES = {"ring": "Ring", "tree": "Tree"}

IMPL = {
    ("gloo", "native"): "torch.distributed.all_reduce on gloo (gloo's own algorithm)",
    ("gloo", "ring"): "ring over isend/irecv: reduce-scatter + all-gather, 2(p-1) steps",
    ("gloo", "tree"): "binomial tree over send/recv: reduce to rank 0 + broadcast, 2*ceil(log2 p) steps",
    ("nccl", "native"): "torch.distributed.all_reduce on NCCL, algorithm chosen by NCCL",
    ("nccl", "ring"): "torch.distributed.all_reduce on NCCL with NCCL_ALGO=Ring",
    ("nccl", "tree"): "torch.distributed.all_reduce on NCCL with NCCL_ALGO=Tree",
}


def grid(options: GridOptions) -> list[Case]:
    spec = FULL_SIZES if options.profile == "full" else QUICK_SIZES
    sizes = options.sizes_bytes or parse_sizes(spec)
    dtypes = ["float32"]
    if options.backend == "nccl" and options.profile == "full":
        dtypes += ["bfloat16", "float16"]
    cases = []
    for dtype in dtypes:
        for size in grid_sizes(FAMILY.name, sizes, dtype):
            for algo in ALGOS:
                cases.append(FAMILY.case(algo=algo, backend=options.backend, dtype=dtype, size_bytes=size,
                                         world=options.world))
    return cases


@contextmanager
def _nccl_algo(value: str | None):
    saved = os.environ.get("NCCL_ALGO")
    if value is None:
        os.environ.pop("NCCL_ALGO", None)
    else:
        os.environ["NCCL_ALGO"] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("NCCL_ALGO", None)
        else:
            os.environ["NCCL_ALGO"] = saved


@dataclass
class State:
    ctx: RankContext
    case: Case
    buffer: Any  # torch.Tensor
    algo: str
    op: Callable[[], Any] = None  # one allreduce of buffer, bound by setup
    group: Any = None  # NCCL communicator of this algorithm (own group), else None
    plan: Any = None  # RingPlan / TreePlan for the point-to-point builds
    nccl_algo_env: str | None = None


def setup(ctx: RankContext, case: Case) -> State:
    p = case.params
    if p["backend"] != ctx.backend:
        raise ValueError(f"case is for backend {p['backend']!r} but this run uses {ctx.backend!r}")
    if p["world"] != ctx.world:
        raise ValueError(f"case is for world {p['world']} but this run has {ctx.world} ranks")
    import torch
    import torch.distributed as dist

    from harness.collectives.p2p_allreduce import RingPlan, TreePlan, ring_allreduce, tree_allreduce

    count = _count(case)
    buffer = torch.zeros(count, dtype=getattr(torch, p["dtype"]), device=ctx.device)
    state = State(ctx, case, buffer, p["algo"])
    if ctx.backend == "nccl":
        # One communicator per algorithm: NCCL_ALGO is read at communicator creation, which in
        # torch happens at the group's first collective, so warm it here under the variable.
        wanted = NCCL_ALGO_NAMES.get(state.algo, os.environ.get("NCCL_ALGO"))
        with _nccl_algo(wanted):
            state.group = dist.new_group(backend="nccl")
            dist.all_reduce(buffer, group=state.group)
            torch.cuda.synchronize()
        state.nccl_algo_env = wanted
    if ctx.backend == "nccl" or state.algo == "native":
        state.op = partial(dist.all_reduce, buffer, group=state.group)
    elif state.algo == "ring":
        state.plan = RingPlan.for_buffer(buffer, ctx.rank, ctx.world)
        state.op = partial(ring_allreduce, state.plan)
    else:
        state.plan = TreePlan.for_buffer(buffer, ctx.rank, ctx.world)
        state.op = partial(tree_allreduce, state.plan)
    return state


def step(state: State) -> None:
    state.op()


def _pattern(count: int, rank: int, device):
    import torch

    # Values in {0, 1, 2}: sums stay exact in fp16/bf16 for any world a node can hold.
    return (torch.arange(count, device=device) + rank) % 3


def _expected(count: int, world: int, device):
    import torch

    # sum over r of (i + r) mod 3: full cycles of 0+1+2, plus the first world%3 residues from i.
    base = torch.arange(count, device=device) % 3
    total = torch.full_like(base, 3 * (world // 3))
    for r in range(world % 3):
        total += (base + r) % 3
    return total


def check(state: State) -> CheckResult:
    import torch

    ctx, buf = state.ctx, state.buffer
    count = buf.numel()
    buf.copy_(_pattern(count, ctx.rank, buf.device).to(buf.dtype))
    step(state)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    wrong = int((buf.to(torch.float64) != _expected(count, ctx.world, buf.device).to(torch.float64)).sum())
    return CheckResult(wrong=wrong, checked=count)


def teardown(state: State) -> None:
    if state.group is not None:
        import torch.distributed as dist

        dist.destroy_process_group(state.group)


def report(state: State) -> dict:
    return {"impl": IMPL[(state.ctx.backend, state.algo)], "nccl_algo_env": state.nccl_algo_env}


def metrics(case: Case, summary: Summary, reports: list[dict]) -> dict[str, float]:
    # nccl-tests reports bandwidth from the mean time; the p50 figure is the robust companion.
    size, world = case.params["size_bytes"], case.params["world"]
    mean_s, p50_s = summary.mean_ns / 1e9, summary.p50_ns / 1e9
    return {
        "time_us": summary.mean_ns / 1e3,
        "algbw_gbps": algbw_gbps(size, mean_s),
        "busbw_gbps": busbw_gbps("allreduce", world, size, mean_s),
        "busbw_p50_gbps": busbw_gbps("allreduce", world, size, p50_s),
    }


def _count(record) -> int:
    return record.params["size_bytes"] // DTYPE_BYTES[record.params["dtype"]]


FAMILY = Family(
    name="allreduce",
    version=1,
    description="AllReduce sum in place: backend's own vs ring vs tree (nccl-tests algbw/busbw)",
    params=(
        Param("algo", str, "native is the backend's own", choices=ALGOS, required=True),
        BACKEND,
        Param("dtype", str, "element type", choices=tuple(DTYPE_BYTES), required=True),
        bytes_param("size_bytes", "buffer size in bytes (count x element size)", low=1),
        world_param(),
    ),
    figures=(*bandwidth_figures("allreduce"), busbw_p50_figure("allreduce")),
    grid=grid,
    setup=setup,
    step=step,
    metrics=metrics,
    check=check,
    checked_per_rank=_count,  # check() compares every element of the buffer
    teardown=teardown,
    report=report,
    columns=(
        Column("size", lambda r: format_size(r.params["size_bytes"])),
        Column("count", _count),
        Column("type", lambda r: r.params["dtype"]),
        Column("algo", lambda r: r.params["algo"]),
        *BANDWIDTH_COLUMNS,
    ),
    plots=(
        Plot("allreduce_latency", "AllReduce latency vs message size", plots.plot_allreduce_latency),
        Plot("allreduce_busbw", "AllReduce bus bandwidth vs message size", plots.plot_allreduce_busbw),
    ),
    findings=(Finding("ring_tree_crossover", crossover.ring_tree_finding),),
)
