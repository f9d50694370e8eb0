"""Event-level model of one MoE expert-parallel step at 8..256 ranks. Every figure it produces is
MODELLED, not measured.

The step is the measured family's: dispatch all-to-all -> expert compute -> combine all-to-all.
- Messages: one per (source, destination) pair with rows to send, in the usual rotated order
  (source s sends to s+1, s+2, ...). A message holds its sender's port for ``msg_overhead_us`` +
  bytes / bandwidth and its receiver's port for bytes / bandwidth; it starts when both are free
  (in order of the sender's readiness) and is delivered ``latency_us`` after the transfer. The
  tier (intra-node or inter-node) decides latency and bandwidth; a rank's rows for itself are a
  local copy, free here.
- Compute: a rank starts when its last dispatch message arrives and takes ``expert_us_per_pair``
  per received (token, expert) pair.
- Combine: the same messages reversed, each ready when its sender's compute ends. The step ends
  when the slowest rank has all its rows back (the slowest rank sets the step).
- Rows are counted per (token, expert) pair: no per-rank token deduplication (DeepEP sends a
  token once per rank), so bytes are an upper bound when a token picks several experts on a rank.

Loads come from the same workloads, placement and routing code as the measured family (quota
routing, EPLB, naive/aware replica routing, capacity). Adaptive placement under a drifting hot
expert is a time average over one drift period around event-level steps: the steps run stale
(new hot expert, old placement) until the next recompute, then balanced; each recompute costs the
planner (timed on this host), a gather of the load vector and, once per drift, moving the
replicas whose expert changed.
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from harness.moe_a2a import routing
from harness.moe_a2a.imbalance import Imbalance
from harness.moe_a2a.placement import Placement, contiguous, eplb
from harness.moe_a2a.workloads import Shape, Workload, expert_weights, quota

SOURCE = "model"


@dataclass(frozen=True)
class LinkTier:
    name: str
    latency_us: float
    bandwidth_gbps: float  # GB/s, 1e9 bytes per second


@dataclass(frozen=True)
class CostModel:
    """Assumed defaults describe an H800-class node pair (NVLink inside a node of 8, RDMA across
    nodes), of the order DeepEP publishes for its normal kernels; expert cost is a DeepSeek-V3
    expert (3 x 7168 x 2048 matmuls, ~88 MFLOP per pair) at ~450 TFLOP/s effective. Override any
    field; ``fitted_from`` names the run a fit came from, else the values are assumptions."""

    ranks_per_node: int = 8
    intra: LinkTier = LinkTier("nvlink", latency_us=3.0, bandwidth_gbps=150.0)
    inter: LinkTier = LinkTier("rdma", latency_us=8.0, bandwidth_gbps=45.0)
    msg_overhead_us: float = 0.5
    expert_us_per_pair: float = 0.2
    expert_bytes: int = 44 * 1024 * 1024
    # EPLB recomputation on the host: assumed ~2 ms for 256 experts. None: time this package's
    # planner here (a Python loop, slower than a production one, and noisy on a shared host).
    planner_us: Optional[float] = 2000.0
    step_overhead_us: float = 0.0  # per step, outside transfers and experts (routing, launches)
    fitted_from: str = "assumed"

    def tier(self, src: int, dst: int) -> LinkTier:
        return self.intra if src // self.ranks_per_node == dst // self.ranks_per_node else self.inter


@dataclass(frozen=True)
class StepModel:
    dispatch_us: float  # until the last rank has all its rows
    compute_us: float  # the longest expert time of any rank
    step_us: float  # until the slowest rank has all its results back
    messages: int
    bytes_total: int
    rank_pairs: tuple  # received pairs per rank
    dropped_pairs: int = 0

    @property
    def rank_imbalance(self) -> Imbalance:
        return Imbalance.of(self.rank_pairs)


def alltoall(ready_us: np.ndarray, nbytes: np.ndarray, model: CostModel) -> tuple[np.ndarray, int]:
    """Arrival time at each receiver of its last message; sender s is ready at ready_us[s]."""
    world = nbytes.shape[0]
    send_free = ready_us.astype(np.float64).copy()
    recv_free = np.zeros(world)
    done = np.zeros(world)  # a receiver with nothing incoming is done at once
    queues = []
    for s in range(world):
        order = [(s + i) % world for i in range(1, world)]
        queues.append([d for d in order if nbytes[s, d] > 0])
    heap = [(send_free[s], s, 0) for s in range(world) if queues[s]]
    heapq.heapify(heap)
    messages = 0
    while heap:
        t, s, i = heapq.heappop(heap)
        d = queues[s][i]
        tier = model.tier(s, d)
        wire = nbytes[s, d] / (tier.bandwidth_gbps * 1e3)  # bytes / (GB/s) in us
        start = max(t + model.msg_overhead_us, recv_free[d])
        end = start + wire
        recv_free[d] = end
        send_free[s] = end
        done[d] = max(done[d], end + tier.latency_us)
        messages += 1
        if i + 1 < len(queues[s]):
            heapq.heappush(heap, (send_free[s], s, i + 1))
    return np.maximum(done, ready_us), messages


def step(pairs: np.ndarray, placement: Placement, shape: Shape, model: CostModel, dropped: int = 0) -> StepModel:
    """pairs[s, global slot]: (token, expert) pairs source s sends to each slot."""
    W, S = placement.world, placement.slots_per_rank
    to_rank = pairs.reshape(W, W, S).sum(axis=2)  # [source, destination]
    nbytes = to_rank * shape.token_bytes
    np.fill_diagonal(nbytes, 0)
    arrive, m1 = alltoall(np.zeros(W), nbytes, model)
    recv = to_rank.sum(axis=0)
    compute_end = arrive + recv * model.expert_us_per_pair
    back, m2 = alltoall(compute_end, nbytes.T.copy(), model)
    # A rank's own results need its compute done even with no remote rows.
    finish = np.maximum(back, compute_end)
    return StepModel(
        dispatch_us=float(arrive.max()), compute_us=float((recv * model.expert_us_per_pair).max()),
        step_us=float(finish.max()) + model.step_overhead_us, messages=m1 + m2, bytes_total=int(nbytes.sum() * 2),
        rank_pairs=tuple(int(x) for x in recv), dropped_pairs=dropped,
    )


def demand(workload: Workload, shape: Shape, phase: int = 0) -> np.ndarray:
    """[source, expert] pairs: every rank routes by the same quota (see workloads)."""
    q = quota(expert_weights(workload, shape.experts, shape.experts_per_rank, phase), shape.tokens_per_rank,
              shape.top_k)
    return np.tile(q, (shape.world, 1))


def route_pairs(dem: np.ndarray, placement: Placement, how: str, seed: int = 0,
                ranks_per_node: Optional[int] = None) -> np.ndarray:
    """Per-source pairs per global slot under static, naive (random per pair) or aware routing."""
    W, E = dem.shape
    out = np.zeros((W, placement.world * placement.slots_per_rank), dtype=np.int64)
    counts = placement.replica_counts(E)
    rng = np.random.default_rng(seed)
    flows = routing.aware_flows(dem, placement, ranks_per_node) if how == "aware" else {}
    for e in range(E):
        slots = placement.replicas(e)
        if counts[e] == 1:
            out[:, slots[0]] += dem[:, e]
        elif how == "aware":
            sl, flow = flows[e]
            out[:, sl] += flow
        else:  # naive: each pair picks a replica uniformly at random
            for s in range(W):
                out[s, slots] += rng.multinomial(dem[s, e], np.full(slots.size, 1.0 / slots.size))
    return out


def gather_us(shape: Shape, model: CostModel) -> float:
    """All-gather of an int64 load vector per rank: recursive doubling over the slowest tier."""
    W = shape.world
    tier = model.inter if W > model.ranks_per_node else model.intra
    rounds = math.ceil(math.log2(W)) if W > 1 else 0
    return rounds * (tier.latency_us + model.msg_overhead_us) + (W - 1) * shape.experts * 8 / (tier.bandwidth_gbps * 1e3)


def planner_us(shape: Shape, spare: int, model: CostModel, load: np.ndarray) -> float:
    if model.planner_us is not None:
        return model.planner_us
    runs = []
    for _ in range(3):
        t0 = time.perf_counter_ns()
        eplb(load, shape.world, shape.experts_per_rank + spare)
        runs.append(time.perf_counter_ns() - t0)
    return float(np.median(runs)) / 1e3


@dataclass(frozen=True)
class Scenario:
    name: str
    step_us: float
    rel_throughput: float  # tokens/s relative to the uniform, unmitigated step of the same shape
    rank_max_over_mean: float
    dropped_fraction: float = 0.0
    messages: int = 0
    note: str = ""
    source: str = SOURCE


@dataclass(frozen=True)
class SimConfig:
    tokens: int = 4096
    hidden: int = 7168
    bytes_per_elem: int = 1  # FP8 dispatch; the family's payload is 2 or 4 (it checks exactly)
    experts: int = 256
    top_k: int = 8
    hot_factor: float = 17.0
    spare_slots: int = 1
    capacity_factor: float = 1.25
    drift_ms: float = 1000.0  # the hot expert moves once per this period
    windows_ms: tuple = (100.0,)
    seed: int = 0


def _shape(cfg: SimConfig, world: int) -> Shape:
    if cfg.experts % world:
        raise ValueError(f"{cfg.experts} experts do not divide over {world} ranks")
    return Shape(cfg.tokens, cfg.hidden, cfg.bytes_per_elem, cfg.experts // world, cfg.top_k, world)


def simulate(world: int, cfg: SimConfig = SimConfig(), model: CostModel = CostModel()) -> list[Scenario]:
    shape = _shape(cfg, world)
    S = shape.experts_per_rank
    base = contiguous(S, world)
    hot = Workload("hot", cfg.hot_factor, cfg.seed)
    uni = step(demand(Workload("uniform"), shape), base, shape, model)
    out = []

    def add(name, m: StepModel, note="", dropped_fraction=0.0, step_us=None):
        t = m.step_us if step_us is None else step_us
        out.append(Scenario(name, t, uni.step_us / t, m.rank_imbalance.max_over_mean, dropped_fraction,
                            m.messages, note))

    add("uniform", uni)
    d0 = demand(hot, shape, 0)
    skewed = step(d0, base, shape, model)
    add("hot", skewed)
    spare = cfg.spare_slots
    planned = eplb(d0.sum(axis=0), world, S + spare)
    for how in ("naive", "aware"):
        m = step(route_pairs(d0, planned, how, cfg.seed, model.ranks_per_node), planned, shape, model)
        extra = gather_us(shape, model) if how == "aware" else 0.0
        add(f"replicate-{how}", m, "EPLB placement from the true load" + (", + load gather" if extra else ""),
            step_us=m.step_us + extra)
    # Capacity: drop overflow past capacity_factor x the mean per slot.
    slot_dem = route_pairs(d0, base, "static")
    plan = routing.capacity_plan(slot_dem, cfg.capacity_factor, "drop")
    m = step(plan.kept, base, shape, model, int(plan.dropped.sum()))
    # Goodput: only kept pairs count as served tokens.
    kept_share = 1.0 - plan.dropped.sum() / slot_dem.sum()
    t_cap = m.step_us + gather_us(shape, model)
    out.append(Scenario("capacity-drop", t_cap, kept_share * uni.step_us / t_cap, m.rank_imbalance.max_over_mean,
                        float(plan.dropped.sum() / slot_dem.sum()), m.messages,
                        f"cf {cfg.capacity_factor:g}; throughput counts kept pairs only"))
    # Adaptive under drift: phase 0 placement, the hot expert moves to phase 1's.
    d1 = demand(hot, shape, 1)
    stale = step(route_pairs(d1, planned, "aware", ranks_per_node=model.ranks_per_node), planned, shape, model)
    fresh_plan = eplb(d1.sum(axis=0), world, S + spare)
    fresh = step(route_pairs(d1, fresh_plan, "aware", ranks_per_node=model.ranks_per_node), fresh_plan, shape, model)
    moved = int((fresh_plan.slots != planned.slots).sum())
    per_rank_moved = np.bincount(np.nonzero(fresh_plan.slots != planned.slots)[0], minlength=world).max()
    migrate_us = model.inter.latency_us + per_rank_moved * model.expert_bytes / (model.inter.bandwidth_gbps * 1e3)
    plan_us = planner_us(shape, spare, model, d1.sum(axis=0))
    recompute_us = gather_us(shape, model) + plan_us
    step_bal = fresh.step_us + gather_us(shape, model)  # aware routing gathers the load each step
    step_stale = stale.step_us + gather_us(shape, model)
    for window_ms in (None,) + tuple(cfg.windows_ms):
        period_us = cfg.drift_ms * 1e3
        window_us = step_bal if window_ms is None else window_ms * 1e3
        n_recompute = period_us / window_us
        stale_us = min(window_us / 2.0, period_us)  # the drift lands mid-window on average
        busy_us = n_recompute * recompute_us + migrate_us
        if busy_us >= period_us:
            tokens_steps = 0.0
        else:
            steps = stale_us / step_stale + max(period_us - stale_us - busy_us, 0.0) / step_bal
            tokens_steps = steps
        rel = tokens_steps * uni.step_us / period_us
        name = "adaptive-step" if window_ms is None else f"adaptive-{window_ms:g}ms"
        out.append(Scenario(name, period_us / max(tokens_steps, 1e-9), rel, fresh.rank_imbalance.max_over_mean, 0.0,
                            fresh.messages,
                            f"drift every {cfg.drift_ms:g} ms; recompute {recompute_us:.0f} us "
                            f"(planner {plan_us:.0f} us); {moved} slots move once per drift"))
    out.append(Scenario("static-eplb-after-drift", step_stale, uni.step_us / step_stale,
                        stale.rank_imbalance.max_over_mean, 0.0, stale.messages, "placement planned for the old hot expert"))
    return out


def fit_basis(records):
    """The record a model is fitted from: the run's first passing uniform, unmitigated moe_a2a case."""
    uniform = [r for r in records if r.family == "moe_a2a" and r.ok and r.params["workload"] == "uniform"
               and r.params["mitigation"] == "none"]
    if not uniform:
        raise ValueError("the run has no passing moe_a2a uniform case with mitigation=none to fit from")
    return uniform[0]


