"""Plots per family, found by family name. Each plot takes one or more runs (a comparison overlays
them: one line style per run) and returns a matplotlib figure, or None when the runs hold nothing
it can draw. What each family must record for its plots is in docs/reports.md.

Adding a family's plot: write ``def plot_x(runs) -> Drawn | None`` and decorate it with
``@plot("family", "name", "title")``. A plot over several runs shares its axes between them: every
run is drawn into the same axes (or panels with shared scales), never into axes of its own.
"""
from __future__ import annotations

import io
import math
from fractions import Fraction
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np

from harness.core.figures import is_mean_only, samples_needed, supports
from harness.core.records import Record
from harness.collectives import crossover
from harness.core.store import LoadedRun
from harness.core.stats import PERCENTILE_METHOD

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
HATCHES = ("", "//", "..", "xx")  # one per run, for bars


@dataclass(frozen=True)
class Drawn:
    """A drawn plot and what a reader must know to read it (points left out, the rule a line follows)."""
    figure: plt.Figure
    caption: str = ""


@dataclass(frozen=True)
class PlotSpec:
    family: str
    name: str
    title: str
    draw: Callable[[Sequence[LoadedRun]], Optional[Drawn]]


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


def _colours() -> tuple:
    tab20 = _pyplot().get_cmap("tab20").colors
    return tab20[0::2] + tab20[1::2]  # ten distinct hues first


def palette() -> Callable[[object], tuple]:
    """A colour per key (a series, an allocator, a workload): the same key gets the same colour in
    every run and panel of one plot, so compared runs differ by line style or hatch only."""
    colours = _colours()
    seen: dict = {}

    def colour(key) -> tuple:
        return colours[seen.setdefault(key, len(seen)) % len(colours)]

    return colour


def subplots(figsize, rows: int = 1, **share):
    """A figure whose axes cycle through 20 distinct colours (an RPC run has more transports than
    the default cycle's 10); set per axes, so importing this module changes no global style.
    Constrained layout keeps panel titles, tick labels and outside legends from overlapping;
    ``share`` (sharex=, sharey=) gives panels one scale so they compare."""
    fig, axes = _pyplot().subplots(rows, 1, figsize=figsize, squeeze=False, layout="constrained", **share)
    for ax in axes[:, 0]:
        ax.set_prop_cycle(color=_colours())
    return fig, (axes[0, 0] if rows == 1 else axes)


def legend(ax) -> None:
    # Outside the axes, so many series never hide the data (savefig uses bbox_inches="tight").
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)


def _label(run: LoadedRun, text: str, runs: Sequence[LoadedRun]) -> str:
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


def positive(points: Sequence[tuple[float, float]]) -> tuple[list[tuple[float, float]], int]:
    """The points a log axis can show, and how many it cannot: a value of 0 or less is not a
    measurement there (nccl-tests prints busbw 0.00 for sizes whose bandwidth rounds to zero)."""
    kept = [(x, y) for x, y in points if y > 0]
    if any(math.isnan(y) for _, y in points):
        # NaN is no figure at all, not a rounded zero: the caption must not blame nccl-tests for it
        raise ValueError("a figure to plot is NaN")
    return kept, len(points) - len(kept)


def _crossover_marks(ax, found: Sequence[crossover.Crossover], linestyle: str, prefix: str = "") -> None:
    """A significant crossover as its bracket of measured sizes (light), the bootstrap interval of the
    interpolation inside it (darker) and the interpolated point; an imported (means only) one as a
    dotted line at the means' crossover, without a band it has no samples for."""
    # Named in the legend (outside the axes), not written over the lines.
    for c in found:
        for ch in c.changes:
            ax.axvspan(ch.below_bytes, ch.above_bytes, color="grey", alpha=0.08, linewidth=0,
                       label=f"{prefix}ring/tree crossover: between {human_bytes(ch.below_bytes)} and "
                             f"{human_bytes(ch.above_bytes)}")
            if ch.low_bytes is not None:
                ax.axvspan(ch.low_bytes, ch.high_bytes, color="grey", alpha=0.25, linewidth=0,
                           label=f"{prefix}  interpolated, {crossover.LEVEL:.0%} interval {human_bytes(ch.low_bytes)}-"
                                 f"{human_bytes(ch.high_bytes)}")
            if ch.point_bytes is not None:
                ax.axvline(ch.point_bytes, color="grey", linestyle=linestyle, linewidth=0.8)
        if not c.resampled:
            for x in c.point_bytes:
                ax.axvline(x, color="grey", linestyle=":", linewidth=0.8,
                           label=f"{prefix}crossover of means ~{human_bytes(x)} (no band: no samples)")


