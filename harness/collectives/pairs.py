"""Node against node, in rounds (``tier=pairs`` of the tier families): who is measured with whom,
the timed loop over the rounds, and each pair's own samples.

The rounds come from ``layout.pairing_rounds``. A round's pairs are timed all at once
(``at_once=round``, the default: the fabric under a round's load) or one pair of nodes at a time
(``at_once=pair``: each link alone, and the only way pairs do not compete for CPUs on a machine
with fewer cores than ranks); each such slot starts after a barrier, and the slots take turns a
few iterations at a time. A pair is only ever timed while both of its nodes are in the same slot,
so a slow node cannot make the next round's pairs look slow by arriving late. The driver reduces
each iteration over all ranks, which would leave only the slowest pair; so every rank keeps its
own samples per slot and reports them, and a pair's latency per iteration is the maximum over its
group's ranks (nccl-tests' rule, as the driver's). The record's own samples are one sweep per
iteration: the sum, over the slots, of the rank's time in each (the barriers left out).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from harness.collectives.layout import AT_ONCE, NodeLayout, pairing_rounds
from harness.core import registry
from harness.core.family import CheckResult
from harness.core.figures import Figure
from harness.run.timing import time_each, time_each_cuda

# Iterations of one slot between turns of the others (time_rounds).
PASS_ITERS = 25

@dataclass
class PairRounds:
    """One rank's view of the rounds: the slots timed one after another, and its group in each."""

    layout: NodeLayout
    groups: list[list[list[int]]]  # per round, every group of ranks of the round
    slots: list[tuple[int, list[list[int]]]]  # (round, the groups timed together), in order
    mine: list[Optional[list[int]]]  # per slot, this rank's group (None: idle)
    tier_of_pair: str  # rails (one rank of each node per group, every rail at once) or nodes
    current: int = 0  # the slot being run
    samples: dict[int, np.ndarray] = field(default_factory=dict)  # slot -> this rank's last timed loop

    @classmethod
    def plan(cls, layout: NodeLayout, rank: int, tier_of_pair: str, at_once: str = "round") -> "PairRounds":
        if layout.nodes < 2:
            raise ValueError(f"tier pairs needs 2 or more nodes; this layout has one ({layout.describe()})")
        if at_once not in AT_ONCE:
            raise ValueError(f"at_once must be one of {AT_ONCE}, got {at_once!r}")
        per_pair = [[layout.pair_groups([pair], tier_of_pair) for pair in node_pairs]
                    for node_pairs in pairing_rounds(layout.nodes)]
        groups = [[g for node_pair in rnd for g in node_pair] for rnd in per_pair]
        if at_once == "round":
            slots = [(r, round_groups) for r, round_groups in enumerate(groups)]
        else:
            slots = [(r, node_pair) for r, rnd in enumerate(per_pair) for node_pair in rnd]
        mine = [next((g for g in slot if rank in g), None) for _, slot in slots]
        return cls(layout, groups, slots, mine, tier_of_pair)

    @property
    def group(self) -> Optional[list[int]]:
        """This rank's group in the current slot."""
        return self.mine[self.current]

    @property
    def round(self) -> int:
        return self.slots[self.current][0]

    def nodes_of(self, group: list[int]) -> list[int]:
        return sorted({self.layout.node_of_rank[r] for r in group})


def time_rounds(rounds: PairRounds, step: Callable[[Any], None], state: Any, iters: int, clock, device,
                barrier: Callable[[], None]) -> np.ndarray:
    """``iters`` timed calls of ``step`` in every slot; returns the sweep per iteration (this
    rank's time summed over the slots it is in a group of).

    The slots take turns, PASS_ITERS iterations at a time (A B C A B C ...), so that a passing
    disturbance (another job's burst on the fabric, another process taking a core for a second)
    falls on a little of every pair rather than on all of one pair's samples."""
    cuda = getattr(device, "type", "cpu") == "cuda"
    per_slot: dict[int, list[np.ndarray]] = {}
    for start in range(0, iters, PASS_ITERS):
        chunk = min(PASS_ITERS, iters - start)
        for slot in range(len(rounds.slots)):
            rounds.current = slot
            barrier()  # the slot starts together: no pair waits for a node still in the last one
            if rounds.group is None:
                continue  # idle this slot: calls nothing, so nothing of this rank competes with the pairs timed
            samples = time_each_cuda(step, state, chunk) if cuda else time_each(step, state, chunk, clock)
            per_slot.setdefault(slot, []).append(samples)
    rounds.current = 0
    rounds.samples = {slot: np.concatenate(chunks) for slot, chunks in per_slot.items()}
    total = np.zeros(iters, dtype=np.int64)
    for samples in rounds.samples.values():
        total += samples
    return total


