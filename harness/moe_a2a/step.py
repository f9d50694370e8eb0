"""One expert-parallel MoE step over torch.distributed: route, count exchange, dispatch, expert
compute, combine. Used by ``harness.families.moe_a2a``; pure mechanics, no case parsing.

Per step, on every rank:
1. route: the gate's choices for this step's phase -> physical slots (static, naive or load-aware
   replica routing, capacity). Policies that need every rank's demand gather it first
   (``all_gather`` of an int64 vector per rank); an adaptive case recomputes its placement here
   when its window is over (rank 0's clock decides; its flag rides in the same gather) and moves
   expert weights with an ``all_to_all_single``. All of it is inside the timed step.
2. count exchange: ``all_to_all_single`` of per-(destination rank, slot) counts, so each receiver
   learns how many rows each source sends to each of its slots (DeepEP's notify step).
3. dispatch: ``all_to_all_single`` of token rows with uneven split sizes (one row per routed
   (token, choice) pair, sorted by destination slot).
4. expert compute: each received row gets its slot's expert function, exact by construction
   (row + weight[slot], integer-valued); its *cost* is emulated on CPU by sleeping
   ``ns_per_token`` per received row (an accelerator busy while the host waits: no CPU is used, so
   more ranks than cores stay honest), or a real matmul per row on GPU (``compute="matmul"``).
5. combine: ``all_to_all_single`` back with the splits swapped; rows land at their origin pair.

Phase times are read on the host clock inside the step (after a device synchronise on GPU) and
kept per rank for the family's ``report``; the driver still times the whole step on its own.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist

from harness.moe_a2a import routing
from harness.moe_a2a.config import MAX_KEPT_STEPS, PAIR_BLOCK, PHASES, SENTINEL, Mitigation, check_measurable
from harness.moe_a2a.placement import EMPTY, Placement, contiguous, eplb
from harness.moe_a2a.workloads import Shape, Workload, expert_load, route
from harness.run.timing import time_each

# The step's declarations live in config (torch-free: a family reads them without torch).
DTYPES = {2: torch.float16, 4: torch.float32}  # bytes_per_elem -> payload dtype, one per PAYLOAD_BYTES



@dataclass
class StepCounters:
    dropped_pairs: int = 0
    rerouted_pairs: int = 0
    recomputes: int = 0
    migrated_bytes: int = 0
    recompute_ns: list = field(default_factory=list)


@dataclass
class MoeState:
    rank: int
    world: int
    device: Any
    shape: Shape
    workload: Workload
    mitigation: Mitigation
    drift_steps: int
    ns_per_token: float
    compute: str  # "sleep" | "matmul"
    group: Any
    choices: list  # per phase: int64 [T, k] logical experts
    placement: Placement
    weights: torch.Tensor  # [slots_per_rank, expert_elems]; row = expert + 1 everywhere
    x: torch.Tensor  # [T, hidden] this rank's tokens, integer-valued
    send_buf: torch.Tensor
    recv_buf: torch.Tensor
    out_buf: torch.Tensor
    back_buf: torch.Tensor
    result: torch.Tensor  # [T * k, hidden]: the expert output of each (token, choice) pair
    mm_weight: Optional[torch.Tensor] = None
    mm_out: Optional[torch.Tensor] = None
    steps: int = 0
    observed: Optional[np.ndarray] = None  # adaptive: expert load summed over the window
    steps_in_window: int = 0
    window_start_ns: int = 0
    phase_ns: np.ndarray = None  # [MAX_KEPT_STEPS, len(PHASES)]
    recv_rows: np.ndarray = None  # [MAX_KEPT_STEPS]
    counters: StepCounters = field(default_factory=StepCounters)
    last_slots: Optional[np.ndarray] = None  # the routed slot of each pair in the latest step
    last_send_counts: Optional[np.ndarray] = None  # [world * slots]: rows sent to each global slot
    last_recv_counts: Optional[np.ndarray] = None  # [world, slots]: rows received from each source
    last_phase: int = 0
    rng: np.random.Generator = None
    # Paired A/B: a uniform, unmitigated twin on the same ranks; steps alternate case, twin, ...
    baseline: Optional["MoeState"] = None
    turns: int = 0

    def step(self) -> None:
        """One step of this case: what the family hands the driver to time (via its ``step``)."""
        run_once(self)


def token_rows(shape: Shape, rank: int, device) -> torch.Tensor:
    """Integer-valued rows that say where they come from: column 0 the token, column 1 the rank
    (both modulo 1024), the rest (token + column) mod 16. A row delivered to the wrong origin or
    given the wrong expert's output does not match."""
    T, H = shape.tokens_per_rank, shape.hidden
    t = torch.arange(T, dtype=torch.int64).unsqueeze(1)
    h = torch.arange(H, dtype=torch.int64).unsqueeze(0)
    rows = (t + h) % 16
    rows[:, 0] = torch.arange(T) % 1024
    if H > 1:
        rows[:, 1] = rank % 1024
    return rows.to(DTYPES[shape.bytes_per_elem]).to(device)