def crossover_caption(found: Sequence[crossover.Crossover]) -> str:
    if not found:
        return ""
    parts = []
    for c in found:
        dtype, world, backend = c.key
        what = f"{backend}, {dtype}, world {world}"
        if c.significant:
            parts.append(f"{what}: light grey, the measured sizes the faster algorithm changes between; darker, "
                         f"the {crossover.LEVEL:.0%} bootstrap interval of the interpolation inside them")
        elif c.resampled:
            parts.append(f"{what}: no significant crossover, none marked")
        else:
            parts.append(f"{what}: imported means only, so no band can be computed; dotted line at the means' crossover")
    return "Ring/tree crossover: " + "; ".join(parts) + "."


def _allreduce(runs: Sequence[LoadedRun], ylabel: str, value: Callable[[Record], float], what: str,
               mark: bool) -> Optional[Drawn]:
    if not any(_ok(run.of("allreduce")) for run in runs):
        return None
    fig, ax = subplots((7, 4.2))
    captions = []
    colour = palette()
    for i, run in enumerate(runs):
        omitted = 0
        for key, recs in crossover.allreduce_series(run.of("allreduce")).items():
            points, left_out = positive([(r.params["size_bytes"], value(r)) for r in recs])
            omitted += left_out
            if points:
                algo, dtype, world, backend = key
                ax.plot(*zip(*points), label=_label(run, f"{algo} ({backend}, {dtype}, world {world})", runs),
                        color=colour(key), **_style(i), markersize=3)
        if omitted:
            captions.append(_label(run, f"{omitted} point{'s' if omitted != 1 else ''} with {what} of 0 or less "
                                        "(nccl-tests prints 0.00 where the figure rounds to zero) not plotted: a log "
                                        "axis has no place for them.", runs))
        if mark:
            found = crossover.ring_tree_crossovers(run.of("allreduce"))
            _crossover_marks(ax, found, LINESTYLES[i % 4], _label(run, "", runs))
            if (text := crossover_caption(found)):
                captions.append(_label(run, text, runs))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    legend(ax)
    return Drawn(fig, " ".join(captions))


@plot("allreduce", "allreduce_latency", "AllReduce latency vs message size")
def plot_allreduce_latency(runs):
    return _allreduce(runs, "time per operation (us; p50, mean if imported)", _latency_us, "time", mark=True)


@plot("allreduce", "allreduce_busbw", "AllReduce bus bandwidth vs message size")
def plot_allreduce_busbw(runs):
    return _allreduce(runs, "busbw (GB/s, nccl-tests definition)", lambda r: r.metrics["busbw_gbps"], "busbw",
                      mark=False)


# ---------------------------------------------------------------- rpc

def _varying(records: Sequence[Record], skip: tuple = ()) -> list[str]:
    """Parameter names whose values differ between the records (what tells their lines apart)."""
    keys = sorted({k for r in records for k in r.params})
    return [k for k in keys if k not in skip and len({str(r.params.get(k)) for r in records}) > 1]


RPC_FAULT_KEYS = ("hops", "delay_us", "jitter_us", "stall_every", "stall_us", "reference")
RPC_PAYLOAD_BYTES = 256


def rpc_spectrum_records(records: Sequence[Record]) -> list[Record]:
    """One plain ping-pong record per transport (256 B when measured, else the smallest size):
    raw samples only, no forwarding hops, no injected faults."""
    by_transport: dict[str, list[Record]] = defaultdict(list)
    for r in _ok(records):
        p = r.params
        if is_mean_only(r) or p.get("mode", "pingpong") != "pingpong" or p.get("codec", "raw") != "raw":
            continue
        if any(k in p for k in RPC_FAULT_KEYS) or not r.samples_ns:
            continue
        by_transport[str(p.get("transport", "?"))].append(r)
    chosen = []
    for transport, recs in sorted(by_transport.items()):
        sized = {r.params.get("payload_bytes"): r for r in recs}
        chosen.append(sized.get(RPC_PAYLOAD_BYTES) or min(recs, key=lambda r: r.params.get("payload_bytes", 0)))
    return chosen


