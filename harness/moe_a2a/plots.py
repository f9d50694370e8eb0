"""MoE all-to-all's plots: rows received per rank (the most imbalanced case beside uniform), and the
mean step per workload and mitigation with its interval from batch means."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from harness.core.figures import is_mean_only
from harness.core.plotting import HATCHES, Drawn, legend, palette, passed, run_label, subplots
from harness.core.records import Record
from harness.core.store import LoadedRun
from harness.moe_a2a.config import mitigation_label, workload_label


def moe_rank_load(record: Record) -> list[float]:
    """Rows each rank received per step (mean), from the family's per-rank reports."""
    reports = record.extra.get("rank_reports") or []
    return [float(rep["recv_rows_mean"]) for rep in reports if isinstance(rep, dict) and "recv_rows_mean" in rep]


def plot_moe_load(runs: Sequence[LoadedRun]) -> Optional[Drawn]:
    cases = [(run, r) for run in runs for r in passed(run.records) if moe_rank_load(r)]
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
        ax.bar(np.arange(len(load)) + i * width, load, width, label=run_label(run, text, runs), color=colour(text),
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
    from scipy import stats  # about a second of start-up: paid only where a step plot is drawn

    if is_mean_only(record) or len(record.samples_ns or ()) < 2 * MEAN_BATCHES:
        return record.summary.mean_ns / 1e3, 0.0
    steps = np.asarray(record.samples_ns, dtype=np.float64) / 1e3
    means = np.array([batch.mean() for batch in np.array_split(steps, MEAN_BATCHES)])
    half = stats.t.ppf(0.975, MEAN_BATCHES - 1) * means.std(ddof=1) / math.sqrt(MEAN_BATCHES)
    return float(steps.mean()), float(half)


def plot_moe_steps(runs: Sequence[LoadedRun]) -> Optional[Drawn]:
    rows = [(run, r) for run in runs for r in passed(run.records) if r.summary is not None]
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
    labels = [run_label(run, f"{workload_label(r)}  {mitigation_label(r)}", runs) for run, r in rows]
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("mean step (us, slowest rank; as the table's step column); bars: 95 % interval of the mean")
    ax.grid(True, axis="x", alpha=0.3)
    return Drawn(fig, "Labels: workload (hotF: one hot expert with F times the mean load; zipfS: zipf exponent S; "
                      "unbalancedR: ratio R; ~N: the skew moves every N steps), then mitigation. Colour: workload. "
                      f"Interval: 95 % of the mean from {MEAN_BATCHES} batch means of consecutive steps (Student's t), "
                      "since consecutive steps are correlated; none for an imported mean or fewer than "
                      f"{2 * MEAN_BATCHES} steps.")


