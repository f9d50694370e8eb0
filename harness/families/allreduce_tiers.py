"""AllReduce over the sub-groups of one tier, all at once: inside each node (``tier=intra``) or
across nodes among the ranks with the same local index (``tier=inter``, one group per "rail").
Side by side they show which tier is slow, the two halves of a hierarchical allreduce.

``tier=pairs``: in ceil(log2 N) + 1 rounds of node pairings every node reduces with several
partners, each pair of nodes (all the ranks of both) one group, the pairs of a round at once and
each timed on its own (``harness.collectives.pairs``); ``critpath diagnose`` names a slow node or
link from them.

Needs the job's node layout (torchrun / Slurm across nodes): on one node the inter tier has no
peers and the case fails saying so. Opt-in: ``--families allreduce_tiers``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from harness.collectives import pairs
from harness.collectives.layout import NodeLayout, discover, tier_cases, tier_params, tier_subgroup
from harness.core.bandwidth import BANDWIDTH_COLUMNS, algbw_gbps, bandwidth_figures, busbw_gbps
from harness.core.case import Case
from harness.core.family import CheckResult, Column, Family, GridOptions, RankContext
from harness.core.figures import Figure
from harness.core.sizes import format_size
from harness.core.stats import Summary


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
    rounds: Optional[pairs.PairRounds] = None  # tier pairs; ``group``/``members`` are then per round
    round_groups: tuple = ()  # tier pairs: this rank's process group in each round (None: idle)

    @property
    def current(self) -> tuple[Any, list]:
        """The process group and members this rank reduces with now."""
        if self.rounds is None:
            return self.group, self.members
        return self.round_groups[self.rounds.round], self.rounds.group or [self.ctx.rank]


def setup(ctx: RankContext, case: Case) -> State:
    p = case.params
    if p["backend"] != ctx.backend or p["world"] != ctx.world:
        raise ValueError(f"case is for {p['backend']} x {p['world']}; this run is {ctx.backend} x {ctx.world}")
    layout = discover(ctx.group)
    if p["tier"] == "pairs":
        return _setup_pairs(ctx, case, layout)
    groups = layout.tier_groups(p["tier"])
    if max(len(g) for g in groups) < 2:
        raise ValueError(f"tier {p['tier']} has no group of 2 or more ranks in this layout ({layout.describe()}); "
                         "run across nodes with torchrun/Slurm, with more than one rank per node for tier=intra")
    import torch  # here, not at module level: reading the family's cases needs no torch (1.5 s)
    import torch.distributed as dist

    group, members = tier_subgroup(layout, p["tier"], ctx.rank, ctx.backend)
    buffer = torch.zeros(p["size_bytes"] // 4, dtype=torch.float32, device=ctx.device)
    state = State(ctx, layout, group, members, buffer, len(groups), dist)
    step(state)  # first use creates the sub-communicator: keep it out of the timing
    return state


def _setup_pairs(ctx: RankContext, case: Case, layout: NodeLayout) -> State:
    import torch
    import torch.distributed as dist

    rounds = pairs.PairRounds.plan(layout, ctx.rank, "nodes", FAMILY.value(case, "at_once"))
    # Every rank creates every round's groups (torch creates each sub-group on all ranks).
    round_groups = tuple(dist.new_subgroups_by_enumeration(groups, backend=ctx.backend)[0] for groups in rounds.groups)
    buffer = torch.zeros(case.params["size_bytes"] // 4, dtype=torch.float32, device=ctx.device)
    state = State(ctx, layout, None, [ctx.rank], buffer, sum(len(g) for g in rounds.groups), dist, rounds,
                  round_groups)
    pairs.for_each_round(state, lambda: step(state))  # each round's communicators, untimed
    return state


def step(state: State) -> None:
    group, members = state.current
    if len(members) > 1:
        state.dist.all_reduce(state.buffer, group=group)


def iterate(state: State, iters: int, clock) -> Optional[Any]:
    return pairs.iterate(FAMILY.name, state, iters, clock)


def _check_once(state: State) -> CheckResult:
    import torch

    buf, device = state.buffer, state.buffer.device
    _, members = state.current
    count = buf.numel()
    index = torch.arange(count, device=device)
    buf.copy_(((index + state.ctx.rank) % 3).to(buf.dtype))
    step(state)
    if device.type == "cuda":
        torch.cuda.synchronize()
    expected = torch.zeros(count, dtype=torch.float64, device=device)
    for r in members:  # sum of (i + r) mod 3 over this group's members
        expected += ((index + r) % 3).to(torch.float64)
    wrong = int((buf.to(torch.float64) != expected).sum())
    return CheckResult(wrong=wrong, checked=count)


def check(state: State) -> CheckResult:
    if state.rounds is None:
        return _check_once(state)
    # An idle rank of a round checks nothing that round.
    return pairs.check_rounds(state, lambda: _check_once(state) if state.rounds.group else CheckResult(0, 0))


def teardown(state: State) -> None:
    if state.rounds is not None:
        for group in state.round_groups:
            if group is not None:
                state.dist.destroy_process_group(group)
    elif state.group is not None and len(state.members) > 1:
        state.dist.destroy_process_group(state.group)


def report(state: State) -> dict:
    if state.rounds is not None:
        return pairs.report(state.rounds)
    return {"members": list(state.members), "node": state.layout.node_of_rank[state.ctx.rank],
            "nodes": state.layout.nodes, "groups": state.groups_total}


def _bandwidth(size: int, group_size: int, mean_ns: float) -> dict[str, float]:
    mean_s = mean_ns / 1e9
    return {"time_us": mean_ns / 1e3, "algbw_gbps": algbw_gbps(size, mean_s),
            "busbw_gbps": busbw_gbps("allreduce", group_size, size, mean_s)}


def pair_metrics(case: Case, measured: pairs.PairMeasurement) -> dict[str, float]:
    """One pair of nodes: its group's allreduce, busbw over the ranks of both nodes."""
    return {**_bandwidth(case.params["size_bytes"], len(measured.group), Summary.of(measured.samples_ns).mean_ns),
            "group_size": float(len(measured.group))}


