"""The pipeline's plot: the bubble per configuration, the measured idle share as a bar and the
fill/drain model as a tick."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from harness.core.plotting import Drawn, passed, run_label, subplots, varying_params
from harness.core.store import LoadedRun


def plot_pipeline_bubble(runs: Sequence[LoadedRun]) -> Optional[Drawn]:
    rows = [(i, run, r) for i, run in enumerate(runs) for r in passed(run.records)
            if "bubble_idle_share" in r.metrics]
    if not rows:
        return None
    # One configuration's runs side by side: a comparison reads bar against bar.
    first_seen = {r.case_id: k for k, (_, _, r) in reversed(list(enumerate(rows)))}
    rows = [(run, r) for _, run, r in sorted(rows, key=lambda row: (first_seen[row[2].case_id], row[0]))]
    keys = [k for k in varying_params([r for _, r in rows]) if k not in ("world",)]
    labels = [run_label(run, ", ".join(str(r.params.get(k)) for k in keys) or r.case_id, runs) for run, r in rows]
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