# Panels by what carries the bytes, read off the transport's name (tcp_nagle_cork -> tcp); a
# transport of another kind gets a panel of its own kind.
RPC_KINDS = {"tcp": "kernel sockets (TCP, UDS)", "uds": "kernel sockets (TCP, UDS)", "shm": "shared-memory ring",
             "http": "RPC frameworks (HTTP, gRPC, ZeroMQ)", "grpc": "RPC frameworks (HTTP, gRPC, ZeroMQ)",
             "zmq": "RPC frameworks (HTTP, gRPC, ZeroMQ)"}
RPC_LINES_PER_PANEL = 5
PERCENTILE_TICKS = ("0", "50", "90", "99", "99.9", "99.99", "99.999", "99.9999")
# The spectrum's percentiles: 1/(1-p) evenly spaced on a log axis from p = 0 to p = 99.9999, plus the ticks.
_SPECTRUM_Q = sorted({round(100 * (1 - x), 6) for x in np.logspace(0, -6, 241)} | {float(t) for t in PERCENTILE_TICKS})


def rpc_panels(transports: Sequence[str], runs: int = 1) -> list[tuple[str, list[str]]]:
    """(title, transports) per panel: transports grouped by kind (kernel sockets, shared memory, RPC
    frameworks, then any other kind; by name within a kind), a kind split into even panels so that
    none holds more than about RPC_LINES_PER_PANEL lines (a comparison draws one per transport per run)."""
    def kind(t: str) -> str:
        return RPC_KINDS.get(t.split("_")[0], f"{t.split('_')[0]} transports")

    known = list(dict.fromkeys(RPC_KINDS.values()))
    kinds: dict[str, list[str]] = {}
    for t in sorted(transports, key=lambda t: (known.index(kind(t)) if kind(t) in known else len(known), t)):
        kinds.setdefault(kind(t), []).append(t)
    per_panel = max(1, math.ceil(RPC_LINES_PER_PANEL / runs))
    panels = []
    for kind, members in kinds.items():
        count = math.ceil(len(members) / per_panel)
        for k in range(count):
            part = members[k * len(members) // count:(k + 1) * len(members) // count]
            panels.append((kind + (f" ({k + 1} of {count})" if count > 1 else ""), part))
    return panels


def percentile_spectrum(samples_ns: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """(percentiles, us) of raw samples, up to the highest percentile their count supports."""
    n = len(samples_ns)
    qs = np.array([q for q in _SPECTRUM_Q if supports(f"p{q:.6f}".rstrip("0").rstrip("."), n)])
    return qs, np.percentile(np.asarray(samples_ns, dtype=np.float64), qs, method=PERCENTILE_METHOD) / 1e3


def _one_over_tail(q: np.ndarray | float) -> np.ndarray | float:
    return 1.0 / (1.0 - np.asarray(q) / 100.0)


@plot("rpc", "rpc_percentiles", "RPC round-trip latency by percentile per transport (ping-pong, no faults)")
def plot_rpc_percentiles(runs):
    # Only records with raw samples: a percentile of one averaged sample would be a lie.
    chosen = [(i, run, r) for i, run in enumerate(runs) for r in rpc_spectrum_records(run.of("rpc"))]
    if not chosen:
        return None
    transports = list(dict.fromkeys(str(r.params.get("transport", "?")) for _, _, r in chosen))
    panels = rpc_panels(transports, len(runs))
    fig, axes = subplots((7.5, 0.6 + 2.3 * len(panels)), len(panels), sharex=True, sharey=True)
    axes = [axes] if len(panels) == 1 else list(axes[:, 0])
    widest = 1.0
    for ax, (title, members) in zip(axes, panels):
        colour = palette()  # per panel: few lines, the most distinct hues
        for transport in members:
            for i, run, r in chosen:
                if str(r.params.get("transport", "?")) != transport:
                    continue
                qs, us = percentile_spectrum(r.samples_ns)
                xs = _one_over_tail(qs)
                widest = max(widest, float(xs[-1]))
                size = r.params.get("payload_bytes")
                text = f"{transport}{'' if size == RPC_PAYLOAD_BYTES else f' ({size} B)'}, n={len(r.samples_ns)}"
                ax.plot(xs, us, color=colour(transport), linestyle=LINESTYLES[i % 4], label=_label(run, text, runs),
                        linewidth=1.2)
                ax.plot(xs[-1:], us[-1:], "o", color=colour(transport), markersize=3)  # where the samples end
        ax.set_title(title, fontsize=8, loc="left")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_ylabel("round trip (us)", fontsize=8)
        legend(ax)
    ticks = [t for t in PERCENTILE_TICKS if _one_over_tail(float(t)) <= widest * 1.0001]
    next_tick = PERCENTILE_TICKS[min(len(ticks), len(PERCENTILE_TICKS) - 1)]
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlim(1, _one_over_tail(float(next_tick)))
    axes[-1].set_xticks([_one_over_tail(float(t)) for t in ticks + [next_tick]], ticks + [next_tick])
    axes[-1].xaxis.set_minor_locator(_pyplot().NullLocator())  # shared: no unlabelled ticks on any panel
    axes[-1].set_xlabel("percentile (axis spaced by 1/(1-p), as HdrHistogram plots)")
    caption = (f"{RPC_PAYLOAD_BYTES} B plain ping-pong per transport, one round trip per sample; all panels share both "
               "axes. Each line ends (dot) at the highest percentile its sample count n supports: p99 needs "
               f"{samples_needed(Fraction(99))} samples, p99.9 {samples_needed(Fraction('99.9'))}.")
    return Drawn(fig, caption)


# ---------------------------------------------------------------- pipeline


@plot("pipeline", "pipeline_bubble", "Pipeline bubble per schedule: measured idle share and the fill/drain model")
def plot_pipeline_bubble(runs):
    rows = [(i, run, r) for i, run in enumerate(runs) for r in _ok(run.of("pipeline")) if "bubble_idle_share" in r.metrics]
    if not rows:
        return None
    # One configuration's runs side by side: a comparison reads bar against bar.
    first_seen = {r.case_id: k for k, (_, _, r) in reversed(list(enumerate(rows)))}
    rows = [(run, r) for _, run, r in sorted(rows, key=lambda row: (first_seen[row[2].case_id], row[0]))]
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
    # Above the axes: inside, it hid the bottom bars.
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    return Drawn(fig)


# ---------------------------------------------------------------- moe_a2a


def moe_rank_load(record: Record) -> list[float]:
    """Rows each rank received per step (mean), from the family's per-rank reports."""
    reports = record.extra.get("rank_reports") or []
    return [float(rep["recv_rows_mean"]) for rep in reports if isinstance(rep, dict) and "recv_rows_mean" in rep]


@plot("moe_a2a", "moe_rank_load", "MoE rows received per rank (most imbalanced case vs uniform)")
def plot_moe_load(runs):
    cases = [(run, r) for run in runs for r in _ok(run.of("moe_a2a")) if moe_rank_load(r)]
    if not cases:
        return None
    fig, ax = subplots((7, 3.8))
    shown = []  # (run index, run, record)
    for n, run in enumerate(runs):
        mine = [r for rr, r in cases if rr is run]
        if not mine:
            continue
        worst = max(mine, key=lambda r: max(moe_rank_load(r)) / max(1e-9, float(np.mean(moe_rank_load(r)))))
        uniform = next((r for r in mine if r.params.get("workload") == "uniform"), None)
        shown += [(n, run, worst)] + ([(n, run, uniform)] if uniform is not None and uniform is not worst else [])
    width = 0.8 / len(shown)
    colour = palette()
    for i, (n, run, r) in enumerate(shown):
        load = moe_rank_load(r)
        text = f"{r.params.get('workload')} skew={r.params.get('skew')} mitigation={r.params.get('mitigation')}"
        ax.bar(np.arange(len(load)) + i * width, load, width, label=_label(run, text, runs), color=colour(text),
               hatch=HATCHES[n % len(HATCHES)], edgecolor="white")
    ranks = max(len(moe_rank_load(r)) for _, _, r in shown)
    ax.set_xticks(np.arange(ranks) + 0.4 - width / 2, [str(k) for k in range(ranks)])  # whole ranks, group centres
    ax.set_xlabel("rank")
    ax.set_ylabel("rows received per step (mean)")
    legend(ax)
    return Drawn(fig)


MEAN_BATCHES = 10  # batch means: consecutive steps share load and placement, so they are not independent


def _mean_interval_us(record: Record) -> tuple[float, float]:
    """The mean step (the table's step_us) and the half-width of its 95 % interval from batch means:
    the steps in order cut into ``MEAN_BATCHES`` batches, Student's t over the batches' means.
    Consecutive steps are correlated (lag-1 about 0.2-0.4 on the default grid), which made an
    interval from the steps as if independent too narrow. 0 for an imported mean or too few steps."""
    from scipy import stats

    if is_mean_only(record) or len(record.samples_ns or ()) < 2 * MEAN_BATCHES:
        return record.summary.mean_ns / 1e3, 0.0
    steps = np.asarray(record.samples_ns, dtype=np.float64) / 1e3
    means = np.array([batch.mean() for batch in np.array_split(steps, MEAN_BATCHES)])
    half = stats.t.ppf(0.975, MEAN_BATCHES - 1) * means.std(ddof=1) / math.sqrt(MEAN_BATCHES)
    return float(steps.mean()), float(half)


@plot("moe_a2a", "moe_step_by_mitigation", "MoE mean step time per workload and mitigation")
def plot_moe_steps(runs):
    from harness.moe_a2a.config import mitigation_label, workload_label

    rows = [(run, r) for run in runs for r in _ok(run.of("moe_a2a")) if r.summary is not None]
    if not rows:
        return None
    # Grouped by workload (uniform first, then by skew), the runs of one case side by side.
    order = {run.label: i for i, run in enumerate(runs)}
    rows.sort(key=lambda rr: (rr[1].params.get("workload") != "uniform", str(rr[1].params.get("workload")),
                              float(rr[1].params.get("skew", 0)), mitigation_label(rr[1]), order[rr[0].label]))
    fig, ax = subplots((7, 0.9 + 0.3 * len(rows)))
    y = np.arange(len(rows))
    colour = palette()
    for k, (run, r) in enumerate(rows):
        mean, half = _mean_interval_us(r)
        ax.barh(k, mean, xerr=half or None, color=colour(workload_label(r)),
                hatch=HATCHES[order[run.label] % len(HATCHES)], edgecolor="white", capsize=2)
    labels = [_label(run, f"{workload_label(r)}  {mitigation_label(r)}", runs) for run, r in rows]
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("mean step (us, slowest rank; as the table's step column); bars: 95 % interval of the mean")
    ax.grid(True, axis="x", alpha=0.3)
    return Drawn(fig, "Labels: workload (hotF: one hot expert with F times the mean load; zipfS: zipf exponent S; "
                      "unbalancedR: ratio R; ~N: the skew moves every N steps), then mitigation. Colour: workload. "
                      f"Interval: 95 % of the mean from {MEAN_BATCHES} batch means of consecutive steps (Student's t), "
                      "since consecutive steps are correlated; none for an imported mean or fewer than "
                      f"{2 * MEAN_BATCHES} steps.")


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


KV_PANELS = 3  # a taller figure stops being readable in a report


@plot("kv_alloc", "kv_fragmentation", "KV-cache fragmentation over the trace per allocator (simulated replay)")
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
    keys = sorted(groups)[:KV_PANELS]  # one panel per configuration
    fig, axes = subplots((7, 2.6 * len(keys)), len(keys), sharey=True)
    axes = [axes] if len(keys) == 1 else list(axes[:, 0])
    varying = [k for k in _varying([r for key in keys for _, _, r, _ in groups[key]]) if k != "allocator"]
    colour = palette()
    for ax, key in zip(axes, keys):
        for i, run, r, (steps, pct) in groups[key]:
            allocator = str(r.params.get("allocator"))
            ax.plot(steps, pct, linestyle=LINESTYLES[i % 4], color=colour(allocator), label=_label(run, allocator, runs))
        ax.set_title(", ".join(f"{k}={v}" for k, v in key if k in varying) or "", fontsize=8)
        ax.set_ylabel("fragmentation (%, simulated)", fontsize=8)
        ax.grid(True, alpha=0.3)
        legend(ax)
    axes[-1].set_xlabel("replay step; fragmentation = (reserved - allocated) / reserved")
    left_out = len(groups) - len(keys)
    return Drawn(fig, "Simulated: allocator models replay a request trace (no GPU memory is allocated); panels share "
                      "the fragmentation axis." + (f" {left_out} more configuration{'s' if left_out != 1 else ''} not "
                                                   f"shown (the first {KV_PANELS} by parameters are)." if left_out else ""))


def family_plots(family: str) -> list[PlotSpec]:
    return list(PLOTS.get(family, ()))
