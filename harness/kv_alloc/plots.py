"""The KV-cache allocators' plot: fragmentation over the simulated replay per allocator, one panel
per configuration."""
from __future__ import annotations

from collections import defaultdict
from typing import Optional, Sequence

from harness.core.plotting import LINESTYLES, Drawn, legend, palette, passed, run_label, subplots, varying_params
from harness.core.records import Record
from harness.core.store import LoadedRun


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


def plot_kv_frag(runs: Sequence[LoadedRun]) -> Optional[Drawn]:
    groups: dict[tuple, list[tuple]] = defaultdict(list)
    for i, run in enumerate(runs):
        for r in passed(run.records):
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
    varying = [k for k in varying_params([r for key in keys for _, _, r, _ in groups[key]]) if k != "allocator"]
    colour = palette()
    for ax, key in zip(axes, keys):
        for i, run, r, (steps, pct) in groups[key]:
            allocator = str(r.params.get("allocator"))
            ax.plot(steps, pct, linestyle=LINESTYLES[i % 4], color=colour(allocator),
                    label=run_label(run, allocator, runs))
        ax.set_title(", ".join(f"{k}={v}" for k, v in key if k in varying) or "", fontsize=8)
        ax.set_ylabel("fragmentation (%, simulated)", fontsize=8)
        ax.grid(True, alpha=0.3)
        legend(ax)
    axes[-1].set_xlabel("replay step; fragmentation = (reserved - allocated) / reserved")
    left_out = len(groups) - len(keys)
    return Drawn(fig, "Simulated: allocator models replay a request trace (no GPU memory is allocated); panels share "
                      "the fragmentation axis." + (f" {left_out} more configuration{'s' if left_out != 1 else ''} not "
                                                   f"shown (the first {KV_PANELS} by parameters are)." if left_out else ""))


