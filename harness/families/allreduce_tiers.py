"""AllReduce over the sub-groups of one tier, all at once: inside each node (``tier=intra``) or
across nodes among the ranks with the same local index (``tier=inter``, one group per "rail").
Side by side they show which tier is slow, the two halves of a hierarchical allreduce.

Needs the job's node layout (torchrun / Slurm across nodes): on one node the inter tier has no
peers and the case fails saying so. Opt-in: ``--families allreduce_tiers``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


from harness.bandwidth import BANDWIDTH_COLUMNS, algbw_gbps, bandwidth_figures, busbw_gbps
from harness.case import Case
from harness.collectives.layout import tier_cases, tier_params, NodeLayout, discover, tier_subgroup
from harness.figures import Figure
from harness.family import CheckResult, Column, Family, GridOptions, RankContext
from harness.sizes import format_size
from harness.stats import Summary



def grid(options: GridOptions) -> list[Case]:
    return tier_cases(FAMILY, options)


@dataclass
class State:
    ctx: RankContext
    layout: NodeLayout
    group: Any
    members: list
    buffer: Any  # torch.Tensor
    groups_total: int
    dist: Any = None  # torch.distributed, imported by setup (reading cases needs no torch)


def setup(ctx: RankContext, case: Case) -> State:
    p = case.params
    if p["backend"] != ctx.backend or p["world"] != ctx.world:
        raise ValueError(f"case is for {p['backend']} x {p['world']}; this run is {ctx.backend} x {ctx.world}")
    layout = discover(ctx.group)
    groups = layout.tier_groups(p["tier"])
    if max(len(g) for g in groups) < 2:
        raise ValueError(f"tier {p['tier']} has no group of 2 or more ranks in this layout ({layout.describe()}); "
                         "run across nodes with torchrun/Slurm, with more than one rank per node for tier=intra")
    import torch
    import torch.distributed as dist

    group, members = tier_subgroup(layout, p["tier"], ctx.rank, ctx.backend)
    buffer = torch.zeros(p["size_bytes"] // 4, dtype=torch.float32, device=ctx.device)
    state = State(ctx, layout, group, members, buffer, len(groups), dist)
    step(state)  # first use creates the sub-communicator: keep it out of the timing
    return state


def step(state: State) -> None:
    if len(state.members) > 1:
        state.dist.all_reduce(state.buffer, group=state.group)


def check(state: State) -> CheckResult:
    import torch

    buf, device = state.buffer, state.buffer.device
    count = buf.numel()
    index = torch.arange(count, device=device)
    buf.copy_(((index + state.ctx.rank) % 3).to(buf.dtype))
    step(state)
    if device.type == "cuda":
        torch.cuda.synchronize()
    expected = torch.zeros(count, dtype=torch.float64, device=device)
    for r in state.members:  # sum of (i + r) mod 3 over this group's members
        expected += ((index + r) % 3).to(torch.float64)
    wrong = int((buf.to(torch.float64) != expected).sum())
    return CheckResult(wrong=wrong, checked=count)


def teardown(state: State) -> None:
    if state.group is not None and len(state.members) > 1:
        state.dist.destroy_process_group(state.group)


def report(state: State) -> dict:
    return {"members": list(state.members), "node": state.layout.node_of_rank[state.ctx.rank],
            "nodes": state.layout.nodes, "groups": state.groups_total}


def metrics(case: Case, summary: Summary, reports: list[dict]) -> dict[str, float]:
    size = case.params["size_bytes"]
    group_size = max(len(r["members"]) for r in reports)
    mean_s = summary.mean_ns / 1e9
    return {
        "time_us": summary.mean_ns / 1e3,
        "group_size": float(group_size),
        "groups": float(reports[0]["groups"]),
        "nodes": float(reports[0]["nodes"]),
        "algbw_gbps": algbw_gbps(size, mean_s),
        "busbw_gbps": busbw_gbps("allreduce", group_size, size, mean_s),
    }


FAMILY = Family(
    name="allreduce_tiers",
    version=1,
    description="AllReduce within each node vs across nodes (per rail), concurrently: which tier is slow",
    params=tier_params("intra (ranks of one node) or inter (one rank per node, same local index)",
                       "float32 buffer size in bytes"),
    figures=(
        *bandwidth_figures("allreduce", "the ranks of the tier's group"),
        Figure("group_size", "ranks", "neither", "ranks in the largest group of the tier"),
        Figure("groups", "count", "neither", "groups of the tier reducing at once (one per node, or one per rail)"),
        Figure("nodes", "count", "neither", "nodes in the job's layout"),
    ),
    grid=grid, setup=setup, step=step, metrics=metrics, check=check, teardown=teardown, report=report,
    columns=(
        Column("size", lambda r: format_size(r.params["size_bytes"])),
        Column("tier", lambda r: r.params["tier"]),
        Column("group", figure="group_size", fmt="{:.0f}"),
        Column("groups", figure="groups", fmt="{:.0f}"),
        *BANDWIDTH_COLUMNS,
    ),
    default=False,
)