def metrics(case: Case, summary: Summary, reports: list[dict]) -> dict[str, float]:
    size = case.params["size_bytes"]
    if case.params["tier"] == "pairs":
        measured = pairs.measurements(reports)
        busbw = [pair_metrics(case, m)["busbw_gbps"] for m in measured]
        return {**pairs.counts(measured), "nodes": float(reports[0]["nodes"]),
                "median_pair_busbw_gbps": float(np.median(busbw)), "slowest_pair_busbw_gbps": min(busbw)}
    group_size = max(len(r["members"]) for r in reports)
    return {
        **_bandwidth(size, group_size, summary.mean_ns),
        "group_size": float(group_size),
        "groups": float(reports[0]["groups"]),
        "nodes": float(reports[0]["nodes"]),
    }


FAMILY = Family(
    name="allreduce_tiers",
    version=1,
    description="AllReduce within each node vs across nodes (per rail), concurrently: which tier is slow",
    params=tier_params("intra (ranks of one node), inter (one rank per node, same local index) or pairs "
                       "(every node against several partners, in rounds, all ranks of both nodes)",
                       "float32 buffer size in bytes"),
    element_dtype="float32",  # the buffer setup allocates
    figures=(
        *bandwidth_figures("allreduce", "the ranks of the tier's group"),
        Figure("group_size", "ranks", "neither", "ranks in the largest group of the tier"),
        Figure("groups", "count", "neither", "groups of the tier reducing at once (one per node, or one per rail)"),
        Figure("nodes", "count", "neither", "nodes in the job's layout"),
        *pairs.pair_count_figures(),
        Figure("median_pair_busbw_gbps", "GB/s", "higher",
               "tier=pairs: median over the measured node pairs of each pair's busbw (from its mean time)"),
        Figure("slowest_pair_busbw_gbps", "GB/s", "higher", "tier=pairs: the lowest busbw of the measured node pairs"),
    ),
    grid=grid, setup=setup, step=step, metrics=metrics, check=check,
    teardown=teardown, report=report,
    iterate=iterate, pair_metrics=pair_metrics,
    columns=(
        Column("size", lambda r: format_size(r.params["size_bytes"])),
        Column("tier", lambda r: r.params["tier"]),
        Column("group", figure="group_size", fmt="{:.0f}"),
        Column("groups", figure="groups", fmt="{:.0f}"),
        *BANDWIDTH_COLUMNS,
    ),
    default=False,
)
