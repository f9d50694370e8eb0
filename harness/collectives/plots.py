"""AllReduce's plots: latency and bus bandwidth against message size per algorithm, log-log, the
ring/tree crossover marked with its bootstrap band on the latency plot (harness.collectives.crossover)."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from harness.collectives import crossover
from harness.core.figures import is_mean_only
from harness.core.plotting import (LINESTYLES, Drawn, human_bytes, legend, palette, passed, positive, run_label,
                                   run_style, subplots)
from harness.core.records import Record
from harness.core.store import LoadedRun


def _latency_us(record: Record) -> float:
    # p50 from raw samples; an imported record has only its mean.
    return record.summary.mean_ns / 1e3 if is_mean_only(record) else record.summary.p50_ns / 1e3


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
    if not any(passed(run.records) for run in runs):
        return None
    fig, ax = subplots((7, 4.2))
    captions = []
    colour = palette()
    for i, run in enumerate(runs):
        omitted = 0
        for key, recs in crossover.allreduce_series(run.records).items():
            points, left_out = positive([(r.params["size_bytes"], value(r)) for r in recs])
            omitted += left_out
            if points:
                algo, dtype, world, backend = key
                ax.plot(*zip(*points), label=run_label(run, f"{algo} ({backend}, {dtype}, world {world})", runs),
                        color=colour(key), **run_style(i), markersize=3)
        if omitted:
            captions.append(run_label(run, f"{omitted} point{'s' if omitted != 1 else ''} with {what} of 0 or less "
                                           "(nccl-tests prints 0.00 where the figure rounds to zero) not plotted: a "
                                           "log axis has no place for them.", runs))
        if mark:
            found = crossover.ring_tree_crossovers(run.records)
            _crossover_marks(ax, found, LINESTYLES[i % 4], run_label(run, "", runs))
            if (text := crossover_caption(found)):
                captions.append(run_label(run, text, runs))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    legend(ax)
    return Drawn(fig, " ".join(captions))


def plot_allreduce_latency(runs: Sequence[LoadedRun]) -> Optional[Drawn]:
    return _allreduce(runs, "time per operation (us; p50, mean if imported)", _latency_us, "time", mark=True)


def plot_allreduce_busbw(runs: Sequence[LoadedRun]) -> Optional[Drawn]:
    return _allreduce(runs, "busbw (GB/s, nccl-tests definition)", lambda r: r.metrics["busbw_gbps"], "busbw",
                      mark=False)

