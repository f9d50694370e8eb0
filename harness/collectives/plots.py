"""AllReduce's plots: latency and bus bandwidth against message size per algorithm, log-log, the
ring/tree crossover of the runs pooled (harness.collectives.crossover) marked with its interval on
the latency plot."""
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


def _machine_prefix(c: crossover.Crossover, found: Sequence[crossover.Crossover]) -> str:
    # Runs of several machines are never pooled: each machine's crossover is named by its host.
    return f"{c.group.machine}: " if len({f.group.machine for f in found}) > 1 else ""


def _crossover_marks(ax, found: Sequence[crossover.Crossover]) -> None:
    """A significant crossover of the pooled runs as its bracket of measured sizes (light), the
    interval of the interpolation inside it over resampled runs (darker) and the interpolated point.
    One that is not established or not significant is not marked: the caption says why."""
    # Named in the legend (outside the axes), not written over the lines.
    for k, c in enumerate(found):
        prefix = _machine_prefix(c, found)
        for ch in c.changes:
            ax.axvspan(ch.below_bytes, ch.above_bytes, color="grey", alpha=0.08, linewidth=0,
                       label=f"{prefix}ring/tree crossover: between {human_bytes(ch.below_bytes)} and "
                             f"{human_bytes(ch.above_bytes)}")
            if ch.low_bytes is not None:
                ax.axvspan(ch.low_bytes, ch.high_bytes, color="grey", alpha=0.25, linewidth=0,
                           label=f"{prefix}  interpolated, {crossover.LEVEL:.0%} interval {human_bytes(ch.low_bytes)}-"
                                 f"{human_bytes(ch.high_bytes)} ({len(c.runs)} runs)")
            if ch.point_bytes is not None:
                ax.axvline(ch.point_bytes, color="grey", linestyle=LINESTYLES[k % len(LINESTYLES)], linewidth=0.8)


def crossover_caption(found: Sequence[crossover.Crossover]) -> str:
    if not found:
        return ""
    parts = []
    for c in found:
        what = f"{_machine_prefix(c, found)}{c.group.backend}, {c.group.dtype}, world {c.group.world}"
        if c.significant:
            parts.append(f"{what}: light grey, the measured sizes the faster algorithm changes between; darker, "
                         f"the {crossover.LEVEL:.0%} interval of the interpolation inside them over resamples of the "
                         f"{len(c.runs)} runs")
        elif c.established:
            parts.append(f"{what}: no significant crossover over {len(c.runs)} runs, none marked")
        else:
            parts.append(f"{what}: crossover not established here ({crossover.why_not_established(c)}), none marked")
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
        found = crossover.ring_tree_crossovers(runs)
        _crossover_marks(ax, found)
        if (text := crossover_caption(found)):
            captions.append(text)
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

