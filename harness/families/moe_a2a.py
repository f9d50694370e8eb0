"""MoE expert-parallel all-to-all: a hot expert, the straggler it makes, and its mitigations.

One step is route -> count exchange -> dispatch -> expert compute -> combine over
``all_to_all_single`` with uneven split sizes (``harness.moe_a2a.step``). Cases put each mitigation
beside the unmitigated case on the same shape and workload:

- ``mitigation=none``: experts placed contiguously, one replica each;
- ``replicate``: EPLB-style placement with spare slots, ``routing=naive`` (each pair picks a
  replica at random) or ``aware`` (equal share per replica, local replica first);
- ``adaptive``: starts contiguous; recomputes the placement from the load observed in the last
  window (``window_steps`` steps or ``window_ms`` ms) and moves expert weights over the network,
  all inside the timed step; with ``drift_steps`` the hot expert moves every that many steps;
- ``capacity``: per-slot capacity ``capacity_factor`` x the mean, overflow ``drop`` or ``reroute``.

Expert cost: ``compute=sleep`` (CPU; ``ns_per_token`` per received row, emulated and stated) or
``compute=matmul`` (GPU only: a hidden x hidden matmul per row). The check is exact either way:
every (token, choice) pair must come back to its origin holding its expert's output.

Effective throughput relative to the uniform case is measured two ways: as a paired metric
(``paired=1``: the case's steps alternate with a uniform, unmitigated twin's, A B A B, and
``paired_rel_throughput`` compares the two; the grid pairs every skewed case), and from the records
of a run (``critpath moe-report RUN_DIR``: each case over the uniform case of the same shape).
"""
from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from harness.core.case import Case, Needs, Param
from harness.core.family import (
    BACKEND,
    WRONG_COLUMN,
    CheckResult,
    Column,
    Family,
    GridOptions,
    Plot,
    RankContext,
    bytes_param,
    cases_held,
    world_param,
)
from harness.core.figures import Figure
from harness.core.scale import MAX_EMULATED_US
from harness.core.stats import Summary
from harness.moe_a2a import plots
from harness.moe_a2a.config import (
    MITIGATIONS,
    PAIR_BLOCK,
    PAYLOAD_BYTES,
    PHASES,
    ROUTINGS,
    SENTINEL,
    Mitigation,
    check_buffers,
    check_measurable,
    mitigation_label,
    workload_label,
)
from harness.moe_a2a.imbalance import MEASURES, Imbalance
from harness.moe_a2a.routing import OVERFLOWS
from harness.moe_a2a.workloads import (
    DEEPEP_EXPERTS,
    DEEPEP_HIDDEN,
    DEEPEP_TOKENS,
    DEEPEP_TOP_K,
    KINDS,
    Shape,
    Workload,
    expert_load,
)

if TYPE_CHECKING:  # the step needs torch; setup imports it, so reading MoE cases and records does not
    from harness.moe_a2a.step import MoeState

# CPU defaults: 4 ranks (the skew needs more than 2 ranks to show at rank level), 32 experts,
# top-2, 256 tokens of 1 KiB per rank; 20 us of emulated expert time per received row, so that
# expert time dominates the step (about 10 ms of 20 ms in the uniform case) and the straggler it
# makes stands above the noise of loopback transfers on a shared machine.
CPU_SHAPE = dict(tokens=256, hidden=256, bytes_per_elem=4, experts_per_rank=8, top_k=2, world=4)
CPU_NS_PER_TOKEN = 20000.0
CPU_EXPERT_BYTES = 256 * 1024
HOT_FACTOR = 17.0  # claim A1.moe_skew
DRIFT_STEPS = 40


