"""Figures of ``critpath model`` (matplotlib, Agg). Every title says "modelled"."""
from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from harness.core.plotting import pyplot


# Every plot ``render_all`` may draw: a model written into an --out that holds another model's
# plots removes the ones it did not draw (an earlier calibration's fit beside an uncalibrated model).
TIME_PLOT, CROSSOVER_PLOT, FIT_PLOT = "modelled_time_vs_size.png", "modelled_crossover.png", "calibration_fit.png"
PLOT_NAMES = (TIME_PLOT, CROSSOVER_PLOT, FIT_PLOT)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def render_all(out: Path, profile, scales, sizes, algos, times_s, crossover, nccl, fits) -> dict[Path, bytes]:
    """Each plot of the model, path -> PNG bytes, for the command to write with its other files as
    one set."""
    plt = pyplot()
    written: dict[Path, bytes] = {}
    # Time vs size at up to four scales spread over the sweep.
    picks = sorted({int(round(x)) for x in np.linspace(0, len(scales) - 1, min(4, len(scales)))})
    fig, axes = plt.subplots(1, len(picks), figsize=(4.2 * len(picks), 3.8), squeeze=False, sharey=True)
    for ax, i in zip(axes[0], picks):
        for k, a in enumerate(algos):
            ax.loglog(sizes, times_s[k, i] * 1e6, label=f"{a} (modelled)")
        if nccl:
            ax.loglog(sizes, nccl["best_us"][i], "k--", label="NCCL 2.7.5 model pick")
        ax.set_title(f"modelled, {int(scales[i])} ranks")
        ax.set_xlabel("allreduce size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("modelled time (us)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"Modelled allreduce time, profile {profile.name} (not measured)")
    fig.tight_layout()
    path = out / TIME_PLOT
    written[path] = _png(fig)
    plt.close(fig)

    if crossover or nccl:
        fig, ax = plt.subplots(figsize=(6, 4))
        for key, values in crossover.items():
            v = np.array([x if math.isfinite(x) else np.nan for x in values])
            ax.loglog(scales, v, marker="o", label=f"{key.replace('_bytes', '')} (modelled)")
        if nccl:
            v = np.array([x if math.isfinite(x) else np.nan for x in nccl["ring_vs_tree_bytes"]])
            ax.loglog(scales, v, marker="s", linestyle="--", label="NCCL 2.7.5 model ring vs tree")
        ax.set_xlabel("ranks")
        ax.set_ylabel("size where ring stops losing (bytes)")
        ax.set_title(f"Modelled ring/tree crossover, profile {profile.name}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / CROSSOVER_PLOT
        written[path] = _png(fig)
        plt.close(fig)

    joint = [f for f in fits if len(f.worlds) == max(len(g.worlds) for g in fits if g.algo == f.algo)]
    if joint:
        fig, axes = plt.subplots(1, len(joint), figsize=(5 * len(joint), 4), squeeze=False)
        for ax, f in zip(axes[0], joint):
            for w in f.worlds:
                res = [r for r in f.residuals if r.world == w]
                xs = [r.size_bytes for r in res]
                line = ax.loglog(xs, [r.modelled_us for r in res], "-", label=f"world {w} modelled")[0]
                ax.loglog([r.size_bytes for r in res if not r.heldout], [r.measured_us for r in res if not r.heldout],
                          "o", color=line.get_color(), label=f"world {w} measured (fit)")
                ax.loglog([r.size_bytes for r in res if r.heldout], [r.measured_us for r in res if r.heldout],
                          "x", color=line.get_color(), markersize=9, label=f"world {w} measured (held out)")
            ax.set_title(f"{f.algo}: measured vs modelled (alpha {f.alpha_us:.0f} us, "
                         f"{f.bandwidth_gbytes_s:.2f} GB/s)", fontsize=9)
            ax.set_xlabel("allreduce size (bytes)")
            ax.set_ylabel(f"{f.statistic} time (us)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6)
        fig.suptitle("Calibration: lines modelled, markers measured")
        fig.tight_layout()
        path = out / FIT_PLOT
        written[path] = _png(fig)
        plt.close(fig)
    return written
