"""Where experts live: a table of slots per rank, and the EPLB-style planner that fills it.

A placement is ``slots[rank, slot]`` = the logical expert held there (-1 = empty). Ranks have
``slots_per_rank`` = experts_per_rank + spare slots; spare slots hold replicas.

The planner follows DeepSeek's EPLB (expert-parallel load balancer):
1. replication: start with one replica per expert; give each spare slot to the expert with the
   highest load per replica (ties: lowest expert id);
2. balanced packing: replicas, heaviest first (each weighs load / replicas), go to the rank with
   the least load that still has a free slot, avoiding a rank that already holds that expert
   when another rank qualifies (ties: lowest rank).
It never places more replicas than there are slots, and every expert keeps at least one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EMPTY = -1


@dataclass(frozen=True)
class Placement:
    slots: np.ndarray  # int64 [world, slots_per_rank], logical expert or EMPTY

    @property
    def world(self) -> int:
        return int(self.slots.shape[0])

    @property
    def slots_per_rank(self) -> int:
        return int(self.slots.shape[1])

    @property
    def experts(self) -> int:
        return int(self.slots.max()) + 1

    def replicas(self, expert: int) -> np.ndarray:
        """Global slot ids (rank * slots_per_rank + slot) holding ``expert``, in slot order."""
        return np.flatnonzero(self.slots.ravel() == expert)

    def replica_counts(self, experts: int) -> np.ndarray:
        flat = self.slots.ravel()
        return np.bincount(flat[flat != EMPTY], minlength=experts)

    def owner(self, global_slot) -> np.ndarray:
        return np.asarray(global_slot) // self.slots_per_rank

    def same_as(self, other: "Placement") -> bool:
        return self.slots.shape == other.slots.shape and bool((self.slots == other.slots).all())


def contiguous(experts_per_rank: int, world: int, spare_slots: int = 0) -> Placement:
    """The unmitigated layout: expert e on rank e // experts_per_rank, spare slots empty."""
    slots = np.full((world, experts_per_rank + spare_slots), EMPTY, dtype=np.int64)
    slots[:, :experts_per_rank] = np.arange(world * experts_per_rank).reshape(world, experts_per_rank)
    return Placement(slots)


def replicate(expert_load, total_slots: int) -> np.ndarray:
    """Replicas per expert: one each, then every spare slot to the heaviest load per replica."""
    load = np.asarray(expert_load, dtype=np.float64)
    if total_slots < load.size:
        raise ValueError(f"{load.size} experts do not fit in {total_slots} slots")
    replicas = np.ones(load.size, dtype=np.int64)
    for _ in range(total_slots - load.size):
        replicas[int(np.argmax(load / replicas))] += 1
    return replicas


def eplb(expert_load, world: int, slots_per_rank: int) -> Placement:
    """Load-aware placement with replication (see module doc)."""
    load = np.asarray(expert_load, dtype=np.float64)
    replicas = replicate(load, world * slots_per_rank)
    experts = np.repeat(np.arange(load.size), replicas)
    unit = load[experts] / replicas[experts]
    order = np.lexsort((experts, -unit))  # heaviest first, ties by expert id
    slots = np.full((world, slots_per_rank), EMPTY, dtype=np.int64)
    used = np.zeros(world, dtype=np.int64)
    rank_load = np.zeros(world, dtype=np.float64)
    for i in order:
        e = experts[i]
        free = used < slots_per_rank
        fresh = free & ~(slots == e).any(axis=1)
        pool = fresh if fresh.any() else free
        candidates = np.flatnonzero(pool)
        r = int(candidates[np.argmin(rank_load[candidates])])
        slots[r, used[r]] = e
        used[r] += 1
        rank_load[r] += unit[i]
    return Placement(slots)


def planned_rank_load(placement: Placement, expert_load) -> np.ndarray:
    """Per-rank load if every replica takes an equal share of its expert's load."""
    load = np.asarray(expert_load, dtype=np.float64)
    counts = placement.replica_counts(load.size)
    flat = placement.slots.ravel()
    share = np.where(flat == EMPTY, 0.0, load[np.maximum(flat, 0)] / np.maximum(counts[np.maximum(flat, 0)], 1))
    return share.reshape(placement.slots.shape).sum(axis=1)
