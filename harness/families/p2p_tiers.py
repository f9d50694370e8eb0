"""Ping-pong between two ranks of one node (``tier=intra``) vs two ranks on different nodes
(``tier=inter``): the per-message latency and bandwidth of each tier, the alpha and beta of the
cost models. The pair is the first two ranks of node 0 (intra) or the first rank of node 0 and of
node 1 (inter); the other ranks idle through the timed loop. One iteration is a round trip.

Opt-in (``--families p2p_tiers``): it needs the node layout of a torchrun / Slurm job.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


from harness.case import Case
from harness.collectives.layout import TIERS, tier_cases, tier_params, NodeLayout, discover
from harness.figures import Figure
from harness.family import WRONG_COLUMN, CheckResult, Column, Family, GridOptions, RankContext
from harness.sizes import format_size
from harness.stats import Summary



def grid(options: GridOptions) -> list[Case]:
    return tier_cases(FAMILY, options)


def pair_for(layout: NodeLayout, tier: str) -> Optional[tuple[int, int]]:
    if tier == "intra":
        for node in range(layout.nodes):
            members = layout.members(node)
            if len(members) >= 2:
                return members[0], members[1]
        return None
    if tier == "inter":
        return (layout.members(0)[0], layout.members(1)[0]) if layout.nodes >= 2 else None
    raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")


@dataclass
class State:
    ctx: RankContext
    layout: NodeLayout
    pair: tuple[int, int]
    buffer: Any  # torch.Tensor
    dist: Any = None  # torch.distributed, imported by setup (reading cases needs no torch)

    @property
    def role(self) -> Optional[int]:
        return self.pair.index(self.ctx.rank) if self.ctx.rank in self.pair else None


def setup(ctx: RankContext, case: Case) -> State:
    p = case.params
    if p["backend"] != ctx.backend or p["world"] != ctx.world:
        raise ValueError(f"case is for {p['backend']} x {p['world']}; this run is {ctx.backend} x {ctx.world}")
    layout = discover(ctx.group)
    pair = pair_for(layout, p["tier"])
    if pair is None:
        raise ValueError(f"no {p['tier']}-node pair in this layout ({layout.describe()})")
    import torch
    import torch.distributed as dist

    state = State(ctx, layout, pair, torch.zeros(p["size_bytes"] // 4, dtype=torch.float32, device=ctx.device), dist)
    step(state)  # connect the pair outside the timing
    return state


def step(state: State) -> None:
    role, buf, dist = state.role, state.buffer, state.dist
    if role == 0:
        dist.send(buf, state.pair[1])
        dist.recv(buf, state.pair[1])
    elif role == 1:
        dist.recv(buf, state.pair[0])
        dist.send(buf, state.pair[0])


def check(state: State) -> CheckResult:
    """Rank A sends i mod 251; B adds 1 and sends it back; A checks i mod 251 + 1."""
    import torch

    role, buf, dist = state.role, state.buffer, state.dist
    if role is None:
        return CheckResult(0, 0)
    index = torch.arange(buf.numel(), device=buf.device)
    if role == 0:
        buf.copy_((index % 251).to(buf.dtype))
        dist.send(buf, state.pair[1])
        dist.recv(buf, state.pair[1])
        wrong = int((buf != (index % 251 + 1).to(buf.dtype)).sum())
        return CheckResult(wrong, buf.numel())
    dist.recv(buf, state.pair[0])
    buf.add_(1)
    dist.send(buf, state.pair[0])
    return CheckResult(0, 0)


def report(state: State) -> dict:
    return {"pair": list(state.pair), "node_of_pair": [state.layout.node_of_rank[r] for r in state.pair]}


def metrics(case: Case, summary: Summary, reports: list[dict]) -> dict[str, float]:
    size = case.params["size_bytes"]
    one_way_s = summary.p50_ns / 2e9
    return {
        "time_us": summary.mean_ns / 1e3,
        "rtt_p50_us": summary.p50_ns / 1e3,
        "one_way_p50_us": one_way_s * 1e6,
        "bw_p50_gbps": size / one_way_s / 1e9,  # nccl-tests sendrecv: busbw = algbw
    }


FAMILY = Family(
    name="p2p_tiers",
    version=1,
    description="Ping-pong inside a node vs across nodes: each tier's per-message latency and bandwidth",
    params=tier_params("intra (two ranks of one node) or inter (first ranks of nodes 0 and 1)",
                       "float32 message size in bytes"),
    figures=(
        Figure("time_us", "us", "lower", "mean round trip (ping-pong) between the tier's pair"),
        Figure("rtt_p50_us", "us", "lower", "median round trip between the tier's pair"),
        Figure("one_way_p50_us", "us", "lower", "median round trip / 2"),
        Figure("bw_p50_gbps", "GB/s", "higher", "size_bytes / median one-way time (nccl-tests sendrecv: busbw = algbw)",
               headline=True),
    ),
    grid=grid, setup=setup, step=step, metrics=metrics, check=check, report=report,
    columns=(
        Column("size", lambda r: format_size(r.params["size_bytes"])),
        Column("tier", lambda r: r.params["tier"]),
        Column("pair", lambda r: ",".join(map(str, r.extra["rank_reports"][0]["pair"]))),
        Column("rtt p50", figure="rtt_p50_us", fmt="{:.1f}"),
        Column("one-way", figure="one_way_p50_us", fmt="{:.1f}"),
        Column("bw", figure="bw_p50_gbps", fmt="{:.3f}"),
        WRONG_COLUMN,
        Column("p99", figure="p99_us", fmt="{:.1f}"),
    ),
    default=False,
)
