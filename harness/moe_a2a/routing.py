"""From the gate's logical experts to physical slots: which replica, and what capacity drops.

All functions are deterministic. The global ones (``aware_flows``, ``capacity_plan``) take the
demand of every rank (gathered each step) so every rank computes the same table and picks its own
row; the count exchange afterwards carries what was actually sent.

- ``slots_static``: one replica per expert, so the slot is a table look-up.
- ``slots_naive``: each (token, choice) picks one of its expert's replicas uniformly at random,
  ignoring load and locality: tokens of one rank scatter over every replica's rank.
- ``aware_flows`` + ``slots_aware``: each replica gets an equal share of its expert's demand
  (the share EPLB's packing assumed); a rank's own replica is filled from its own tokens first
  (no network), then replicas on its own node, then the rest in rank order after it, so each
  source sends contiguous blocks to few, near ranks.
- ``capacity_plan`` + ``apply_capacity``: each slot takes at most ``capacity`` pairs per step
  (capacity = ceil(factor * pairs / slots)); sources share a full slot in a rotated order. The
  overflow is dropped, or rerouted to slots with room (most room first); pairs that find no room
  are dropped even when rerouting. Dropped pairs are counted, never hidden.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.moe_a2a.placement import EMPTY, Placement

OVERFLOWS = ("drop", "reroute")  # what capacity does with a pair beyond a slot's capacity

DROPPED = -1


def _single_table(placement: Placement, experts: int) -> np.ndarray:
    counts = placement.replica_counts(experts)
    if (counts != 1).any():
        raise ValueError("slots_static needs exactly one replica per expert")
    table = np.empty(experts, dtype=np.int64)
    flat = placement.slots.ravel()
    held = flat != EMPTY
    table[flat[held]] = np.flatnonzero(held)
    return table


def slots_static(choices: np.ndarray, placement: Placement, experts: int) -> np.ndarray:
    return _single_table(placement, experts)[choices]


def slots_naive(choices: np.ndarray, placement: Placement, experts: int, rng: np.random.Generator) -> np.ndarray:
    counts = placement.replica_counts(experts)
    flat = placement.slots.ravel()
    # Replica table padded to the most replicas any expert has; row e lists e's slots.
    width = int(counts.max())
    table = np.zeros((experts, width), dtype=np.int64)
    for e in range(experts):
        table[e, :counts[e]] = np.flatnonzero(flat == e)
    pick = (rng.random(choices.shape) * counts[choices]).astype(np.int64)
    return table[choices, pick]


def equal_split(total: int, parts: int) -> np.ndarray:
    base = np.full(parts, total // parts, dtype=np.int64)
    base[: total % parts] += 1
    return base


def aware_flows(demand: np.ndarray, placement: Placement,
                ranks_per_node: int | None = None) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """For each replicated expert e: (replica slots [R], flow [world, R] pairs source -> replica).

    Each replica takes an equal share; a source fills its own rank's replica first, then replicas
    on its node (``ranks_per_node``; None: one node), then the others in rank order starting after
    itself, so a source's pairs stay near it and go to few ranks."""
    demand = np.asarray(demand, dtype=np.int64)
    world, experts = demand.shape
    per_node = ranks_per_node or world
    flows = {}
    for e in np.flatnonzero(placement.replica_counts(experts) > 1):
        slots = placement.replicas(int(e))
        owners = placement.owner(slots)
        left_demand = demand[:, e].copy()
        room = equal_split(int(left_demand.sum()), slots.size)
        flow = np.zeros((world, slots.size), dtype=np.int64)
        for j, r in enumerate(owners):  # local first
            x = min(left_demand[r], room[j])
            flow[r, j] += x
            left_demand[r] -= x
            room[j] -= x
        for s in np.roll(np.arange(world), -int(e)):
            if left_demand[s] == 0:
                continue
            near = np.where(owners // per_node == s // per_node, 0, 1)
            for j in np.lexsort(((owners - s) % world, near)):
                if left_demand[s] == 0:
                    break
                x = min(left_demand[s], room[j])
                flow[s, j] += x
                left_demand[s] -= x
                room[j] -= x
        flows[int(e)] = (slots, flow)
    return flows


def slots_aware(choices: np.ndarray, rank: int, placement: Placement, experts: int,
                flows: dict[int, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    flat_slots = placement.slots.ravel()
    table = np.empty(experts, dtype=np.int64)
    for e in range(experts):
        table[e] = np.flatnonzero(flat_slots == e)[0]
    out = table[choices].ravel()
    flat = choices.ravel()
    for e, (slots, flow) in flows.items():
        where = np.flatnonzero(flat == e)
        out[where] = np.repeat(slots, flow[rank])
    return out.reshape(choices.shape)


@dataclass(frozen=True)
class CapacityPlan:
    capacity_per_slot: int
    kept: np.ndarray  # [world, slots] pairs each source may send to each slot
    spill: tuple[np.ndarray, ...]  # per source: destination slot of each overflow pair, in order
    dropped: np.ndarray  # [world] pairs each source drops
    rerouted: np.ndarray  # [world] pairs each source reroutes


def capacity_plan(slot_demand: np.ndarray, factor: float, mode: str) -> CapacityPlan:
    if mode not in OVERFLOWS:
        raise ValueError(f"overflow mode must be one of {OVERFLOWS}, got {mode!r}")
    if factor <= 0:
        raise ValueError(f"capacity factor must be > 0, got {factor}")
    demand = np.asarray(slot_demand, dtype=np.int64)
    world, nslots = demand.shape
    cap = math.ceil(factor * int(demand.sum()) / nslots)
    kept = np.zeros_like(demand)
    for g in range(nslots):
        room = cap
        for s in np.roll(np.arange(world), -g):
            kept[s, g] = min(demand[s, g], room)
            room -= kept[s, g]
    overflow = demand - kept
    spare = cap - kept.sum(axis=0)
    spill, dropped, rerouted = [], np.zeros(world, np.int64), np.zeros(world, np.int64)
    order = np.lexsort((np.arange(nslots), -spare))
    k = 0
    for s in range(world):
        need = int(overflow[s].sum())
        dest: list[int] = []
        if mode == "reroute":
            while need > 0 and k < nslots and spare[order[k]] > 0:
                g = int(order[k])
                x = min(need, int(spare[g]))
                dest += [g] * x
                spare[g] -= x
                need -= x
                if spare[g] == 0:
                    k += 1
        rerouted[s] = len(dest)
        dropped[s] = need
        spill.append(np.asarray(dest + [DROPPED] * need, dtype=np.int64))
    return CapacityPlan(cap, kept, tuple(spill), dropped, rerouted)


def apply_capacity(slots: np.ndarray, rank: int, plan: CapacityPlan) -> np.ndarray:
    """Pairs past a slot's quota (in token order) take the next spill destination."""
    flat = slots.ravel().copy()
    nslots = plan.kept.shape[1]
    order = np.argsort(flat, kind="stable")
    starts = np.searchsorted(flat[order], np.arange(nslots))
    counts = np.bincount(flat, minlength=nslots)
    over = np.zeros(flat.size, dtype=bool)
    for g in np.flatnonzero(counts > plan.kept[rank]):
        over[order[starts[g] + plan.kept[rank, g]: starts[g] + counts[g]]] = True
    # Overflow in (slot, token) order, as capacity_plan counted it.
    over_idx = order[over[order]]
    flat[over_idx] = plan.spill[rank]
    return flat.reshape(slots.shape)


def slot_demand(slots: np.ndarray, nslots: int) -> np.ndarray:
    return np.bincount(slots.ravel()[slots.ravel() >= 0], minlength=nslots)
