"""Pipeline parallelism over point-to-point messages: P stages as P ranks, M microbatches a step.

One driver step is one pipeline step: all M microbatches through all P stages (forward for the
decode-style ``sync`` and ``async`` schedules; forward and backward for ``gpipe`` and ``1f1b``, the
backward taking ``BWD_OVER_FWD`` times the forward). The schedules and their exact action order are
in ``harness.pipeline.schedule``; the analytical prediction next to every measurement comes from
``harness.pipeline.model`` evaluating the same per-stage programs. Each stage reports its busy and
idle time through ``report``.

Definitions (declared once in ``FIGURES``, and written into each record as
``extra.rank_reports[0].definitions``):
- ``bubble_idle_share``: 1 - sum over stages of compute time / sum over stages of their step time,
  the idle share of total stage time (the fill/drain formula (P-1)/(M+P-1) is that of a zero-latency
  pipeline and is reported beside it as ``bubble_fill_drain_formula``);
- ``efficiency_vs_ideal``: M x (forward + backward) compute time / measured step time (p50);
- ``*_model`` figures are predictions (source: model), never measurements.

Oversubscription: with ``compute=spin`` every stage keeps a core busy; when spinning stages outnumber
the cores this process may use (``os.sched_getaffinity``), the figures are distorted (compute
stretches, messages wait for a core). Such records carry ``oversubscribed`` = 1 and the table
warns. ``compute=sleep`` (emulated device time) does not compete for cores and is the variant to
read on a small machine.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.core.case import Case, Param
from harness.core.family import (
    BACKEND,
    CheckResult,
    Column,
    Family,
    GridOptions,
    Plot,
    RankContext,
    bytes_param,
    world_param,
)
from harness.core.figures import Figure
from harness.core.sizes import MAX_RUN_SIZE_BYTES, format_size
from harness.core.scale import MAX_EMULATED_US
from harness.core.stats import Summary
from harness.pipeline import link, model, plots
from harness.pipeline.scenarios import SCENARIOS, STRETCH_WARN
from harness.pipeline.schedule import SCHEDULES, TRAINING_SCHEDULES

if TYPE_CHECKING:  # torch and the executor are imported by setup: reading cases needs neither
    from harness.pipeline.executor import Stage

BWD_OVER_FWD = 2.0  # backward = 2 x forward, the usual transformer assumption (Megatron-LM)
DIE_AT_STEP = 2  # with die_stage set, that stage exits at this step (inside warm-up: mid-pipeline)
BASE_PINGPONGS = 30


def grid(options: GridOptions) -> list[Case]:
    full = options.profile == "full"
    backend = options.backend
    computes = ["matmul", "spin"] if backend == "nccl" else ["sleep", "spin"]
    cases = []
    for sc in SCENARIOS.values():
        modes = computes if (sc.claim or full) else computes[:1]
        for microbatches in (8, 32) if full else (8,):
            for compute in modes:
                for schedule in sc.schedules:
                    cases.append(FAMILY.case(
                        act_bytes=64 << 10, backend=backend, compute=compute, compute_us=sc.compute_us,
                        microbatches=microbatches, rtt_us=sc.rtt_us, scenario=sc.name, schedule=schedule,
                        world=sc.stages,
                    ))
    return cases


def validate(case: Case) -> None:
    if case.params.get("die_stage", 0) >= case.params["world"]:
        raise ValueError(f"die_stage={case.params['die_stage']} is not a stage of a {case.params['world']}-stage "
                         "pipeline (stages 0..world-1)")
    # The last stage stashes every microbatch's activation at once: each key is capped alone, but
    # the buffers a rank allocates are their product, held to the one cap of a run's buffers.
    stash_bytes = case.params["microbatches"] * case.params["act_bytes"]
    if stash_bytes > MAX_RUN_SIZE_BYTES:
        raise ValueError(f"microbatches={case.params['microbatches']} x act_bytes={case.params['act_bytes']} "
                         f"= {format_size(stash_bytes)} of stashed activations exceeds "
                         f"{format_size(MAX_RUN_SIZE_BYTES)} (MAX_RUN_SIZE_BYTES)")


@dataclass
class State:
    ctx: RankContext
    case: Case
    stage: Stage
    base_one_way_us: float
    usable_cores: int


def _base_one_way_us(ctx: RankContext, act_bytes: int) -> float:
    """Transport's own one-way time between stages 0 and 1 for one activation, for the model:
    half the fastest of several blocking send/recv round trips. The fastest, because the model
    describes the transport on a quiet machine; what a busy machine adds shows up as model error
    (and as compute_stretch), not hidden inside the model's input. Other stages do not take part."""
    if ctx.world < 2 or ctx.rank > 1:
        return 0.0
    import torch
    import torch.distributed as dist

    buf = torch.zeros(act_bytes // 8, dtype=torch.int64, device=ctx.device)
    peer = 1 - ctx.rank
    rtts = []
    for _ in range(5 + BASE_PINGPONGS):
        t0 = time.perf_counter_ns()
        if ctx.rank == 0:
            dist.send(buf, peer)
            dist.recv(buf, peer)
        else:
            dist.recv(buf, peer)
            dist.send(buf, peer)
        rtts.append(time.perf_counter_ns() - t0)
    return min(rtts[5:]) / 2 / 1e3


def setup(ctx: RankContext, case: Case) -> State:
    p = case.params
    if p["backend"] != ctx.backend:
        raise ValueError(f"case is for backend {p['backend']!r} but this run uses {ctx.backend!r}")
    if p["world"] != ctx.world:
        raise ValueError(f"case is for {p['world']} stages but this run has {ctx.world} ranks")
    import torch.distributed as dist

    from harness.pipeline.executor import Stage

    if ctx.world > 1:
        # A collective first: NCCL wants every rank in a group's first call before any
        # point-to-point or batch_isend_irecv on it; on gloo it is a cheap rendezvous.
        dist.barrier(group=ctx.group)
    if p["rtt_us"] > 0 and ctx.world > 1:
        hosts: list = [None] * ctx.world
        dist.all_gather_object(hosts, link.hostname(), group=ctx.group)
        link.same_host_or_raise(hosts)
    compute = link.make_compute(p["compute"], ctx.device)
    fwd_s = p["compute_us"] / 1e6
    stage = Stage(
        schedule=p["schedule"], stage=ctx.rank, stages=ctx.world, microbatches=p["microbatches"],
        fwd_s=fwd_s, bwd_s=fwd_s * BWD_OVER_FWD, one_way_ns=p["rtt_us"] * 1000 // 2,
        act_bytes=p["act_bytes"], compute=compute, device=ctx.device,
        die_at_step=DIE_AT_STEP if p.get("die_stage", -1) == ctx.rank else -1,
    )
    base = _base_one_way_us(ctx, p["act_bytes"])
    return State(ctx, case, stage, base, len(os.sched_getaffinity(0)))


def step(state: State) -> None:
    state.stage.run_step()


def check(state: State) -> CheckResult:
    stage = state.stage
    before_checked, before_wrong = stage.stats.checked, stage.stats.wrong
    stage.verify = True
    try:
        stage.run_step()
    finally:
        stage.verify = False
    checked = stage.stats.checked - before_checked
    wrong = stage.stats.wrong - before_wrong
    if state.ctx.world > 1 and checked == 0 and state.ctx.rank > 0:
        # A stage past 0 always receives something; verifying nothing means the check is broken.
        return CheckResult(wrong=1, checked=1, detail=f"stage {state.ctx.rank} verified no message")
    return CheckResult(wrong=wrong, checked=checked, detail=stage.stats.first_wrong)


def teardown(state: State) -> None:
    state.stage.abandon()


def report(state: State) -> dict:
    st, stage = state.stage.stats, state.stage
    out = {
        "stage": state.ctx.rank,
        "busy_s": st.busy_ns / 1e9,
        "wall_s": st.wall_ns / 1e9,
        "steps": st.steps,
        "computes": st.computes,
        "compute": stage.compute.what,
        "usable_cores": state.usable_cores,
        "base_one_way_us": state.base_one_way_us,
    }
    if state.ctx.rank == 0:
        out["loadavg_1min"] = os.getloadavg()[0]
        # The definitions of this case's figures, from their declarations, written into the record.
        out["definitions"] = {f.name: f.definition for f in FIGURES}
        out["definitions"]["link_latency"] = ("emulated in user space (receiver holds each message until send stamp "
                                              "+ rtt/2)" if stage.one_way_ns else "none added")
    return out


def busy_ranks(case: Case) -> int:
    """Stages that keep a core busy for their compute (the busy loop); sleep and GPU do not."""
    return case.params["world"] if case.params["compute"] == "spin" else 0


def metrics(case: Case, summary: Summary, reports: list[dict]) -> dict[str, float]:
    p = case.params
    P, M = p["world"], p["microbatches"]
    fwd_s = p["compute_us"] / 1e6
    bwd_s = fwd_s * BWD_OVER_FWD if p["schedule"] in TRAINING_SCHEDULES else 0.0
    p50_s = summary.p50_ns / 1e9
    base_us = max(r.get("base_one_way_us", 0.0) for r in reports) if reports else 0.0
    cost = model.Cost(fwd_s, bwd_s, emulated_one_way_s=p["rtt_us"] / 2e6, base_one_way_s=base_us / 1e6)
    predicted = model.evaluate(p["schedule"], P, M, cost)
    ideal_s = M * (fwd_s + bwd_s)
    busy = sum(r["busy_s"] for r in reports)
    wall = sum(r["wall_s"] for r in reports)
    computes = sum(r["computes"] for r in reports)
    per_step_busy_nominal = ideal_s * P
    steps = reports[0]["steps"] if reports else 0
    cores = min(r["usable_cores"] for r in reports) if reports else os.cpu_count() or 1
    stretch = busy / (per_step_busy_nominal * steps) if steps and computes else 0.0
    # The same model fed the compute time the stages really took: what is left of the error is
    # communication and scheduling, not compute that ran long.
    at_measured = model.evaluate(p["schedule"], P, M, model.Cost(
        fwd_s * stretch, bwd_s * stretch, cost.emulated_one_way_s, cost.base_one_way_s)) if stretch else predicted
    loadavg = reports[0].get("loadavg_1min", 0.0) if reports else 0.0
    out = {
        "step_p50_us": summary.p50_ns / 1e3,
        "step_mean_us": summary.mean_ns / 1e3,
        "microbatches_per_s": M / p50_s,
        "step_model_us": predicted.step_s * 1e6,
        "step_error_pct": (p50_s - predicted.step_s) / predicted.step_s * 100,
        "bubble_idle_share": 1.0 - busy / wall if wall > 0 else 0.0,
        "bubble_idle_share_model": predicted.bubble_idle_share,
        "bubble_fill_drain_formula": model.fill_drain_bubble(P, M),
        "bubble_over_ideal_formula": model.bubble_over_ideal(P, M),
        "efficiency_vs_ideal": ideal_s / p50_s,
        "efficiency_vs_ideal_model": ideal_s / predicted.step_s,
        "compute_stretch": stretch,
        "step_model_at_measured_compute_us": at_measured.step_s * 1e6,
        "step_error_at_measured_compute_pct": (p50_s - at_measured.step_s) / at_measured.step_s * 100,
        "loadavg_1min": loadavg,
        "base_one_way_us": base_us,
        "hop_one_way_us": cost.hop_s * 1e6,
        "busy_ranks": float(busy_ranks(case)),
        "usable_cores": float(cores),
        "oversubscribed": float(busy_ranks(case) > cores),
    }
    if p["schedule"] == "sync":
        out["sync_efficiency_steady_model"] = model.sync_efficiency(
            fwd_s, model.chain_barrier_exposed_s(P, 2 * cost.hop_s)
        )
    return out


_MODEL_HOP = "hop = max(emulated one-way, base one-way = half the fastest measured round trip)"
FIGURES = (
    Figure("step_p50_us", "us", "lower", "median pipeline step: all M microbatches through all P stages"),
    Figure("step_mean_us", "us", "lower", "mean pipeline step"),
    Figure("microbatches_per_s", "microbatches/s", "higher", "M / median step", headline=True),
    Figure("step_model_us", "us", "lower", "critical path of the same per-stage programs; compute as configured, "
           + _MODEL_HOP, source="modelled"),
    Figure("step_error_pct", "%", "neither", "(median step - step_model_us) / step_model_us x 100"),
    Figure("bubble_idle_share", "fraction", "lower",
           "1 - sum(stage compute time) / sum(stage step time), over warm-up and timed steps", headline=True),
    Figure("bubble_idle_share_model", "fraction", "lower", "the model's idle share of the same programs",
           source="modelled"),
    Figure("bubble_fill_drain_formula", "fraction", "lower", "(P-1)/(M+P-1), zero-latency flushed pipeline",
           source="modelled"),
    Figure("bubble_over_ideal_formula", "ratio", "lower", "(P-1)/M, bubble time relative to ideal compute time",
           source="modelled"),
    Figure("efficiency_vs_ideal", "fraction", "higher", "M x (forward + backward compute) / step p50"),
    Figure("efficiency_vs_ideal_model", "fraction", "higher", "M x (forward + backward compute) / step_model_us",
           source="modelled"),
    Figure("compute_stretch", "ratio", "lower", "measured compute time / configured compute time (1 = no distortion)"),
    Figure("step_model_at_measured_compute_us", "us", "lower", "the model with compute x compute_stretch",
           source="modelled"),
    Figure("step_error_at_measured_compute_pct", "%", "neither",
           "(median step - step_model_at_measured_compute_us) / step_model_at_measured_compute_us x 100"),
    Figure("loadavg_1min", "load", "neither", "the host's 1-minute load average when rank 0 reported"),
    Figure("base_one_way_us", "us", "lower", "half the fastest measured round trip of a small message between stages"),
    Figure("hop_one_way_us", "us", "lower", _MODEL_HOP),
    Figure("busy_ranks", "ranks", "neither", "stages that keep a core busy (compute=spin: all)"),
    Figure("usable_cores", "cores", "neither", "cores this process may use (os.sched_getaffinity)"),
    Figure("oversubscribed", "flag", "neither", "1 when busy_ranks exceed usable_cores: the figures are distorted"),
    Figure("sync_efficiency_steady_model", "fraction", "higher",
           "compute / (compute + (P-1) x round trip): lock-step tick with a chain barrier", source="modelled"),
)



def _warn(record) -> str:
    m = record.metrics
    notes = []
    if m.get("oversubscribed"):
        notes.append(f"OVERSUBSCRIBED {m['busy_ranks']:.0f} spinning/{m['usable_cores']:.0f} cores")
    if m.get("compute_stretch", 0.0) > STRETCH_WARN:
        notes.append(f"compute x{m['compute_stretch']:.2f} (load {m.get('loadavg_1min', 0.0):.1f})")
    return "; ".join(notes)


FAMILY = Family(
    name="pipeline",
    version=1,
    description="pipeline stages over P2P: sync barrier vs async prefetch, GPipe, 1F1B (measured beside a model)",
    params=(
        bytes_param("act_bytes", "activation bytes per microbatch per hop (more than the header)",
                    low=(link.HEADER_WORDS + 1) * 8),
        BACKEND,
        Param("compute", str, "spin (CPU busy loop), sleep (emulated device time), matmul (GPU)",
              choices=link.COMPUTE_MODES, required=True),
        Param("compute_us", int, "forward compute per stage per microbatch, microseconds", low=1,
              high=MAX_EMULATED_US, required=True),
        Param("die_stage", int, "fault injection: this stage exits mid-pipeline (tests)", low=0),
        Param("microbatches", int, "microbatches per step (M)", low=1, high=100_000, required=True),
        Param("rtt_us", int, "emulated link round trip added per hop (one way = rtt/2), 0 = none", low=0,
              high=MAX_EMULATED_US, required=True),
        Param("scenario", str, "the configuration's label (a0_pipeline_barrier, a0_sync_tax, ...)", required=True),
        Param("schedule", str, "pipeline schedule", choices=SCHEDULES, required=True),
        world_param(1, "stages = ranks (P)"),
    ),
    grid=grid,
    setup=setup,
    step=step,
    metrics=metrics,
    check=check,
    teardown=teardown,
    report=report,
    validate=validate,
    figures=FIGURES,
    flags=_warn,
    columns=(
        Column("scenario", lambda r: r.params["scenario"]),
        Column("sched", lambda r: r.params["schedule"]),
        Column("compute", lambda r: r.params["compute"]),
        Column("P", lambda r: r.params["world"]),
        Column("M", lambda r: r.params["microbatches"]),
        Column("act", lambda r: format_size(r.params["act_bytes"])),
        Column("step p50", figure="step_p50_us", fmt="{:.2f}", scale=1e-3, unit="ms"),
        Column("step", figure="step_model_us", fmt="{:.2f}", scale=1e-3, unit="ms"),
        Column("err", figure="step_error_pct", fmt="{:+.1f}"),
        Column("throughput", figure="microbatches_per_s", fmt="{:.0f}"),
        Column("bubble idle", figure="bubble_idle_share", fmt="{:.3f}"),
        Column("bubble idle", figure="bubble_idle_share_model", fmt="{:.3f}"),
        Column("stretch", figure="compute_stretch", fmt="{:.2f}"),
        Column("warning", _warn),
    ),
    plots=(Plot("pipeline_bubble", "Pipeline bubble per schedule: measured idle share and the fill/drain model",
                plots.plot_pipeline_bubble),),
)
