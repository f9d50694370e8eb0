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
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np

from harness.figures import is_mean_only
from harness.records import Record
from harness.report.run import RunData

if TYPE_CHECKING:
    import matplotlib.pyplot as plt


def _pyplot():
    """matplotlib.pyplot, on a display-less backend, imported when a plot is first drawn: it costs
    most of a second, which commands that draw nothing (every --help) should not pay."""
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as pyplot

    return pyplot

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
    _pyplot().close(fig)
    return buf.getvalue()


def subplots(figsize, rows: int = 1):
    """A figure whose axes cycle through 20 distinct colours (an RPC run has more transports than
    the default cycle's 10); set per axes, so importing this module changes no global style."""
    fig, axes = _pyplot().subplots(rows, 1, figsize=figsize, squeeze=False)
    for ax in axes[:, 0]:
        colours = _pyplot().get_cmap("tab20").colors
        ax.set_prop_cycle(color=colours[0::2] + colours[1::2])  # ten distinct hues first
    return fig, (axes[0, 0] if rows == 1 else axes)


def legend(ax) -> None:
    # Outside the axes, so many series never hide the data (savefig uses bbox_inches="tight").
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)


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
    fig, ax = subplots((7, 4.2))
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
    legend(ax)
    return fig


@plot("allreduce", "allreduce_latency", "AllReduce latency vs message size")
def plot_allreduce_latency(runs):
    return _allreduce(runs, "time per operation (us; p50, mean if imported)", _latency_us, mark=True)


@plot("allreduce", "allreduce_busbw", "AllReduce bus bandwidth vs message size")
def plot_allreduce_busbw(runs):
    return _allreduce(runs, "busbw (GB/s, nccl-tests definition)", lambda r: max(r.metrics["busbw_gbps"], 1e-9), mark=True)


# ---------------------------------------------------------------- rpc

def _varying(records: Sequence[Record], skip: tuple = ()) -> list[str]:
    """Parameter names whose values differ between the records (what tells their lines apart)."""
    keys = sorted({k for r in records for k in r.params})
    return [k for k in keys if k not in skip and len({str(r.params.get(k)) for r in records}) > 1]


RPC_FAULT_KEYS = ("hops", "delay_us", "jitter_us", "stall_every", "stall_us", "reference")


def rpc_cdf_records(records: Sequence[Record]) -> list[Record]:
    """One plain ping-pong record per transport (256 B when measured, else the smallest size):
    raw samples only, no forwarding hops, no injected faults."""
    by_transport: dict[str, list[Record]] = defaultdict(list)
    for r in _ok(records):
        p = r.params
        if is_mean_only(r) or p.get("mode", "pingpong") != "pingpong" or p.get("codec", "raw") != "raw":
            continue
        if any(k in p for k in RPC_FAULT_KEYS):
            continue
        by_transport[str(p.get("transport", "?"))].append(r)
    chosen = []
    for transport, recs in sorted(by_transport.items()):
        sized = {r.params.get("payload_bytes"): r for r in recs}
        chosen.append(sized.get(256) or recs[0])
    return chosen


@plot("rpc", "rpc_cdf", "RPC round-trip CDF per transport")
def plot_rpc_cdf(runs):
    # Only records with raw samples: a CDF of one averaged sample would be a lie.
    if not any(rpc_cdf_records(run.of("rpc")) for run in runs):
        return None
    fig, ax = subplots((7, 4.2))
    for i, run in enumerate(runs):
        for r in rpc_cdf_records(run.of("rpc")):
            xs = np.sort(np.asarray(r.samples_ns, dtype=np.float64)) / 1e3
            ys = np.arange(1, xs.size + 1) / xs.size
            text = f"{r.params.get('transport')} ({r.params.get('payload_bytes', '?')} B)"
            ax.step(xs, ys, where="post", label=_label(run, text, runs), linestyle=LINESTYLES[i % 4])
    ax.set_xscale("log")
    ax.set_xlabel("round trip (us), ping-pong, no faults")
    ax.set_ylabel("fraction of requests")
    ax.grid(True, which="both", alpha=0.3)
    legend(ax)
    return fig


# ---------------------------------------------------------------- pipeline


@plot("pipeline", "pipeline_bubble", "Pipeline bubble per schedule: measured idle share and the fill/drain model")
def plot_pipeline_bubble(runs):
    rows = [(run, r) for run in runs for r in _ok(run.of("pipeline")) if "bubble_idle_share" in r.metrics]
    if not rows:
        return None
    keys = [k for k in _varying([r for _, r in rows]) if k not in ("world",)]
    labels = [_label(run, ", ".join(str(r.params.get(k)) for k in keys) or r.case_id, runs) for run, r in rows]
    fig, ax = subplots((7, 0.6 + 0.32 * len(rows)))
    y = np.arange(len(rows))
    ax.barh(y, [r.metrics["bubble_idle_share"] for _, r in rows], color="#6a8caf",
            label="measured: 1 - stage compute / stage step time")
    model = [r.metrics.get("bubble_fill_drain_formula") for _, r in rows]
    if any(m is not None for m in model):
        ax.scatter([m if m is not None else np.nan for m in model], y, marker="|", s=120, color="black",
                   label="modelled: (P-1)/(M+P-1)", zorder=3)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xlabel("bubble (fraction of stage time idle); labels: " + ", ".join(keys))
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="lower right")
    return fig


# ---------------------------------------------------------------- moe_a2a