def _sync(state: MoeState) -> None:
    if state.device.type == "cuda":
        torch.cuda.synchronize(state.device)


def build(rank: int, world: int, device, group, shape: Shape, workload: Workload, mitigation: Mitigation,
          drift_steps: int, ns_per_token: float, expert_bytes: int, compute: str) -> MoeState:
    if shape.world != world:
        raise ValueError(f"case is for world {shape.world} but this run has {world} ranks")
    check_measurable(shape)
    if compute == "matmul" and device.type != "cuda":
        raise ValueError("compute=matmul needs a CUDA device; CPU runs use the emulated cost (sleep)")
    dtype = DTYPES[shape.bytes_per_elem]
    n_phases = 4 if drift_steps > 0 else 1
    choices = [route(workload, shape, rank, phase) for phase in range(n_phases)]
    S = shape.experts_per_rank + mitigation.spare_slots
    if mitigation.kind == "replicate":
        # Planned from the workload's true load (an oracle EPLB): the best a static plan can do.

        placement = eplb(expert_load(workload, shape, 0), world, S)
    else:
        placement = contiguous(shape.experts_per_rank, world, mitigation.spare_slots)
    expert_elems = max(shape.hidden, expert_bytes // shape.bytes_per_elem)
    pairs = shape.tokens_per_rank * shape.top_k
    rows_max = pairs * world  # every rank could send every pair to this one
    H = shape.hidden
    state = MoeState(
        rank=rank, world=world, device=device, shape=shape, workload=workload, mitigation=mitigation,
        drift_steps=drift_steps, ns_per_token=ns_per_token, compute=compute, group=group,
        choices=choices, placement=placement,
        weights=torch.empty(S, expert_elems, dtype=dtype, device=device),
        x=token_rows(shape, rank, device),
        send_buf=torch.empty(pairs, H, dtype=dtype, device=device),
        recv_buf=torch.empty(rows_max, H, dtype=dtype, device=device),
        out_buf=torch.empty(rows_max, H, dtype=dtype, device=device),
        back_buf=torch.empty(pairs, H, dtype=dtype, device=device),
        result=torch.full((pairs, H), SENTINEL, dtype=dtype, device=device),
        phase_ns=np.zeros((MAX_KEPT_STEPS, len(PHASES)), dtype=np.int64),
        recv_rows=np.zeros(MAX_KEPT_STEPS, dtype=np.int64),
        rng=np.random.default_rng([workload.seed, rank, 99]),
    )
    _load_weights(state)
    if compute == "matmul":
        state.mm_weight = torch.randn(H, H, dtype=dtype, device=device) / H ** 0.5
        state.mm_out = torch.empty(rows_max, H, dtype=dtype, device=device)
    if mitigation.kind == "adaptive":
        state.observed = np.zeros(shape.experts, dtype=np.int64)
        state.window_start_ns = time.perf_counter_ns()
    return state


def _load_weights(state: MoeState) -> None:
    """Set every slot's weights from its expert id (used at set-up; later moves go by network)."""
    held = state.placement.slots[state.rank]
    values = torch.as_tensor(np.where(held == EMPTY, 0, held + 1), dtype=state.weights.dtype)
    state.weights.copy_(values.to(state.device).unsqueeze(1).expand_as(state.weights))


def phase_of(state: MoeState, step: int) -> int:
    return (step // state.drift_steps) % len(state.choices) if state.drift_steps > 0 else 0


def _gather_demand(state: MoeState, demand: np.ndarray, flag: int) -> np.ndarray:
    """Every rank's demand vector (plus rank 0's recompute flag in the last column): [world, n+1]."""
    mine = torch.from_numpy(np.append(demand, flag).astype(np.int64))
    if state.world == 1:
        return mine.numpy()[None, :]
    if state.device.type == "cuda":
        mine = mine.to(state.device)
    parts = [torch.empty_like(mine) for _ in range(state.world)]
    dist.all_gather(parts, mine, group=state.group)
    return torch.stack(parts).cpu().numpy()


def _migrate(state: MoeState, new: Placement) -> int:
    """Move expert weights so that this rank's slots hold ``new``; returns bytes this rank sent.
    Every rank computes the same plan: a slot whose expert changes copies it from its own old
    slots when it had the expert, else from the lowest rank that had it."""
    old, S, W = state.placement, state.placement.slots_per_rank, state.world
    sends: list[list[tuple[int, int]]] = [[] for _ in range(W)]  # per destination: (src slot, dst slot)
    local: list[tuple[int, int]] = []
    recv_from: list[list[int]] = [[] for _ in range(W)]  # per source: destination slots on this rank
    for r in range(W):
        for s in range(S):
            e = new.slots[r, s]
            if e == EMPTY or e == old.slots[r, s]:
                continue
            own = np.flatnonzero(old.slots[r] == e)
            if own.size:
                if r == state.rank:
                    local.append((int(own[0]), s))
                continue
            src = int(np.flatnonzero((old.slots == e).any(axis=1))[0])
            src_slot = int(np.flatnonzero(old.slots[src] == e)[0])
            if src == state.rank:
                sends[r].append((src_slot, s))
            if r == state.rank:
                recv_from[src].append(s)
    new_weights = state.weights.clone()
    for src_slot, dst_slot in local:
        new_weights[dst_slot] = state.weights[src_slot]
    send_idx = [src for d in range(W) for src, _ in sends[d]]
    in_splits = [len(sends[d]) for d in range(W)]
    out_splits = [len(recv_from[s]) for s in range(W)]
    if sum(in_splits) or sum(out_splits):
        payload = state.weights[torch.as_tensor(send_idx, dtype=torch.int64, device=state.device)] if send_idx \
            else state.weights[:0]
        incoming = torch.empty(sum(out_splits), state.weights.shape[1], dtype=state.weights.dtype, device=state.device)
        dist.all_to_all_single(incoming, payload.contiguous(), out_splits, in_splits, group=state.group)
        dst = [s for src in range(W) for s in recv_from[src]]
        if dst:
            new_weights[torch.as_tensor(dst, dtype=torch.int64, device=state.device)] = incoming
    # Slots that became empty keep nothing.
    emptied = np.flatnonzero(new.slots[state.rank] == EMPTY)
    if emptied.size:
        new_weights[torch.as_tensor(emptied, device=state.device)] = 0
    state.weights.copy_(new_weights)
    return int(sum(in_splits) * state.weights.shape[1] * state.weights.element_size())


def _route(state: MoeState, choices: np.ndarray) -> np.ndarray:
    """Global slot id of each (token, choice) pair, or routing.DROPPED."""
    m, shape, placement = state.mitigation, state.shape, state.placement
    E = shape.experts
    if not m.gathers_demand:
        if m.routing == "naive":
            return routing.slots_naive(choices, placement, E, state.rng)
        return routing.slots_static(choices, placement, E)
    demand = np.bincount(choices.ravel(), minlength=E)
    flag = 0
    if m.kind == "adaptive" and state.rank == 0:
        state.steps_in_window += 1
        if m.window_steps:
            flag = int(state.steps_in_window >= m.window_steps)
        else:
            flag = int(time.perf_counter_ns() - state.window_start_ns >= m.window_ms * 1e6)
    gathered = _gather_demand(state, demand, flag)
    demand_all = gathered[:, :E]
    if m.kind == "adaptive":
        state.observed += demand_all.sum(axis=0)
        if gathered[0, E]:
            t0 = time.perf_counter_ns()
            new = eplb(state.observed, state.world, placement.slots_per_rank)
            if not new.same_as(placement):
                state.counters.migrated_bytes += _migrate(state, new)
                state.placement = placement = new
            state.counters.recomputes += 1
            state.counters.recompute_ns.append(time.perf_counter_ns() - t0)
            state.observed[:] = 0
            state.steps_in_window = 0
            state.window_start_ns = time.perf_counter_ns()
    if m.kind == "capacity":
        slots = routing.slots_static(choices, placement, E)
        nslots = state.world * placement.slots_per_rank
        table = routing.slots_static(np.arange(E), placement, E)
        slot_dem = np.zeros((state.world, nslots), dtype=np.int64)
        slot_dem[:, table] = demand_all
        plan = routing.capacity_plan(slot_dem, m.capacity_factor, m.overflow)
        state.counters.dropped_pairs += int(plan.dropped[state.rank])
        state.counters.rerouted_pairs += int(plan.rerouted[state.rank])
        return routing.apply_capacity(slots, state.rank, plan)
    if int(placement.replica_counts(E).max()) == 1:
        return routing.slots_static(choices, placement, E)
    if m.routing == "naive":
        return routing.slots_naive(choices, placement, E, state.rng)
    return routing.slots_aware(choices, state.rank, placement, E, routing.aware_flows(demand_all, placement))


def step(state: MoeState) -> None:
    """The timed operation of an unpaired case: one step. Paired cases time their own loop
    (``time_paired``), so the driver never times the twin's steps as the case's."""
    run_once(state)


def time_paired(state: MoeState, iters: int, clock) -> np.ndarray:
    """``iters`` host-clock durations of this case's own steps, interleaved with its uniform twin in
    alternating blocks of PAIR_BLOCK steps (A B A B; every rank alternates in lockstep, so both
    variants see the same machine conditions). Blocks rather than single steps because a
    straggler's wait spills into the next step: the first step of each of the case's blocks, which
    inherits the twin's straggler, is run but not timed; the twin's steps are never samples."""
    block = 2 * PAIR_BLOCK  # the case's PAIR_BLOCK steps, then the twin's
    parts: list[np.ndarray] = []
    done = 0
    while done < iters:
        at = state.turns % block
        if at >= PAIR_BLOCK:  # the rest of the twin's block, untimed
            for _ in range(block - at):
                run_once(state.baseline)
            state.turns += block - at
            continue
        if at == 0:  # the case's first step waits for the twin's straggler: run, not timed
            run_once(state)
            state.turns += 1
            at = 1
        n = min(PAIR_BLOCK - at, iters - done)
        parts.append(time_each(run_once, state, n, clock))  # the project's timing loop, as the driver's
        state.turns += n
        done += n
    return np.concatenate(parts)


def step_totals_ns(state: MoeState) -> np.ndarray:
    """Host-clock duration of each kept step of this rank (route to combine), in step order."""
    n = min(state.steps, MAX_KEPT_STEPS)
    return state.phase_ns[:n].sum(axis=1)


def run_once(state: MoeState) -> None:
    clock = time.perf_counter_ns
    W, S = state.world, state.placement.slots_per_rank
    H, k = state.shape.hidden, state.shape.top_k
    dev = state.device
    t0 = clock()
    phase = phase_of(state, state.steps)
    slots = _route(state, state.choices[phase])
    S = state.placement.slots_per_rank
    flat = slots.ravel()
    sent = np.flatnonzero(flat != routing.DROPPED)
    order = sent[np.argsort(flat[sent], kind="stable")]  # pairs by destination slot
    send_counts = np.bincount(flat[sent], minlength=W * S)
    t1 = clock()
    counts_out = torch.from_numpy(send_counts).to(dev)
    counts_in = torch.empty_like(counts_out)
    if W > 1:
        dist.all_to_all_single(counts_in, counts_out, group=state.group)
    else:
        counts_in.copy_(counts_out)
    recv_counts = counts_in.cpu().numpy().reshape(W, S)
    in_splits = send_counts.reshape(W, S).sum(axis=1).tolist()
    out_splits = recv_counts.sum(axis=1).tolist()
    n_send, n_recv = len(order), int(sum(out_splits))
    t2 = clock()
    order_t = torch.from_numpy(order).to(dev)
    torch.index_select(state.x, 0, order_t // k, out=state.send_buf[:n_send])
    dist.all_to_all_single(state.recv_buf[:n_recv], state.send_buf[:n_send], out_splits, in_splits, group=state.group)
    _sync(state)
    t3 = clock()
    slot_rows = torch.from_numpy(np.repeat(np.tile(np.arange(S), W), recv_counts.ravel())).to(dev)
    torch.add(state.recv_buf[:n_recv], state.weights[slot_rows, :H], out=state.out_buf[:n_recv])
    if state.compute == "matmul":
        torch.mm(state.recv_buf[:n_recv], state.mm_weight, out=state.mm_out[:n_recv])
        _sync(state)
    elif state.ns_per_token > 0 and n_recv:
        time.sleep(n_recv * state.ns_per_token / 1e9)
    t4 = clock()
    dist.all_to_all_single(state.back_buf[:n_send], state.out_buf[:n_recv], in_splits, out_splits, group=state.group)
    state.result.index_copy_(0, order_t, state.back_buf[:n_send])
    _sync(state)
    t5 = clock()
    i = state.steps % MAX_KEPT_STEPS
    state.phase_ns[i] = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)
    state.recv_rows[i] = n_recv
    state.last_slots = slots
    state.last_send_counts = send_counts
    state.last_recv_counts = recv_counts
    state.last_phase = phase
    state.steps += 1


def expected_recv_counts(send_all: np.ndarray, rank: int, slots_per_rank: int) -> np.ndarray:
    """What ``rank`` must receive, [source, local slot], given every rank's send counts
    [source, world * slots]: the receivers' splits are the transpose of the senders'."""
    return np.asarray(send_all)[:, rank * slots_per_rank:(rank + 1) * slots_per_rank]


def gather_send_counts(state: MoeState) -> np.ndarray:
    mine = torch.from_numpy(state.last_send_counts.astype(np.int64))
    if state.world == 1:
        return mine.numpy()[None, :]
    if state.device.type == "cuda":
        mine = mine.to(state.device)
    parts = [torch.empty_like(mine) for _ in range(state.world)]
    dist.all_gather(parts, mine, group=state.group)
    return torch.stack(parts).cpu().numpy()
