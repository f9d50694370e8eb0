"""KV-cache allocator fragmentation under continuous batching (modelled).

Each case replays a request trace through the continuous-batching simulator
(``harness.kv_alloc.simulator``) against one allocator model under one KV growth policy and one
memory budget, and reports fragmentation figures with their definitions
(``harness.kv_alloc.metrics.DEFINITIONS``). These are properties of a model replay, not GPU
measurements: the report says ``"source": "model"``. The GPU counterpart, with real tensors through
torch's caching allocator, is ``harness.kv_alloc.gpu_replay``.

Timing: ``setup`` runs the whole simulation (untimed) and keeps its event log of successful
malloc/free calls. The driver-timed ``step`` replays the next ``REPLAY_OPS`` ops of that log,
cyclically, on a second allocator of the same kind (with 4x the budget, so a replay never runs
out of memory where the simulation released its cache first); ``replay_ns_per_op_p50`` is the
median step time divided by the ops per step: the Python model's own cost per allocator call.

Check: the event log is replayed once more on a fresh allocator; at checkpoints its allocated
bytes must equal an independent sum of the live request sizes, every byte must be accounted
for (allocated + internal waste + free = reserved) and no two live extents may overlap; at the
end of the simulation every request must have completed or been rejected, with nothing
allocated.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.core.case import Case, Param
from harness.core.figures import Figure
from harness.core.family import CheckResult, Column, Family, GridOptions, Plot, RankContext
from harness.kv_alloc import metrics as kvmetrics
from harness.kv_alloc import plots
from harness.kv_alloc.factory import ALLOCATORS, make_allocator
from harness.kv_alloc.simulator import SimConfig, SimResult, simulate
from harness.kv_alloc.traces import AZURE_TRACES, MAX_REQUESTS, MAX_TOKENS, Trace, load_azure, synthetic
from harness.kv_alloc.workload import MODELS, make_policy
from harness.core.stats import Summary

POLICIES = ("reserve_max", "grow_chunk", "per_block")
TRACES = tuple(AZURE_TRACES) + ("synthetic",)
REPLAY_OPS = 500
REPLAY_BUDGET_FACTOR = 4
CHECKPOINTS = 16
SOURCE = "model: allocator-policy simulation replayed in Python; no GPU memory was touched"


def grid(options: GridOptions) -> list[Case]:
    if options.profile == "full":
        traces, requests, budgets = ("azure_conv", "azure_code"), 5000, (40, 80)
    else:
        traces, requests, budgets = ("azure_conv",), 300, (80,)
    return [
        FAMILY.case(allocator=a, block_tokens=16, budget_gb=b, model="7b", policy=p, requests=requests,
                    speedup=4.0, trace=t)
        for t in traces for b in budgets for p in POLICIES for a in ALLOCATORS
    ]


def load_trace(name: str, requests: int) -> Trace:
    if name == "synthetic":
        trace = synthetic(requests or 2000, rate_per_s=5.0, seed=0)
    else:
        trace = load_azure(name)
        if requests > len(trace):  # head() would replay fewer than the case ID says
            raise ValueError(f"requests={requests}: trace {name} holds {len(trace)} requests "
                             "(requests=0 replays them all)")
    return trace.head(requests) if requests else trace


@dataclass
class State:
    case: Case
    sim: SimResult
    figures: kvmetrics.ReplayFigures
    final: Any  # AllocatorStats of the simulated allocator at the end
    make: Any  # () -> fresh allocator of this case, at a given budget
    budget_bytes: int
    replay_alloc: Any
    ids: list
    sizes: list
    handles: list
    pos: int = 0
    ops_per_step: int = REPLAY_OPS


def setup(ctx: RankContext, case: Case) -> State:
    p = case.params
    trace = load_trace(p["trace"], p["requests"])
    bpt = MODELS[p["model"]].kv_bytes_per_token
    policy = make_policy(p["policy"], block_tokens=p["block_tokens"])
    budget = int(p["budget_gb"] * 1e9)

    def make(budget_bytes: int):
        return make_allocator(p["allocator"], budget_bytes, bytes_per_token=bpt, block_tokens=p["block_tokens"],
                              trace=trace, policy=policy)

    alloc = make(budget)
    sim = simulate(trace, policy, alloc, SimConfig(bytes_per_token=bpt, speedup=p["speedup"]))
    final = alloc.stats()
    figures = kvmetrics.figures(sim.series, final.peak_reserved_bytes, sim.last_arrival_step)
    ids, sizes = sim.event_ids.tolist(), sim.event_sizes.tolist()
    n_ids = (max(ids) + 1) if ids else 0
    return State(case, sim, figures, final, make, budget, make(budget * REPLAY_BUDGET_FACTOR), ids, sizes,
                 [0] * n_ids, ops_per_step=min(REPLAY_OPS, len(ids)) or 1)


def step(state: State) -> None:
    # The log is balanced (every malloc is freed), so wrapping around starts from an empty heap.
    ids, sizes, handles = state.ids, state.sizes, state.handles
    malloc, free = state.replay_alloc.malloc, state.replay_alloc.free
    n, pos = len(ids), state.pos
    for _ in range(state.ops_per_step):
        size = sizes[pos]
        if size:
            handles[ids[pos]] = malloc(size)
        else:
            free(handles[ids[pos]])
        pos += 1
        if pos == n:
            pos = 0
    state.pos = pos


def _overlaps(layout) -> int:
    extents = sorted((e.addr, e.end) for es in layout.live.values() for e in es)
    return sum(1 for (_, a1), (b0, _) in zip(extents, extents[1:]) if a1 > b0)


def check(state: State) -> CheckResult:
    wrong, checked, notes = 0, 0, []
    sim = state.sim
    if sim.completed + sim.rejected != sim.requests:
        wrong += 1
        notes.append(f"{sim.requests} requests but {sim.completed} completed + {sim.rejected} rejected")
    if state.final.allocated_bytes != 0 or state.final.live_handles != 0:
        wrong += 1
        notes.append(f"{state.final.allocated_bytes} B still allocated after the replay")
    checked += 2
    alloc = state.make(state.budget_bytes * REPLAY_BUDGET_FACTOR)
    live: dict[int, int] = {}
    handles: dict[int, int] = {}
    expected_allocated = 0
    n = len(state.ids)
    marks = set(np.linspace(0, n - 1, CHECKPOINTS).astype(int).tolist()) if n else set()
    for i, (lid, size) in enumerate(zip(state.ids, state.sizes)):
        if size:
            handles[lid] = alloc.malloc(size)
            live[lid] = size
            expected_allocated += size
        else:
            alloc.free(handles.pop(lid))
            expected_allocated -= live.pop(lid)
        if i in marks:
            s = alloc.stats()
            checked += 3
            if s.allocated_bytes != expected_allocated:
                wrong += 1
                notes.append(f"op {i}: allocator says {s.allocated_bytes} B allocated, requests hold {expected_allocated} B")
            if s.allocated_bytes + s.internal_waste_bytes + s.free_bytes != s.reserved_bytes:
                wrong += 1
                notes.append(f"op {i}: bytes unaccounted for: {s}")
            if _overlaps(alloc.layout()):
                wrong += 1
                notes.append(f"op {i}: live allocations overlap")
    return CheckResult(wrong=wrong, checked=checked, detail="; ".join(notes[:3]))


def report(state: State) -> dict:
    sim, final = state.sim, state.final
    return {
        "source": SOURCE,
        "definitions": kvmetrics.DEFINITIONS,
        "figures": state.figures.to_dict(),
        "counts": {
            "requests": sim.requests, "admitted": sim.admitted, "completed": sim.completed,
            "rejected": sim.rejected, "decode_ooms": sim.decode_ooms, "admission_waits": sim.admission_waits,
            "mallocs": sim.mallocs, "frees": sim.frees, "steps": sim.steps,
            "allocator_ooms": final.num_ooms, "alloc_retries": final.num_alloc_retries,
        },
        "replay": {"ops_per_step": state.ops_per_step, "budget_factor": REPLAY_BUDGET_FACTOR},
        "series": kvmetrics.compact_series(sim.series),
    }


def metrics(case: Case, summary: Summary, reports: list[dict]) -> dict[str, float]:
    rep = reports[0]
    fig, counts = rep["figures"], rep["counts"]
    return {
        "fragmentation_mean": fig["fragmentation_mean"],
        "fragmentation_loaded": fig["fragmentation_loaded"],
        "external_fragmentation_mean": fig["external_fragmentation_mean"],
        "internal_waste_fraction_mean": fig["internal_waste_fraction_mean"],
        "kv_waste_mean": fig["kv_waste_mean"],
        "kv_waste_loaded": fig["kv_waste_loaded"],
        "peak_reserved_gb": fig["peak_reserved_gb"],
        "mean_running": fig["mean_running"],
        "decode_ooms": float(counts["decode_ooms"]),
        "admission_waits": float(counts["admission_waits"]),
        "rejected": float(counts["rejected"]),
        "alloc_retries": float(counts["alloc_retries"]),
        "events": float(counts["mallocs"] + counts["frees"]),
        "replay_ns_per_op_p50": summary.p50_ns / rep["replay"]["ops_per_step"],
    }


FAMILY = Family(
    name="kv_alloc",
    version=1,
    description="KV-cache allocator fragmentation under continuous batching (modelled replay of request traces)",
    params=(
        Param("allocator", str, "allocator model (caching: PyTorch's)", choices=ALLOCATORS, required=True),
        Param("block_tokens", int, "tokens per block: the per_block policy and the paged allocator", low=1,
              high=MAX_TOKENS, required=True),
        Param("budget_gb", int, "KV memory budget, GB (1e9 bytes)", low=1, high=1_000_000, required=True),
        Param("model", str, "model shape for KV bytes per token", choices=tuple(MODELS), required=True),
        Param("policy", str, "KV growth", choices=POLICIES, required=True),
        Param("requests", int, "first N requests of the trace (0: all)", low=0, high=MAX_REQUESTS, required=True),
        Param("speedup", float, "arrival times divided by this (load factor)", low=1e-6, high=1e6, required=True),
        Param("trace", str, "request trace", choices=TRACES, required=True),
    ),
    # The replay is a simulation of the allocators (models of their policies, not the real ones):
    # every figure but the replay's own speed is simulated, and says so wherever it is shown.
    figures=(
        *(Figure(name, "fraction", "lower", f"{kvmetrics.DEFINITIONS[base]}; {kvmetrics.DEFINITIONS[avg]}",
                 source="simulated", headline=name == "fragmentation_mean")
          for name, base, avg in (("fragmentation_mean", "fragmentation", "mean"),
                                  ("fragmentation_loaded", "fragmentation", "loaded"),
                                  ("external_fragmentation_mean", "external_fragmentation", "mean"),
                                  ("internal_waste_fraction_mean", "internal_waste_fraction", "mean"),
                                  ("kv_waste_mean", "kv_waste", "mean"), ("kv_waste_loaded", "kv_waste", "loaded"))),
        Figure("peak_reserved_gb", "GB", "lower", kvmetrics.DEFINITIONS["peak_reserved"], source="simulated"),
        Figure("mean_running", "requests", "higher", kvmetrics.DEFINITIONS["mean_running"], source="simulated"),
        Figure("decode_ooms", "count", "lower", kvmetrics.DEFINITIONS["decode_ooms"], source="simulated",
               headline=True),
        Figure("admission_waits", "count", "lower", "admission attempts that found no memory (the request stayed queued)",
               source="simulated"),
        Figure("rejected", "count", "lower", "requests that could not fit even alone", source="simulated"),
        Figure("alloc_retries", "count", "lower", "device reservations retried after releasing cache (PyTorch's num_alloc_retries)",
               source="simulated"),
        Figure("events", "count", "neither", "allocator calls in the replay (mallocs + frees)", source="simulated"),
        Figure("replay_ns_per_op_p50", "ns", "lower", "measured: median time of one step of the allocator model's "
               "replay / its operations per step (the model's speed, not the allocator's)"),
    ),
    grid=grid,
    setup=setup,
    step=step,
    metrics=metrics,
    check=check,
    report=report,
    columns=(
        Column("trace", lambda r: r.params["trace"]),
        Column("budget (GB)", lambda r: r.params["budget_gb"]),
        Column("policy", lambda r: r.params["policy"]),
        Column("allocator", lambda r: r.params["allocator"]),
        Column("frag mean", figure="fragmentation_mean", fmt="{:.1f}", scale=100.0, unit="%"),
        Column("frag loaded", figure="fragmentation_loaded", fmt="{:.1f}", scale=100.0, unit="%"),
        Column("ext frag", figure="external_fragmentation_mean", fmt="{:.1f}", scale=100.0, unit="%"),
        Column("int waste", figure="internal_waste_fraction_mean", fmt="{:.1f}", scale=100.0, unit="%"),
        Column("kv waste loaded", figure="kv_waste_loaded", fmt="{:.1f}", scale=100.0, unit="%"),
        Column("peak", figure="peak_reserved_gb", fmt="{:.1f}"),
        Column("running", figure="mean_running", fmt="{:.0f}"),
        Column("decode OOMs", figure="decode_ooms", fmt="{:.0f}"),
        Column("replay per op", figure="replay_ns_per_op_p50", fmt="{:.0f}"),
    ),
    plots=(Plot("kv_fragmentation", "KV-cache fragmentation over the trace per allocator (simulated replay)",
                plots.plot_kv_frag),),
    # Part of a plain `critpath run`: the quick profile is a few small replays (modelled figures,
    # labelled as such in every record).
    default=True,
)