def barrier(state: Any) -> None:
    """All ranks of the case, between rounds (a family's state: ``dist`` and ``ctx``)."""
    state.dist.barrier(group=state.ctx.group)


def iterate(family_name: str, state: Any, iters: int, clock) -> Optional[np.ndarray]:
    """A tier family's ``iterate``: tier=pairs times its rounds here; the other tiers (no
    ``state.rounds``) leave the loop to the driver."""
    if state.rounds is None:
        return None

    # The step as registered, so that a hook on it (an injected slowdown) applies to every call.
    return time_rounds(state.rounds, registry.get(family_name).step, state, iters, clock, state.ctx.device,
                       lambda: barrier(state))


def for_each_round(state: Any, action: Callable[[], Any]) -> list:
    """``action()`` once per round of ``state.rounds`` with the round current, after a barrier
    (connecting the pairs before the timing, and the checks)."""
    out = []
    for slot in range(len(state.rounds.slots)):
        state.rounds.current = slot
        barrier(state)
        out.append(action())
    state.rounds.current = 0
    return out


def check_rounds(state: Any, check_once: Callable[[], Any]) -> CheckResult:
    """The check of every round, its wrong and checked counts summed."""
    results = for_each_round(state, check_once)
    return CheckResult(sum(r.wrong for r in results), sum(r.checked for r in results))


def report(rounds: PairRounds) -> dict:
    """What this rank measured in each round it was in a group of; the nodes by key, so the
    record names both nodes of each pair without the run's fingerprint."""
    entries = []
    for slot, group in enumerate(rounds.mine):
        if group is None or slot not in rounds.samples:
            continue
        rail = rounds.layout.local_index(group[0]) if rounds.tier_of_pair == "rails" else None
        entries.append({"round": rounds.slots[slot][0], "group": list(group),
                        "nodes": [rounds.layout.key(n) for n in rounds.nodes_of(group)], "rail": rail,
                        "samples_ns": [int(x) for x in rounds.samples[slot]]})
    return {"pairs": entries, "rounds": len(rounds.groups), "nodes": rounds.layout.nodes}


@dataclass(frozen=True)
class PairMeasurement:
    """One pair of nodes (one rail of it, for ping-pong) in one round."""

    round: int
    group: tuple[int, ...]  # ranks
    nodes: tuple[str, str]  # node keys
    rail: Optional[int]
    samples_ns: tuple[int, ...]  # per iteration, the maximum over the group's ranks

    @property
    def label(self) -> str:
        rail = f" rail {self.rail}" if self.rail is not None else ""
        return f"{self.nodes[0]} <-> {self.nodes[1]}{rail} (round {self.round}, ranks {','.join(map(str, self.group))})"


def measurements(reports: list[dict]) -> list[PairMeasurement]:
    """Every pair measured in a record, from its per-rank reports."""
    merged: dict[tuple, list] = {}
    meta: dict[tuple, dict] = {}
    for rank_report in reports:
        for entry in (rank_report or {}).get("pairs", ()):
            key = (entry["round"], tuple(entry["group"]))
            merged.setdefault(key, []).append(np.asarray(entry["samples_ns"], dtype=np.int64))
            meta[key] = entry
    out = []
    for key in sorted(merged):
        arrays = merged[key]
        if len({a.shape for a in arrays}) != 1:
            raise ValueError(f"round {key[0]}, ranks {key[1]}: the ranks reported different numbers of samples")
        entry = meta[key]
        if len(entry["nodes"]) != 2:
            raise ValueError(f"round {key[0]}, ranks {key[1]}: a pair names 2 nodes, got {entry['nodes']}")
        out.append(PairMeasurement(key[0], key[1], tuple(entry["nodes"]), entry.get("rail"),
                                   tuple(int(x) for x in np.max(np.stack(arrays), axis=0))))
    return out


def counts(measured: list[PairMeasurement]) -> dict[str, float]:
    """The figures every pairs record has: how many pairs and rounds were measured."""
    return {"pairs": float(len(measured)), "rounds": float(len({m.round for m in measured}))}


def pair_count_figures() -> tuple[Figure, ...]:
    return (Figure("pairs", "count", "neither",
                   "tier=pairs: node pairs (rails of them, for ping-pong) measured over the rounds"),
            Figure("rounds", "count", "neither", "tier=pairs: rounds of pairings, at most ceil(log2 nodes) + 1"))
