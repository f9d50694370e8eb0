"""Plots per family, found by family name. Each plot takes one or more runs (a comparison overlays
them: one line style per run) and returns a matplotlib figure, or None when the runs hold nothing
it can draw. What each family must record for its plots is in docs/reports.md.

Adding a family's plot: write ``def plot_x(runs) -> Figure | None`` and decorate it with
``@plot("family", "name", "title")``.
"""
from __future__ import annotations

import io
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from harness.claims import is_mean_only  # noqa: E402
from harness.records import Record  # noqa: E402
from harness.report.run import RunData  # noqa: E402

LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D")


@dataclass(frozen=True)
class PlotSpec:
    family: str
    name: str
    title: str
    draw: Callable[[Sequence[RunData]], Optional[plt.Figure]]


PLOTS: dict[str, list[PlotSpec]] = defaultdict(list)


def plot(family: str, name: str, title: str):
    def register(fn):
        PLOTS[family].append(PlotSpec(family, name, title, fn))
        return fn

    return register


def png_bytes(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    # No "Software" metadata: the same figure gives the same bytes across matplotlib versions.
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _label(run: RunData, text: str, runs: Sequence[RunData]) -> str:
    return f"{run.label}: {text}" if len(runs) > 1 else text


def _style(i: int) -> dict:
    return {"linestyle": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)]}


def _ok(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.ok]


# ---------------------------------------------------------------- allreduce


def human_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.3g} B"


def _latency_us(record: Record) -> float:
    # p50 from raw samples; an imported record has only its mean.
    return record.summary.mean_ns / 1e3 if is_mean_only(record) else record.summary.p50_ns / 1e3


def allreduce_series(records: Sequence[Record]) -> dict[tuple, list[Record]]:
    """Records by (algo, dtype, world, backend), each sorted by size."""
    series: dict[tuple, list[Record]] = defaultdict(list)
    for r in _ok(records):
        p = r.params
        series[(p["algo"], p.get("dtype", ""), r.world, r.backend)].append(r)
    return {k: sorted(v, key=lambda r: r.params["size_bytes"]) for k, v in sorted(series.items())}


def crossover_bytes(sizes: Sequence[int], ring_us: Sequence[float], tree_us: Sequence[float]) -> list[float]:
    """Sizes where ring and tree swap places, interpolated on log-log axes between neighbours."""
    out = []
    diffs = [math.log(r) - math.log(t) for r, t in zip(ring_us, tree_us)]
    for i in range(1, len(sizes)):
        d0, d1 = diffs[i - 1], diffs[i]
        if d0 == 0:
            out.append(float(sizes[i - 1]))
        elif d0 * d1 < 0:
            frac = d0 / (d0 - d1)
            out.append(float(math.exp(math.log(sizes[i - 1]) + frac * (math.log(sizes[i]) - math.log(sizes[i - 1])))))
    return out


def ring_tree_crossovers(records: Sequence[Record]) -> list[tuple[tuple, float]]:
    """(dtype, world, backend) and the crossover sizes in bytes, for every series pair."""
    series = allreduce_series(records)
    found = []
    for (algo, dtype, world, backend), ring in series.items():
        if algo != "ring":
            continue
        tree = series.get(("tree", dtype, world, backend))
        if not tree:
            continue
        t_by = {r.params["size_bytes"]: r for r in tree}
        common = [r for r in ring if r.params["size_bytes"] in t_by]
        sizes = [r.params["size_bytes"] for r in common]
        for x in crossover_bytes(sizes, [_latency_us(r) for r in common], [_latency_us(t_by[s]) for s in sizes]):
            found.append(((dtype, world, backend), x))
    return found


def _allreduce(runs: Sequence[RunData], ylabel: str, value: Callable[[Record], float], mark: bool) -> Optional[plt.Figure]:
    if not any(_ok(run.of("allreduce")) for run in runs):
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, run in enumerate(runs):
        for (algo, dtype, world, backend), recs in allreduce_series(run.of("allreduce")).items():
            xs = [r.params["size_bytes"] for r in recs]
            ys = [value(r) for r in recs]
            ax.plot(xs, ys, label=_label(run, f"{algo} ({backend}, {dtype}, world {world})", runs), **_style(i), markersize=3)
        if mark:
            for _, x in ring_tree_crossovers(run.of("allreduce")):
                ax.axvline(x, color="grey", linestyle=LINESTYLES[i % 4], linewidth=0.8)
                ax.annotate(f"ring/tree crossover ~{human_bytes(x)}", (x, 0.95), xycoords=("data", "axes fraction"),
                            fontsize=7, rotation=90, va="top", ha="right")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return fig


@plot("allreduce", "allreduce_latency", "AllReduce latency vs message size")
def plot_allreduce_latency(runs):
    return _allreduce(runs, "time per operation (us; p50, mean if imported)", _latency_us, mark=True)


@plot("allreduce", "allreduce_busbw", "AllReduce bus bandwidth vs message size")
def plot_allreduce_busbw(runs):
    return _allreduce(runs, "busbw (GB/s, nccl-tests definition)", lambda r: max(r.metrics["busbw_gbps"], 1e-9), mark=True)


