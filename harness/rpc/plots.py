"""RPC's plot: the percentile spectrum of round trips per transport (latency by percentile on a
1/(1-p) axis, as HdrHistogram plots it), transports in panels by kind."""
from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction
from typing import Optional, Sequence

import numpy as np

from harness.core.figures import is_mean_only, samples_needed
from harness.core.plotting import LINESTYLES, Drawn, legend, palette, passed, pyplot, run_label, subplots
from harness.core.records import Record
from harness.core.stats import PERCENTILE_METHOD
from harness.core.store import LoadedRun

RPC_FAULT_KEYS = ("hops", "delay_us", "jitter_us", "stall_every", "stall_us", "reference")
RPC_PAYLOAD_BYTES = 256


def rpc_spectrum_records(records: Sequence[Record]) -> list[Record]:
    """One plain ping-pong record per transport (256 B when measured, else the smallest size):
    raw samples only, no forwarding hops, no injected faults."""
    by_transport: dict[str, list[Record]] = defaultdict(list)
    for r in passed(records):
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
    # The support rule on each point's exact percentile, not on a figure name: a name holds at most
    # QUANTILE_DECIMALS decimals, and the spectrum's points are finer than that.
    qs = np.array([q for q in _SPECTRUM_Q if n >= samples_needed(Fraction(repr(float(q))))])
    return qs, np.percentile(np.asarray(samples_ns, dtype=np.float64), qs, method=PERCENTILE_METHOD) / 1e3


def _one_over_tail(q: np.ndarray | float) -> np.ndarray | float:
    return 1.0 / (1.0 - np.asarray(q) / 100.0)


def plot_rpc_percentiles(runs: Sequence[LoadedRun]) -> Optional[Drawn]:
    # Only records with raw samples: a percentile of one averaged sample would be a lie.
    chosen = [(i, run, r) for i, run in enumerate(runs) for r in rpc_spectrum_records(run.records)]
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
                ax.plot(xs, us, color=colour(transport), linestyle=LINESTYLES[i % 4], label=run_label(run, text, runs),
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
    axes[-1].xaxis.set_minor_locator(pyplot().NullLocator())  # shared: no unlabelled ticks on any panel
    axes[-1].set_xlabel("percentile (axis spaced by 1/(1-p), as HdrHistogram plots)")
    caption = (f"{RPC_PAYLOAD_BYTES} B plain ping-pong per transport, one round trip per sample; all panels share both "
               "axes. Each line ends (dot) at the highest percentile its sample count n supports: p99 needs "
               f"{samples_needed(Fraction(99))} samples, p99.9 {samples_needed(Fraction('99.9'))}.")
    return Drawn(fig, caption)


