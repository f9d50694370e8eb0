"""Which node each rank is on, learned by the ranks themselves, and the sub-groups of each tier.

A node is what the launcher says it is (torchrun's GROUP_RANK, Slurm's SLURM_NODEID) on a host,
so two torchrun agents on one machine are two nodes, as in the CI test.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.case import Param
from harness.family import BACKEND, world_param
from harness.fingerprint import node_key
from harness.sizes import parse_sizes

TIERS = ("intra", "inter")


@dataclass(frozen=True)
class NodeLayout:
    node_of_rank: tuple[int, ...]  # node index per rank, nodes numbered by their first rank

    @property
    def nodes(self) -> int:
        return max(self.node_of_rank) + 1

    def members(self, node: int) -> list[int]:
        return [r for r, n in enumerate(self.node_of_rank) if n == node]

    def local_index(self, rank: int) -> int:
        return self.members(self.node_of_rank[rank]).index(rank)

    def tier_groups(self, tier: str) -> list[list[int]]:
        """intra: the ranks of each node; inter: for each local index, one rank per node."""
        if tier == "intra":
            return [self.members(n) for n in range(self.nodes)]
        if tier == "inter":
            width = max(len(self.members(n)) for n in range(self.nodes))
            return [[m[i] for m in (self.members(n) for n in range(self.nodes)) if len(m) > i] for i in range(width)]
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")

    def describe(self) -> str:
        return ", ".join(f"node {n}: ranks {self.members(n)}" for n in range(self.nodes))


def discover(group=None) -> NodeLayout:
    """All ranks call this together (a collective on ``group``, gloo or NCCL)."""
    import torch.distributed as dist

    keys = [None] * dist.get_world_size(group)
    dist.all_gather_object(keys, node_key(), group=group)
    first: dict[str, int] = {}
    for key in keys:
        first.setdefault(key, len(first))
    return NodeLayout(tuple(first[k] for k in keys))


def tier_subgroup(layout: NodeLayout, tier: str, rank: int, backend: str):
    """This rank's sub-group of ``tier`` and its members. Every rank must call it (torch creates
    each sub-group on all ranks)."""
    import torch.distributed as dist

    groups = layout.tier_groups(tier)
    mine, _ = dist.new_subgroups_by_enumeration(groups, backend=backend)
    members = next(g for g in groups if rank in g)
    return mine, members


# -- the cases of the tier families (allreduce_tiers, p2p_tiers), declared once ------------------

QUICK_SIZES = "8:1M:x16"
FULL_SIZES = "8:64M:x4"


def tier_params(tier_doc: str, size_doc: str) -> tuple:
    """The parameters a tier family's cases share."""
    return (Param("tier", str, tier_doc, choices=TIERS, required=True), BACKEND,
            Param("size_bytes", int, size_doc, low=4, required=True), world_param(2, "number of ranks in the job"))


def tier_cases(family, options) -> list:
    """Every tier at every size (float32 elements), for a job of ``options.world`` ranks."""
    if options.world < 2:
        return []  # no tier has a pair of ranks
    sizes = options.sizes_bytes or parse_sizes(FULL_SIZES if options.profile == "full" else QUICK_SIZES)
    return [family.case(tier=tier, backend=options.backend, size_bytes=size - size % 4, world=options.world)
            for size in sizes if size >= 4 for tier in TIERS]
