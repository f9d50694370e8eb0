"""What every plot is drawn with: matplotlib on a display-less backend, a figure's PNG bytes, colours
and line styles shared across the runs of a comparison, an outside legend, and the small rules
plots share (a run's label in a comparison, the points a log axis can show).

A family's plots (``harness.core.family.Plot``) live in its domain package and take one or more
runs: a comparison overlays them, one line style or hatch per run, into the same axes (or panels
with shared scales), never into axes of their own.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import matplotlib.pyplot as plt

LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D")
HATCHES = ("", "//", "..", "xx")  # one per run, for bars


def pyplot():
    """matplotlib.pyplot, on a display-less backend, imported when a plot is first drawn: it costs
    most of a second, which commands that draw nothing (every --help) should not pay."""
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as pyplot

    return pyplot


@dataclass(frozen=True)
class Drawn:
    """A drawn plot and what a reader must know to read it (points left out, the rule a line follows)."""
    figure: plt.Figure
    caption: str = ""


def png_bytes(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    # No "Software" metadata: the same figure gives the same bytes across matplotlib versions.
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    pyplot().close(fig)
    return buf.getvalue()


def _colours() -> tuple:
    tab20 = pyplot().get_cmap("tab20").colors
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
    fig, axes = pyplot().subplots(rows, 1, figsize=figsize, squeeze=False, layout="constrained", **share)
    for ax in axes[:, 0]:
        ax.set_prop_cycle(color=_colours())
    return fig, (axes[0, 0] if rows == 1 else axes)


def legend(ax) -> None:
    # Outside the axes, so many series never hide the data (savefig uses bbox_inches="tight").
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)


def run_label(run: Any, text: str, runs: Sequence[Any]) -> str:
    """``text`` of a line or bar of ``run``, prefixed with the run's label when several are overlaid."""
    return f"{run.label}: {text}" if len(runs) > 1 else text


def run_style(i: int) -> dict:
    """The line style and marker of the ``i``-th run."""
    return {"linestyle": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)]}


def passed(records: Sequence[Any]) -> list:
    """The records a plot draws: those that passed."""
    return [r for r in records if r.ok]


def varying_params(records: Sequence[Any], skip: tuple = ()) -> list[str]:
    """Parameter names whose values differ between the records (what tells their lines apart)."""
    keys = sorted({k for r in records for k in r.params})
    return [k for k in keys if k not in skip and len({str(r.params.get(k)) for r in records}) > 1]


def human_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.3g} B"


def positive(points: Sequence[tuple[float, float]]) -> tuple[list[tuple[float, float]], int]:
    """The points a log axis can show, and how many it cannot: a value of 0 or less is not a
    measurement there (nccl-tests prints busbw 0.00 for sizes whose bandwidth rounds to zero)."""
    kept = [(x, y) for x, y in points if y > 0]
    if any(math.isnan(y) for _, y in points):
        # NaN is no figure at all, not a rounded zero: the caption must not blame nccl-tests for it
        raise ValueError("a figure to plot is NaN")
    return kept, len(points) - len(kept)