def _base(options: GridOptions, **over) -> dict:
    if options.backend == "nccl":
        world = options.world
        p = dict(tokens=DEEPEP_TOKENS, hidden=DEEPEP_HIDDEN, bytes_per_elem=2,
                 experts_per_rank=max(1, DEEPEP_EXPERTS // world), top_k=DEEPEP_TOP_K, world=world,
                 compute="matmul", ns_per_token=0.0, expert_bytes=44 * 1024 * 1024)
    else:
        # --world larger than 4 is honoured; fewer ranks would hide the skew (with 2 ranks the hot
        # rank can hold at most twice the mean), so a joined job of 2 or 3 ranks records these
        # cases as needing 4.
        p = dict(CPU_SHAPE, world=max(CPU_SHAPE["world"], options.world), compute="sleep",
                 ns_per_token=CPU_NS_PER_TOKEN, expert_bytes=CPU_EXPERT_BYTES)
    p.update(backend=options.backend, seed=0, workload="uniform", skew=0.0, mitigation="none")
    p.update(over)
    return p


def grid(options: GridOptions) -> list[Case]:
    hot = dict(workload="hot", skew=HOT_FACTOR)
    specs = [
        {},
        hot,
        dict(hot, mitigation="replicate", routing="naive", spare_slots=1),
        dict(hot, mitigation="replicate", routing="aware", spare_slots=1),
        dict(hot, mitigation="capacity", capacity_factor=1.25, overflow="drop"),
        # The hot expert moves every DRIFT_STEPS steps: adaptive every step vs every 100 ms.
        dict(hot, drift_steps=DRIFT_STEPS, mitigation="adaptive", spare_slots=1, window_steps=1),
        dict(hot, drift_steps=DRIFT_STEPS, mitigation="adaptive", spare_slots=1, window_ms=100.0),
    ]
    if options.profile == "full":
        specs += [
            dict(hot, mitigation="capacity", capacity_factor=1.25, overflow="reroute"),
            dict(hot, drift_steps=DRIFT_STEPS),
            dict(workload="zipf", skew=1.0),
            dict(workload="zipf", skew=1.2),
            dict(workload="unbalanced", skew=2.0),
            dict(workload="unbalanced", skew=4.0),
            dict(hot, skew=4.0),
            dict(hot, skew=8.0),
            dict(hot, drift_steps=DRIFT_STEPS, mitigation="adaptive", spare_slots=1, window_steps=10),
            dict(hot, drift_steps=DRIFT_STEPS, mitigation="adaptive", spare_slots=1, window_ms=10.0),
            dict(hot, mitigation="capacity", capacity_factor=1.0, overflow="drop"),
            dict(hot, mitigation="capacity", capacity_factor=2.0, overflow="drop"),
            dict(hot, mitigation="replicate", routing="aware", spare_slots=2),
        ]
    # Every skewed case alternates its steps with a uniform twin (paired=1), so its ratio to
    # uniform is measured A B A B under the same machine conditions.
    return cases_held(FAMILY.name, options, (partial(FAMILY.case, **_base(options, **spec, **({} if not spec else {"paired": 1})))
                                             for spec in specs))


def _shape(p: dict) -> Shape:
    return Shape(p["tokens"], p["hidden"], p["bytes_per_elem"], p["experts_per_rank"], p["top_k"], p["world"])


def _mitigation(case: Case) -> Mitigation:
    v = FAMILY.value
    return Mitigation(
        kind=v(case, "mitigation"), routing=v(case, "routing"), spare_slots=v(case, "spare_slots"),
        window_steps=v(case, "window_steps"), window_ms=v(case, "window_ms"),
        capacity_factor=v(case, "capacity_factor"), overflow=v(case, "overflow"),
    )


def _workload_of(case: Case) -> Workload:
    p = case.params
    return Workload(p["workload"], p["skew"], p["seed"])


def _moe_step():
    """harness.moe_a2a.step, imported when a rank first needs it: it needs torch."""
    from harness.moe_a2a import step

    return step


def step(state: MoeState) -> None:
    state.step()


def iterate(state: MoeState, iters: int, clock):
    """A paired case owns its loop so that its samples are its own steps, not its twin's."""
    if state.baseline is None:
        return None  # unpaired: the driver's loop
    return _moe_step().time_paired(state, iters, clock)


def validate(case: Case) -> None:
    # The domain's own constructors hold the rules (top_k within the world's experts, a mitigation's
    # keys); building them here refuses a case before any rank starts.
    check_measurable(_shape(case.params))
    _workload_of(case)
    check_buffers(_shape(case.params), _mitigation(case).spare_slots, case.params["expert_bytes"])


def setup(ctx: RankContext, case: Case) -> MoeState:
    p = case.params
    if p["backend"] != ctx.backend:
        raise ValueError(f"case is for backend {p['backend']!r} but this run uses {ctx.backend!r}")
    args = (ctx.rank, ctx.world, ctx.device, ctx.group, _shape(p))
    rest = (p["ns_per_token"], p["expert_bytes"], p["compute"])
    state = _moe_step().build(*args, _workload_of(case), _mitigation(case), FAMILY.value(case, "drift_steps"), *rest)
    if FAMILY.value(case, "paired"):
        state.baseline = _moe_step().build(*args, Workload("uniform", 0.0, p["seed"]), Mitigation(), 0, *rest)
    return state


def check(state: MoeState) -> CheckResult:
    """One more step, then every pair's row against an independent expectation: the token's own
    row plus (expert + 1), where the expert is the gate's choice (or, for a capacity reroute, the
    expert of the slot it was sent to, whose count must match the plan). Dropped pairs must come
    back untouched."""
    wrong, checked, detail = 0, 0, []
    if state.baseline is not None:
        twin = check(state.baseline)
        wrong, checked, detail = twin.wrong, twin.checked, [twin.detail] if twin.detail else []
    state.result.fill_(SENTINEL)
    before = (state.counters.dropped_pairs, state.counters.rerouted_pairs)
    _moe_step().run_once(state)
    dropped = state.counters.dropped_pairs - before[0]
    rerouted = state.counters.rerouted_pairs - before[1]
    T, k = state.shape.tokens_per_rank, state.shape.top_k
    gate = state.choices[state.last_phase].ravel()
    routed = state.last_slots.ravel()
    is_dropped = routed < 0
    expert = gate.copy()
    if state.mitigation.kind == "capacity":
        routed_expert = state.placement.slots.ravel()[np.maximum(routed, 0)]
        moved = (~is_dropped) & (routed_expert != gate)
        if int(moved.sum()) != rerouted or int(is_dropped.sum()) != dropped:
            wrong += 1
            detail.append(f"rank {state.rank}: capacity counts disagree with the plan")
        expert = np.where(moved, routed_expert, gate)
    elif is_dropped.any():
        wrong += int(is_dropped.sum())
        detail.append(f"rank {state.rank}: pairs dropped without a capacity limit")
    S = state.placement.slots_per_rank
    send_all = _moe_step().gather_send_counts(state)
    if not (_moe_step().expected_recv_counts(send_all, state.rank, S) == state.last_recv_counts).all():
        wrong += 1
        detail.append(f"rank {state.rank}: received splits are not the transpose of the senders'")
    result = state.result.double().cpu().numpy()
    x = state.x.double().cpu().numpy()
    want = x[np.arange(T * k) // k] + (expert + 1)[:, None]
    want[is_dropped] = SENTINEL
    bad = ~(result == want).all(axis=1)
    wrong += int(bad.sum())
    if bad.any():
        detail.append(f"rank {state.rank}: {int(bad.sum())} pairs wrong, first at pair {int(np.flatnonzero(bad)[0])}")
    return CheckResult(wrong=wrong, checked=checked + T * k + 2, detail="; ".join(detail))


def report(state: MoeState) -> dict:
    n = min(state.steps, _moe_step().MAX_KEPT_STEPS)
    phases = state.phase_ns[:n]
    c = state.counters
    return {
        "phase_p50_us": {name: float(np.median(phases[:, i])) / 1e3 for i, name in enumerate(PHASES)},
        "recv_rows_mean": float(state.recv_rows[:n].mean()),
        "steps": state.steps,
        "dropped_pairs": c.dropped_pairs,
        "rerouted_pairs": c.rerouted_pairs,
        "recomputes": c.recomputes,
        "recompute_us_mean": float(np.mean(c.recompute_ns)) / 1e3 if c.recompute_ns else 0.0,
        "migrated_bytes": c.migrated_bytes,
        "sent_pairs_per_step": state.shape.tokens_per_rank * state.shape.top_k,
        "compute": "emulated: sleep ns_per_token x received rows" if state.compute == "sleep"
        else "measured: hidden x hidden matmul per received row",
        "placement_final": state.placement.slots.tolist(),
        **_paired_report(state),
    }


def _paired_report(state: MoeState) -> dict:
    """Per-step host times of the case and of its uniform twin, in step order; the check's extra
    step is left out."""
    if state.baseline is None:
        return {}
    case_ns = _moe_step().step_totals_ns(state)[:-1]
    twin_ns = _moe_step().step_totals_ns(state.baseline)
    return {"paired_case_step_ns": case_ns.tolist(), "paired_uniform_step_ns": twin_ns.tolist(),
            "paired_block_steps": PAIR_BLOCK}


def metrics(case: Case, summary: Summary, reports: list[dict]) -> dict[str, float]:
    p = case.params
    shape = _shape(p)
    world = p["world"]
    mean_s = summary.mean_ns / 1e9
    steps = np.array([r["steps"] for r in reports], dtype=np.float64)
    pairs = shape.tokens_per_rank * shape.top_k * world
    out = {
        # Mean step: it carries the occasional recompute/migration step, which a median hides.
        "step_us": summary.mean_ns / 1e3,
        "step_p50_us": summary.p50_ns / 1e3,
        "tokens_per_s": shape.tokens_per_rank * world / mean_s,
        # The median step: robust to other tenants' spikes on a shared host, but blind to a
        # recompute that happens on fewer than half the steps. Reports show both.
        "tokens_per_s_p50": shape.tokens_per_rank * world / (summary.p50_ns / 1e9),
        "dropped_fraction": sum(r["dropped_pairs"] for r in reports) / float((steps * pairs / world).sum()),
        "rerouted_fraction": sum(r["rerouted_pairs"] for r in reports) / float((steps * pairs / world).sum()),
        "recomputes_per_kstep": 1e3 * reports[0]["recomputes"] / max(reports[0]["steps"], 1),
        "recompute_us_mean": reports[0]["recompute_us_mean"],
        "migrated_bytes_per_step": sum(r["migrated_bytes"] for r in reports) / max(reports[0]["steps"], 1),
    }
    for name in PHASES:
        out[f"{name}_us_p50_max_rank"] = max(r["phase_p50_us"][name] for r in reports)
    if "paired_case_step_ns" in reports[0]:
        out.update(_paired_metrics(reports))
    # Measured: rows each rank received per step (mean over steps), as the straggler sees it.
    out.update(Imbalance.of([r["recv_rows_mean"] for r in reports]).to_dict("rank_"))
    # The gate's load over experts in phase 0 (a property of the workload, not of the run).
    out.update(Imbalance.of(expert_load(Workload(p["workload"], p["skew"], p["seed"]), shape)).to_dict("expert_"))
    return out


def _paired_metrics(reports: list[dict]) -> dict[str, float]:
    """Throughput relative to the uniform twin, interleaved in blocks (A B A B) in this one case:
    per step the slowest rank's host time (the driver's reduction); the first block of each
    variant is warm-up and the first step of every block is dropped (it waits for the other
    variant's straggler). The record's samples are the case's own steps (``iterate``), so step_us
    and tokens_per_s are the case's; these add the twin beside it."""
    block = reports[0]["paired_block_steps"]

    def per_step(key: str) -> np.ndarray:
        n = min(len(r[key]) for r in reports)
        worst = np.max([r[key][:n] for r in reports], axis=0)
        keep = (np.arange(n) % block != 0) & (np.arange(n) >= block)
        return worst[keep]

    case, twin = per_step("paired_case_step_ns"), per_step("paired_uniform_step_ns")
    if case.size == 0 or twin.size == 0:
        return {}
    return {
        "paired_case_step_us": float(case.mean()) / 1e3,
        "paired_case_step_p50_us": float(np.median(case)) / 1e3,
        "paired_uniform_step_us": float(twin.mean()) / 1e3,
        "paired_rel_throughput": float(twin.mean() / case.mean()),
        "paired_rel_throughput_p50": float(np.median(twin) / np.median(case)),
        "paired_steps": float(min(case.size, twin.size)),
    }


_PAIRED = "paired=1, per step the slowest rank's host time, first block and first step of each block dropped"
FIGURES = (
    Figure("step_us", "us", "lower", "mean step (route, count, dispatch, compute, combine), the slowest rank's; "
           "paired cases: the case's own steps only"),
    Figure("step_p50_us", "us", "lower", "median step (as step_us)"),
    Figure("tokens_per_s", "tokens/s", "higher", "tokens per rank x world / mean step", headline=True),
    Figure("tokens_per_s_p50", "tokens/s", "higher", "tokens per rank x world / median step"),
    Figure("dropped_fraction", "fraction", "lower", "token-expert pairs dropped by capacity / pairs sent",
           headline=True),
    Figure("rerouted_fraction", "fraction", "neither", "token-expert pairs rerouted by capacity / pairs sent"),
    Figure("recomputes_per_kstep", "1/kstep", "neither", "adaptive placement recomputations per 1000 steps"),
    Figure("recompute_us_mean", "us", "lower", "mean time of one placement recomputation on rank 0"),
    Figure("migrated_bytes_per_step", "bytes", "lower", "expert weight bytes moved by placement changes per step"),
    *(Figure(f"{phase}_us_p50_max_rank", "us", "lower", f"median {phase} phase time of a step, the slowest rank's "
             "(host clock inside the step, after a device synchronise on GPU)") for phase in PHASES),
    Figure("paired_case_step_us", "us", "lower", f"mean step of the case; {_PAIRED}"),
    Figure("paired_case_step_p50_us", "us", "lower", f"median step of the case; {_PAIRED}"),
    Figure("paired_uniform_step_us", "us", "lower", f"mean step of the uniform, unmitigated twin; {_PAIRED}"),
    Figure("paired_rel_throughput", "ratio", "higher", f"twin's mean step / case's mean step; {_PAIRED}",
           headline=True),
    Figure("paired_rel_throughput_p50", "ratio", "higher", f"twin's median step / case's median step; {_PAIRED}"),
    Figure("paired_steps", "steps", "neither", f"steps behind the paired figures, per variant; {_PAIRED}"),
    *(Figure(f"rank_{name}", "ratio" if name != "gini" else "index", better,
             f"{what}, of the rows each rank received per step (mean over steps)")
      for name, (better, what) in MEASURES.items()),
    # The load the gate puts on each expert in phase 0 follows from the workload alone: a model.
    *(Figure(f"expert_{name}", "ratio" if name != "gini" else "index", better,
             f"{what}, of the workload's load per expert in phase 0 (a property of the workload)", source="modelled")
      for name, (better, what) in MEASURES.items()),
)


# Keys that are the settings of one mitigation only (their docs begin with its name).
CAPACITY, ADAPTIVE = Needs("mitigation", ("capacity",)), Needs("mitigation", ("adaptive",))

FAMILY = Family(
    name="moe_a2a",
    version=2,
    description="MoE dispatch/compute/combine over all_to_all_single: hot-expert skew and mitigations",
    params=(
        BACKEND,
        Param("bytes_per_elem", int, "payload element: 2 (float16) or 4 (float32)", choices=PAYLOAD_BYTES,
              required=True),
        Param("capacity_factor", float, "capacity: slot capacity as a multiple of the mean pairs per slot", low=0,
              high=1e6, default=Mitigation.capacity_factor, needs=CAPACITY),
        Param("compute", str, "sleep (emulated cost per received row, CPU) or matmul (GPU)",
              choices=("sleep", "matmul"), required=True),
        Param("drift_steps", int, "the hot expert moves every this many steps (0: never)", low=0, default=0),
        bytes_param("expert_bytes", "weight bytes per expert moved when a placement changes", low=0),
        Param("experts_per_rank", int, "logical experts per rank (experts = this x world)", low=1, required=True),
        Param("hidden", int, "hidden size (elements per token row)", low=1, required=True),
        Param("mitigation", str, "what answers the skew", choices=MITIGATIONS, default=Mitigation.kind,
              written=True),
        Param("ns_per_token", float, "emulated expert time per received row in ns (compute=sleep)", low=0,
              high=1e9, required=True),
        Param("overflow", str, "capacity: what happens to pairs beyond capacity", choices=OVERFLOWS,
              default=Mitigation.overflow, written=True, needs=CAPACITY),
        Param("paired", int, "1: alternate steps with a uniform, unmitigated twin (A B A B) for paired ratios",
              choices=(0, 1), default=0),
        Param("routing", str, "replicate: which replica a pair goes to", choices=ROUTINGS, default=Mitigation.routing),
        Param("seed", int, "workload seed", low=0, required=True),
        Param("skew", float, "zipf exponent, hot factor F or unbalanced ratio R", low=0, high=1e6, required=True),
        Param("spare_slots", int, "replica slots per rank beyond experts_per_rank", low=0,
              default=Mitigation.spare_slots),
        Param("tokens", int, "tokens per rank per step", low=1, required=True),
        Param("top_k", int, "experts per token (at most the experts of the world)", low=1, required=True),
        Param("window_ms", float, "adaptive: recompute placement every this many ms (rank 0's clock)", low=0,
              high=MAX_EMULATED_US / 1e3, default=Mitigation.window_ms, needs=ADAPTIVE),
        Param("window_steps", int, "adaptive: recompute placement every this many steps", low=0,
              default=Mitigation.window_steps, needs=ADAPTIVE),
        Param("workload", str, "which experts the tokens pick", choices=KINDS, required=True),
        world_param(),
    ),
    grid=grid,
    setup=setup,
    step=step,
    metrics=metrics,
    check=check,
    report=report,
    iterate=iterate,
    validate=validate,
    figures=FIGURES,
    columns=(
        Column("workload", workload_label),
        Column("mitigation", mitigation_label),
        Column("step", figure="step_us", fmt="{:.0f}"),
        Column("throughput", figure="tokens_per_s", fmt="{:.0f}"),
        Column("dispatch", figure="dispatch_us_p50_max_rank", fmt="{:.0f}"),
        Column("compute", figure="compute_us_p50_max_rank", fmt="{:.0f}"),
        Column("combine", figure="combine_us_p50_max_rank", fmt="{:.0f}"),
        Column("rank max/mean", figure="rank_max_over_mean", fmt="{:.2f}"),
        Column("vs uniform (paired)", figure="paired_rel_throughput", fmt="{:.0%}"),
        Column("dropped", figure="dropped_fraction", fmt="{:.1%}"),
        WRONG_COLUMN,
    ),
    plots=(
        Plot("moe_rank_load", "MoE rows received per rank (most imbalanced case vs uniform)", plots.plot_moe_load),
        Plot("moe_step_by_mitigation", "MoE mean step time per workload and mitigation", plots.plot_moe_steps),
    ),
)
