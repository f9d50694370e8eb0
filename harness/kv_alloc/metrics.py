"""Fragmentation figures of a simulated replay, with their definitions.

Every figure is computed from the time series the simulator samples on a fixed step grid, so a
"mean" is a time average over the replay (samples where the quantity is undefined, e.g. nothing
reserved yet, are skipped).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from harness.kv_alloc.base import AllocatorStats

DEFINITIONS = {
    "fragmentation": "(reserved - allocated) / reserved; allocated = bytes requested by live allocations",
    "external_fragmentation": "1 - largest free extent / total free, over reserved memory (0 when nothing is free)",
    "internal_waste_fraction": "internal waste / (allocated + internal waste); internal waste = bytes handed out "
                               "beyond the request (rounding, unsplit remainders, size classes, last-block tail)",
    "kv_waste": "(reserved - bytes of KV tokens actually stored) / reserved: allocator waste plus the policy's "
                "reservation ahead of use (vLLM's measure of KV memory not holding tokens)",
    "peak_reserved": "highest reserved bytes during the replay",
    "decode_ooms": "growth allocations of running requests that failed at the budget (each preempts the request)",
    "mean": "time average over the samples of the replay's step grid, from the first to the last arrival "
            "(the drain after the last arrival, where caches stay full while load falls, is left out)",
    "mean_running": "requests decoding at once, time average (what the memory lets the batch hold)",
    "loaded": "average over the samples where allocated is at least 90 % of its highest value in the window "
              "(the busy part of the replay, where fragmentation decides what fits)",
}


def fragmentation(reserved_bytes: float, allocated_bytes: float) -> float:
    return (reserved_bytes - allocated_bytes) / reserved_bytes if reserved_bytes > 0 else 0.0


def external_fragmentation(largest_free_extent_bytes: float, free_bytes: float) -> float:
    return 1.0 - largest_free_extent_bytes / free_bytes if free_bytes > 0 else 0.0


def internal_waste_fraction(internal_waste_bytes: float, allocated_bytes: float) -> float:
    held = internal_waste_bytes + allocated_bytes
    return internal_waste_bytes / held if held > 0 else 0.0


def of_stats(s: AllocatorStats) -> dict[str, float]:
    return {
        "fragmentation": fragmentation(s.reserved_bytes, s.allocated_bytes),
        "external_fragmentation": external_fragmentation(s.largest_free_extent_bytes, s.free_bytes),
        "internal_waste_fraction": internal_waste_fraction(s.internal_waste_bytes, s.allocated_bytes),
    }


@dataclass(frozen=True)
class ReplayFigures:
    fragmentation_mean: float
    fragmentation_loaded: float
    external_fragmentation_mean: float
    internal_waste_fraction_mean: float
    kv_waste_mean: float
    kv_waste_loaded: float
    peak_reserved_gb: float
    mean_running: float

    def to_dict(self) -> dict:
        return asdict(self)


def _mean(values: np.ndarray, mask: np.ndarray) -> float:
    return float(values[mask].mean()) if mask.any() else 0.0


def figures(series: dict, peak_reserved_bytes: int, last_arrival_step: int | None = None) -> ReplayFigures:
    window = series["step"] <= last_arrival_step if last_arrival_step is not None else np.ones(len(series["step"]), bool)
    series = {k: v[window] for k, v in series.items()}
    reserved = series["reserved_bytes"].astype(np.float64)
    allocated = series["allocated_bytes"].astype(np.float64)
    free = series["free_bytes"].astype(np.float64)
    waste = series["internal_waste_bytes"].astype(np.float64)
    largest = series["largest_free_extent_bytes"].astype(np.float64)
    tokens = series["token_bytes"].astype(np.float64)
    has = reserved > 0
    safe = np.where(has, reserved, 1.0)
    frag = (reserved - allocated) / safe
    kvw = (reserved - tokens) / safe
    ext = np.where(free > 0, 1.0 - largest / np.where(free > 0, free, 1.0), 0.0)
    held = waste + allocated
    iwf = np.where(held > 0, waste / np.where(held > 0, held, 1.0), 0.0)
    loaded = allocated >= 0.9 * allocated.max() if allocated.size else has
    loaded &= has
    return ReplayFigures(
        fragmentation_mean=_mean(frag, has),
        fragmentation_loaded=_mean(frag, loaded),
        external_fragmentation_mean=_mean(ext, free > 0),
        internal_waste_fraction_mean=_mean(iwf, held > 0),
        kv_waste_mean=_mean(kvw, has),
        kv_waste_loaded=_mean(kvw, loaded),
        peak_reserved_gb=peak_reserved_bytes / 1e9,
        mean_running=float(series["running"].mean()) if len(series["running"]) else 0.0,
    )


def compact_series(series: dict, max_points: int = 200) -> dict:
    """The time series for a record: GB with 3 decimals (counts as ints), at most ``max_points``."""
    n = len(series["step"])
    idx = np.unique(np.linspace(0, n - 1, min(n, max_points)).astype(int)) if n else np.array([], int)
    out = {"step": series["step"][idx].tolist()}
    for key, values in series.items():
        if key == "step":
            continue
        if key.endswith("_bytes"):
            out[key.replace("_bytes", "_gb")] = np.round(values[idx] / 1e9, 3).tolist()
        else:
            out[key] = values[idx].tolist()
    return out