# ---------------------------------------------------------------- rpc


def _varying(records: Sequence[Record], skip: tuple = ()) -> list[str]:
    keys = sorted({k for r in records for k in r.params})
    return [k for k in keys if k not in skip and len({str(r.params.get(k)) for r in records}) > 1]


@plot("rpc", "rpc_cdf", "RPC round-trip CDF per transport")
def plot_rpc_cdf(runs):
    # Only records with raw samples: a CDF of one averaged sample would be a lie.
    if not any(r.summary and not is_mean_only(r) for run in runs for r in _ok(run.of("rpc"))):
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, run in enumerate(runs):
        recs = [r for r in _ok(run.of("rpc")) if not is_mean_only(r)]
        keys = _varying(recs)
        for r in sorted(recs, key=lambda r: r.case_id):
            xs = np.sort(np.asarray(r.samples_ns, dtype=np.float64)) / 1e3
            ys = np.arange(1, xs.size + 1) / xs.size
            text = ", ".join(f"{k}={r.params.get(k)}" for k in keys) or r.params.get("transport", r.case_id)
            ax.step(xs, ys, where="post", label=_label(run, str(text), runs), linestyle=LINESTYLES[i % 4])
    ax.set_xscale("log")
    ax.set_xlabel("round trip (us)")
    ax.set_ylabel("fraction of requests")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return fig


# ---------------------------------------------------------------- pipeline


@plot("pipeline", "pipeline_bubble", "Pipeline bubble fraction per schedule")
def plot_pipeline_bubble(runs):
    rows = [(run, r) for run in runs for r in _ok(run.of("pipeline")) if "bubble_fraction" in r.metrics]
    if not rows:
        return None
    keys = _varying([r for _, r in rows])
    labels = [_label(run, ", ".join(f"{k}={r.params.get(k)}" for k in keys) or r.case_id, runs) for run, r in rows]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.35 * len(rows)))
    ax.barh(range(len(rows)), [r.metrics["bubble_fraction"] for _, r in rows], color="#6a8caf")
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    definitions = sorted({str(r.extra.get("bubble_definition", "not stated")) for _, r in rows})
    ax.set_xlabel("bubble fraction (" + "; ".join(definitions) + ")")
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    return fig


# ---------------------------------------------------------------- moe_a2a


@plot("moe_a2a", "moe_rank_load", "MoE tokens received per rank (most skewed case)")
def plot_moe_load(runs):
    cases = [(run, r) for run in runs for r in _ok(run.of("moe_a2a")) if r.extra.get("rank_load_tokens")]
    if not cases:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.8))
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        mine = [r for rr, r in cases if rr is run]
        if not mine:
            continue
        worst = max(mine, key=lambda r: max(r.extra["rank_load_tokens"]) / max(1e-9, np.mean(r.extra["rank_load_tokens"])))
        load = worst.extra["rank_load_tokens"]
        ax.bar(np.arange(len(load)) + i * width, load, width, label=_label(run, worst.case_id, runs))
    ax.set_xlabel("rank")
    ax.set_ylabel("tokens received")
    ax.legend(fontsize=7)
    return fig


@plot("moe_a2a", "moe_step_vs_skew", "MoE step time vs skew per mitigation")
def plot_moe_skew(runs):
    if not any(_ok(run.of("moe_a2a")) for run in runs):
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, run in enumerate(runs):
        groups: dict[str, list[Record]] = defaultdict(list)
        for r in _ok(run.of("moe_a2a")):
            groups[str(r.params.get("mitigation", "none"))].append(r)
        for mitigation, recs in sorted(groups.items()):
            recs = sorted(recs, key=lambda r: float(r.params.get("hot_factor", 1)))
            xs = [float(r.params.get("hot_factor", 1)) for r in recs]
            ys = [r.summary.p50_ns / 1e3 for r in recs]
            ax.plot(xs, ys, label=_label(run, f"mitigation={mitigation}", runs), **_style(i), markersize=3)
    ax.set_xlabel("hot-expert load factor (1 = uniform)")
    ax.set_ylabel("step time p50 (us, slowest rank)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return fig


# ---------------------------------------------------------------- kv_alloc


@plot("kv_alloc", "kv_fragmentation", "KV-cache fragmentation over the trace per allocator")
def plot_kv_frag(runs):
    rows = [(run, r) for run in runs for r in _ok(run.of("kv_alloc")) if r.extra.get("frag_series")]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, run in enumerate(runs):
        for rr, r in rows:
            if rr is not run:
                continue
            s = r.extra["frag_series"]
            ax.plot(s["event"], s["fragmentation_pct"], linestyle=LINESTYLES[i % 4],
                    label=_label(run, str(r.params.get("allocator", r.case_id)), runs))
    ax.set_xlabel("allocation event")
    ax.set_ylabel("fragmentation (%) = (reserved - allocated) / reserved")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def family_plots(family: str) -> list[PlotSpec]:
    return list(PLOTS.get(family, ()))