def fit_from_run(records, base: CostModel = CostModel()) -> tuple[CostModel, dict]:
    """A one-tier model of the measured machine from a moe_a2a run's uniform, unmitigated case:
    per-pair expert time = compute p50 / rows received; the rest of the measured mean step is a
    fixed per-step overhead; the all-to-all (median of the dispatch
    and combine p50s) is put down to bandwidth: rows that leave the rank x row bytes / that time,
    with no latency or per-message term. One case cannot separate the two; on a loopback host the
    split matters little, and the comparison it feeds is labelled modelled. Returns the model and
    what it was fitted from."""
    r = fit_basis(records)
    reports = r.extra["rank_reports"]
    p = r.params
    rows = float(np.mean([x["recv_rows_mean"] for x in reports]))
    phase = {k: float(np.median([x["phase_p50_us"][k] for x in reports])) for k in reports[0]["phase_p50_us"]}
    world = p["world"]
    remote_bytes = rows * (world - 1) / world * p["hidden"] * p["bytes_per_elem"]
    a2a_us = max(float(np.median([phase["dispatch"], phase["combine"]])), 1.0)
    tier = LinkTier("measured", latency_us=0.0, bandwidth_gbps=remote_bytes / a2a_us / 1e3)
    model = replace(base, ranks_per_node=world, intra=tier, inter=tier, msg_overhead_us=0.0,
                    expert_us_per_pair=phase["compute"] / max(rows, 1.0), expert_bytes=p["expert_bytes"],
                    fitted_from=f"{r.run_id}:{r.case_id}")
    # What the measured step spends beyond the modelled transfers and experts (routing, the count
    # exchange, Python, scheduling) becomes a fixed per-step overhead.
    shape = Shape(p["tokens"], p["hidden"], p["bytes_per_elem"], p["experts_per_rank"], p["top_k"], world)
    bare = step(demand(Workload("uniform"), shape), contiguous(shape.experts_per_rank, world), shape, model)
    measured_step_us = r.summary.mean_ns / 1e3
    model = replace(model, step_overhead_us=max(measured_step_us - bare.step_us, 0.0))
    return model, {"case_id": r.case_id, "phase_p50_us": phase, "recv_rows_mean": rows, "a2a_us": a2a_us,
                   "step_us": measured_step_us}