def moe_rank_load(record: Record) -> list[float]:
    """Rows each rank received per step (mean), from the family's per-rank reports."""
    reports = record.extra.get("rank_reports") or []
    return [float(rep["recv_rows_mean"]) for rep in reports if isinstance(rep, dict) and "recv_rows_mean" in rep]


def _hot_factor(record: Record) -> Optional[float]:
    workload = record.params.get("workload")
    if workload == "uniform":
        return 1.0
    if workload == "hot":
        return float(record.params.get("skew", 1.0))
    return None  # zipf / unbalanced: skew means something else


@plot("moe_a2a", "moe_rank_load", "MoE rows received per rank (most imbalanced case vs uniform)")
def plot_moe_load(runs):
    cases = [(run, r) for run in runs for r in _ok(run.of("moe_a2a")) if moe_rank_load(r)]
    if not cases:
        return None
    fig, ax = subplots((7, 3.8))
    shown = []
    for run in runs:
        mine = [r for rr, r in cases if rr is run]
        if not mine:
            continue
        worst = max(mine, key=lambda r: max(moe_rank_load(r)) / max(1e-9, float(np.mean(moe_rank_load(r)))))
        uniform = next((r for r in mine if r.params.get("workload") == "uniform"), None)
        shown += [(run, worst)] + ([(run, uniform)] if uniform is not None and uniform is not worst else [])
    width = 0.8 / len(shown)
    for i, (run, r) in enumerate(shown):
        load = moe_rank_load(r)
        text = f"{r.params.get('workload')} skew={r.params.get('skew')} mitigation={r.params.get('mitigation')}"
        ax.bar(np.arange(len(load)) + i * width, load, width, label=_label(run, text, runs))
    ax.set_xlabel("rank")
    ax.set_ylabel("rows received per step (mean)")
    legend(ax)
    return fig


@plot("moe_a2a", "moe_step_vs_skew", "MoE step time vs hot-expert skew per mitigation")
def plot_moe_skew(runs):
    if not any(_hot_factor(r) is not None for run in runs for r in _ok(run.of("moe_a2a"))):
        return None
    fig, ax = subplots((7, 4.2))
    for i, run in enumerate(runs):
        groups: dict[str, list[Record]] = defaultdict(list)
        for r in _ok(run.of("moe_a2a")):
            if _hot_factor(r) is None:
                continue
            p = r.params
            name = str(p.get("mitigation", "none")) + (f"/{p['routing']}" if "routing" in p else "")
            if p.get("workload") == "uniform":
                for key in ("none",):  # the uniform step is every mitigation's skew-1 point
                    groups[key].append(r)
            else:
                groups[name].append(r)
        for name, recs in sorted(groups.items()):
            recs = sorted(recs, key=_hot_factor)
            ax.plot([_hot_factor(r) for r in recs], [r.summary.p50_ns / 1e3 for r in recs],
                    label=_label(run, f"mitigation={name}", runs), **_style(i), markersize=4)
    ax.set_xscale("log")
    ax.set_xlabel("hot-expert load factor (1 = uniform)")
    ax.set_ylabel("step time p50 (us, slowest rank)")
    ax.grid(True, alpha=0.3)
    legend(ax)
    return fig


# ---------------------------------------------------------------- kv_alloc


def kv_fragmentation_series(record: Record) -> Optional[tuple[list[float], list[float]]]:
    """(step, fragmentation %) over the replay: (reserved - allocated) / reserved per sample."""
    reports = record.extra.get("rank_reports") or []
    series = reports[0].get("series") if reports and isinstance(reports[0], dict) else None
    if not series or "reserved_gb" not in series or "allocated_gb" not in series:
        return None
    steps, pct = [], []
    for step, reserved, allocated in zip(series["step"], series["reserved_gb"], series["allocated_gb"]):
        if reserved > 0:  # undefined before anything is reserved
            steps.append(step)
            pct.append(100.0 * (reserved - allocated) / reserved)
    return steps, pct


@plot("kv_alloc", "kv_fragmentation", "KV-cache fragmentation over the trace per allocator (modelled replay)")
def plot_kv_frag(runs):
    groups: dict[tuple, list[tuple]] = defaultdict(list)
    for i, run in enumerate(runs):
        for r in _ok(run.of("kv_alloc")):
            series = kv_fragmentation_series(r)
            if series is None:
                continue
            key = tuple(sorted((k, v) for k, v in r.params.items() if k != "allocator"))
            groups[key].append((i, run, r, series))
    if not groups:
        return None
    keys = sorted(groups)[:3]  # one panel per configuration, at most three
    fig, axes = subplots((7, 2.6 * len(keys)), len(keys))
    axes = [axes] if len(keys) == 1 else list(axes[:, 0])
    varying = [k for k in _varying([r for key in keys for _, _, r, _ in groups[key]]) if k != "allocator"]
    for ax, key in zip(axes, keys):
        for i, run, r, (steps, pct) in groups[key]:
            ax.plot(steps, pct, linestyle=LINESTYLES[i % 4], label=_label(run, str(r.params.get("allocator")), runs))
        ax.set_title(", ".join(f"{k}={v}" for k, v in key if k in varying) or "", fontsize=8)
        ax.set_ylabel("fragmentation (%)", fontsize=8)
        ax.grid(True, alpha=0.3)
        legend(ax)
    axes[-1].set_xlabel("replay step; fragmentation = (reserved - allocated) / reserved")
    return fig


def family_plots(family: str) -> list[PlotSpec]:
    return list(PLOTS.get(family, ()))
