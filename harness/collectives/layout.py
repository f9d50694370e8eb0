"""Which node each rank is on, learned by the ranks themselves, the sub-groups of each tier, and
the rounds of node pairings that find a slow node or link.

A node is what the launcher says it is (torchrun's GROUP_RANK, Slurm's SLURM_NODEID) on a host,
so two torchrun agents on one machine are two nodes, as in the CI test.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.core.case import Needs, Param
from harness.core.family import BACKEND, bytes_param, grid_sizes, world_param
from harness.core.sizes import parse_sizes
from harness.run.fingerprint import node_key

# intra: inside each node; inter: across nodes, per rail; pairs: node against node, in rounds.
TIERS = ("intra", "inter", "pairs")
# tier=pairs: a round's pairs timed all at once, or one pair of nodes at a time (harness.collectives.pairs).
AT_ONCE = ("round", "pair")


@dataclass(frozen=True)
class NodeLayout:
    node_of_rank: tuple[int, ...]  # node index per rank, nodes numbered by their first rank
    # Each node's key (harness.run.fingerprint.node_key), by index: how a record names a node.
    keys: tuple[str, ...] = field(default=(), compare=False)

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

    def key(self, node: int) -> str:
        return self.keys[node] if self.keys else f"node{node}"

    def pair_groups(self, round_pairs: list[tuple[int, int]], tier_of_pair: str) -> list[list[int]]:
        """The rank groups of one round: for each pair of nodes, ``rails`` (local index k of one
        node with local index k of the other, every rail at once) or ``nodes`` (every rank of
        both nodes in one group)."""
        groups = []
        for a, b in round_pairs:
            ma, mb = self.members(a), self.members(b)
            if tier_of_pair == "rails":
                groups += [[x, y] for x, y in zip(ma, mb)]
            elif tier_of_pair == "nodes":
                groups.append(sorted(ma + mb))
            else:
                raise ValueError(f"tier_of_pair must be rails or nodes, got {tier_of_pair!r}")
        return groups


def pairing_rounds(nodes: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint node pairs such that every node meets several partners.

    Rounds 0 .. ceil(log2 N) - 1 are a hypercube: node i with node i XOR 2^r, where that node
    exists. One more round then pairs nodes that have not met, the nodes with the fewest partners
    choosing first, so that (for N >= 3) every node has at least two distinct partners: a node
    slow with all of them is then told apart from one slow link. N = 2 has one pair and one
    round; N = 1 none. At most ceil(log2 N) + 1 rounds.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    rounds: list[list[tuple[int, int]]] = []
    met: list[set[int]] = [set() for _ in range(nodes)]
    bits = (nodes - 1).bit_length()  # ceil(log2 N)
    for r in range(bits):
        pairs = [(i, i ^ (1 << r)) for i in range(nodes) if i < i ^ (1 << r) < nodes]
        for a, b in pairs:
            met[a].add(b)
            met[b].add(a)
        rounds.append(pairs)
    extra: list[tuple[int, int]] = []
    taken: set[int] = set()
    by_need = sorted(range(nodes), key=lambda n: (len(met[n]), n))
    for a in by_need:
        if a in taken:
            continue
        b = next((b for b in by_need if b != a and b not in taken and b not in met[a]), None)
        if b is not None:
            extra.append((min(a, b), max(a, b)))
            taken |= {a, b}
            met[a].add(b)
            met[b].add(a)
    if extra:
        rounds.append(sorted(extra))
    return [r for r in rounds if r]


def discover(group=None) -> NodeLayout:
    """All ranks call this together (a collective on ``group``, gloo or NCCL)."""
    import torch.distributed as dist  # the tier families' declarations import this module without torch

    keys = [None] * dist.get_world_size(group)
    dist.all_gather_object(keys, node_key(), group=group)
    first: dict[str, int] = {}
    for key in keys:
        first.setdefault(key, len(first))
    return NodeLayout(tuple(first[k] for k in keys), tuple(first))


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
            bytes_param("size_bytes", size_doc, low=4), world_param(2, "number of ranks in the job"),
            Param("at_once", str, "tier=pairs: time a round's pairs all at once (round: the fabric under load) or one "
                  "pair of nodes at a time (pair: each link alone; for fewer cores than ranks)", choices=AT_ONCE,
                  default="round", needs=Needs("tier", ("pairs",))))


def tier_cases(family, options) -> list:
    """Every tier at every size (float32 elements), for a job of ``options.world`` ranks."""
    if options.world < 2:
        return []  # no tier has a pair of ranks
    sizes = options.sizes_bytes or parse_sizes(FULL_SIZES if options.profile == "full" else QUICK_SIZES)
    return [family.case(tier=tier, backend=options.backend, size_bytes=size, world=options.world)
            for size in grid_sizes(family.name, sizes, family.element_dtype) for tier in TIERS]
