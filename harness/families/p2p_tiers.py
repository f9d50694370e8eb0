"""Ping-pong between two ranks of one node (``tier=intra``) vs two ranks on different nodes
(``tier=inter``): the per-message latency and bandwidth of each tier, the alpha and beta of the
cost models. The pair is the first two ranks of node 0 (intra) or the first rank of node 0 and of
node 1 (inter); the other ranks idle through the timed loop. One iteration is a round trip.

``tier=pairs`` finds a slow node or link: in ceil(log2 N) + 1 rounds of node pairings
(``harness.collectives.layout.pairing_rounds``) every node ping-pongs with several partners, on
every rail at once (local rank k of one node with local rank k of the other), each pair timed on
its own (``harness.collectives.pairs``). The record names both nodes of every pair and keeps each
pair's samples; ``critpath diagnose`` tells a node slow with all its partners from one slow link.

Opt-in (``--families p2p_tiers``): it needs the node layout of a torchrun / Slurm job.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from harness.collectives import pairs
from harness.collectives.layout import TIERS, NodeLayout, discover, tier_cases, tier_params
from harness.core.case import Case
from harness.core.family import WRONG_COLUMN, CheckResult, Column, Family, GridOptions, RankContext
from harness.core.figures import Figure
from harness.core.sizes import format_size
from harness.core.stats import Summary


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
    if tier == "pairs":
        raise ValueError("tier pairs has a pair per round: see harness.collectives.pairs")
    raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")


@dataclass
class State:
    ctx: RankContext
    layout: NodeLayout
    pair: Optional[tuple[int, int]]  # tier intra / inter
    buffer: Any  # torch.Tensor
    dist: Any = None  # torch.distributed, imported by setup (reading cases needs no torch)
    rounds: Optional[pairs.PairRounds] = None  # tier pairs

    @property
    def current(self) -> Optional[tuple[int, int]]:
        """The pair this rank is in now: the tier's, or this round's (None: idle)."""
        if self.rounds is not None:
            group = self.rounds.group
            return (group[0], group[1]) if group else None
        return self.pair

    @property
    def role(self) -> Optional[int]:
        current = self.current
        return current.index(self.ctx.rank) if current and self.ctx.rank in current else None


def setup(ctx: RankContext, case: Case) -> State:
    p = case.params
    if p["backend"] != ctx.backend or p["world"] != ctx.world:
        raise ValueError(f"case is for {p['backend']} x {p['world']}; this run is {ctx.backend} x {ctx.world}")
    layout = discover(ctx.group)
    rounds = pair = None
    if p["tier"] == "pairs":
        rounds = pairs.PairRounds.plan(layout, ctx.rank, "rails", FAMILY.value(case, "at_once"))
    else:
        pair = pair_for(layout, p["tier"])
        if pair is None:
            raise ValueError(f"no {p['tier']}-node pair in this layout ({layout.describe()})")
    import torch  # here, not at module level: reading the family's cases needs no torch (1.5 s)
    import torch.distributed as dist

    buffer = torch.zeros(p["size_bytes"] // 4, dtype=torch.float32, device=ctx.device)
    state = State(ctx, layout, pair, buffer, dist, rounds)
    if rounds is None:
        step(state)  # connect the pair outside the timing
    else:
        pairs.for_each_round(state, lambda: step(state))  # every round's pairs
    return state


def step(state: State) -> None:
    # Timed: the pair is looked up once (``role`` would look it up again), then only send/recv.
    pair, rank, buf, dist = state.current, state.ctx.rank, state.buffer, state.dist
    if pair is None:
        return
    if rank == pair[0]:
        dist.send(buf, pair[1])
        dist.recv(buf, pair[1])
    elif rank == pair[1]:
        dist.recv(buf, pair[0])
        dist.send(buf, pair[0])


def iterate(state: State, iters: int, clock) -> Optional[Any]:
    return pairs.iterate(FAMILY.name, state, iters, clock)


def _echo(state: State) -> CheckResult:
    """Rank A sends i mod 251; B adds 1 and sends it back; A checks i mod 251 + 1."""
    import torch

    role, buf, dist, pair = state.role, state.buffer, state.dist, state.current
    if role is None:
        return CheckResult(0, 0)
    index = torch.arange(buf.numel(), device=buf.device)
    if role == 0:
        buf.copy_((index % 251).to(buf.dtype))
        dist.send(buf, pair[1])
        dist.recv(buf, pair[1])
        wrong = int((buf != (index % 251 + 1).to(buf.dtype)).sum())
        return CheckResult(wrong, buf.numel())
    dist.recv(buf, pair[0])
    buf.add_(1)
    dist.send(buf, pair[0])
    return CheckResult(0, 0)


def check(state: State) -> CheckResult:
    if state.rounds is None:
        return _echo(state)
    return pairs.check_rounds(state, lambda: _echo(state))


def report(state: State) -> dict:
    if state.rounds is not None:
        return pairs.report(state.rounds)
    return {"pair": list(state.pair), "node_of_pair": [state.layout.node_of_rank[r] for r in state.pair]}


def round_trip_figures(case: Case, summary: Summary) -> dict[str, float]:
    """The figures of one pair's round trips: the tier's pair, or one pair of tier=pairs."""
    size = case.params["size_bytes"]
    one_way_s = summary.p50_ns / 2e9
    return {
        "time_us": summary.mean_ns / 1e3,
        "rtt_p50_us": summary.p50_ns / 1e3,
        "one_way_p50_us": one_way_s * 1e6,
        "bw_p50_gbps": size / one_way_s / 1e9,  # nccl-tests sendrecv: busbw = algbw
    }


def pair_metrics(case: Case, measured: pairs.PairMeasurement) -> dict[str, float]:
    return round_trip_figures(case, Summary.of(measured.samples_ns))


def metrics(case: Case, summary: Summary, reports: list[dict]) -> dict[str, float]:
    if case.params["tier"] != "pairs":
        return round_trip_figures(case, summary)
    measured = pairs.measurements(reports)
    rtt_us = [Summary.of(m.samples_ns).p50_ns / 1e3 for m in measured]
    return {**pairs.counts(measured), "median_pair_rtt_p50_us": float(np.median(rtt_us)),
            "slowest_pair_rtt_p50_us": max(rtt_us)}


FAMILY = Family(
    name="p2p_tiers",
    version=1,
    description="Ping-pong inside a node vs across nodes: each tier's per-message latency and bandwidth",
    params=tier_params("intra (two ranks of one node), inter (first ranks of nodes 0 and 1) or pairs "
                       "(every node against several partners, in rounds, on every rail)",
                       "float32 message size in bytes"),
    element_dtype="float32",  # the buffer setup allocates
    figures=(
        Figure("time_us", "us", "lower", "mean round trip (ping-pong) between the tier's pair"),
        Figure("rtt_p50_us", "us", "lower", "median round trip between the tier's pair"),
        Figure("one_way_p50_us", "us", "lower", "median round trip / 2"),
        Figure("bw_p50_gbps", "GB/s", "higher", "size_bytes / median one-way time (nccl-tests sendrecv: busbw = algbw)",
               headline=True),
        *pairs.pair_count_figures(),
        Figure("median_pair_rtt_p50_us", "us", "lower",
               "tier=pairs: median over the measured pairs of each pair's median round trip"),
        Figure("slowest_pair_rtt_p50_us", "us", "lower",
               "tier=pairs: the largest of the measured pairs' median round trips"),
    ),
    grid=grid, setup=setup, step=step, metrics=metrics, check=check,
    report=report, iterate=iterate,
    pair_metrics=pair_metrics,
    columns=(
        Column("size", lambda r: format_size(r.params["size_bytes"])),
        Column("tier", lambda r: r.params["tier"]),
        Column("pair", lambda r: ",".join(map(str, r.extra["rank_reports"][0]["pair"]))),
        Column("rtt p50", figure="rtt_p50_us", fmt="{:.1f}"),
        Column("one-way", figure="one_way_p50_us", fmt="{:.1f}"),
        Column("bw", figure="bw_p50_gbps", fmt="{:.3f}"),
        Column("pairs", figure="pairs", fmt="{:.0f}"),
        Column("slowest pair rtt p50", figure="slowest_pair_rtt_p50_us", fmt="{:.1f}"),
        WRONG_COLUMN,
        Column("p99", figure="p99_us", fmt="{:.1f}"),
    ),
    default=False,
)
