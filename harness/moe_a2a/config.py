"""What an MoE step is, without torch: phases, payloads, mitigations and the rules a case must meet.

The step itself (``harness.moe_a2a.step``) needs torch; the family's declarations, its case checks and
every command that reads MoE records need only this.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.core.records import MAX_SAMPLES
from harness.core.sizes import MAX_RUN_SIZE_BYTES, format_size
from harness.core.store import RECORD_LIMITS
from harness.moe_a2a.workloads import Shape

PHASES = ("route", "count", "dispatch", "compute", "combine")
SENTINEL = -1.0  # a result row never written; expert outputs are >= 1
MAX_KEPT_STEPS = 20000
PAIR_BLOCK = 4
PAYLOAD_BYTES = (2, 4)  # float16, float32: the payloads a measured step sends
# float16 holds integers exactly up to 2048: payload values stay below that.
MAX_EXACT = {2: 2048, 4: 1 << 24}
# Each rank reports the final placement (world x slots values), so a record holds world^2 x slots.
# Its samples take up to MAX_SAMPLES of the values a record may hold; the placements get half of
# what is left, the rest of the report (paired step times, phases) the other half.
MAX_PLACEMENT_VALUES = (RECORD_LIMITS.values - MAX_SAMPLES) // 2


MITIGATIONS = ("none", "replicate", "adaptive", "capacity")
ROUTINGS = ("static", "naive", "aware")


@dataclass(frozen=True)
class Mitigation:
    kind: str = "none"  # one of MITIGATIONS
    routing: str = "static"  # one of ROUTINGS
    spare_slots: int = 0
    window_steps: int = 0  # adaptive: recompute every N steps (0: use window_ms)
    window_ms: float = 0.0  # adaptive: recompute when rank 0 saw this much time pass
    capacity_factor: float = 0.0
    overflow: str = "drop"  # one of routing.OVERFLOWS

    def __post_init__(self) -> None:
        if self.kind not in MITIGATIONS:
            raise ValueError(f"mitigation must be one of {MITIGATIONS}, got {self.kind!r}")
        if self.kind in ("replicate", "adaptive") and self.spare_slots < 1:
            raise ValueError(f"{self.kind} needs spare_slots >= 1 for replicas")
        if self.kind == "replicate" and self.routing not in ("naive", "aware"):
            raise ValueError(f"replicate needs routing naive or aware, got {self.routing!r}")
        if self.kind == "adaptive" and (self.window_steps < 1) == (self.window_ms <= 0):
            raise ValueError("adaptive needs exactly one of window_steps >= 1 or window_ms > 0")
        if self.kind == "capacity" and self.capacity_factor <= 0:
            raise ValueError("capacity needs capacity_factor > 0")

    @property
    def gathers_demand(self) -> bool:
        return self.kind == "capacity" or self.routing == "aware" or self.kind == "adaptive"


def check_measurable(shape: Shape) -> None:
    """What a measured step needs of its shape beyond the model's: a payload type whose values the
    check can compare exactly."""
    if shape.bytes_per_elem not in PAYLOAD_BYTES:
        raise ValueError(f"bytes_per_elem={shape.bytes_per_elem}: measured payloads are 2 (float16) or 4 (float32)")
    if shape.experts + 1024 + 16 > MAX_EXACT[shape.bytes_per_elem]:
        raise ValueError(f"{shape.experts} experts exceed exact float16 payloads; use bytes_per_elem=4")


def check_buffers(shape: Shape, spare_slots: int, expert_bytes: int) -> None:
    """What a measured step allocates, held to MAX_RUN_SIZE_BYTES a buffer (each key is capped alone,
    the buffers are their products), and what its record reports, held to what a record may hold."""
    cap = format_size(MAX_RUN_SIZE_BYTES)
    # A rank's receive buffer has a row for every pair every rank could send it.
    rows_bytes = shape.tokens_per_rank * shape.top_k * shape.world * shape.token_bytes
    if rows_bytes > MAX_RUN_SIZE_BYTES:
        raise ValueError(f"tokens={shape.tokens_per_rank} x top_k={shape.top_k} x world={shape.world} x "
                         f"hidden={shape.hidden} x bytes_per_elem={shape.bytes_per_elem} = "
                         f"{format_size(rows_bytes)} of receive rows exceeds {cap} (MAX_RUN_SIZE_BYTES)")
    slots = shape.experts_per_rank + spare_slots
    weight_bytes = slots * max(shape.token_bytes, expert_bytes // shape.bytes_per_elem * shape.bytes_per_elem)
    if weight_bytes > MAX_RUN_SIZE_BYTES:
        raise ValueError(f"experts_per_rank={shape.experts_per_rank} + spare_slots={spare_slots} slots of "
                         f"expert weights = {format_size(weight_bytes)} exceeds {cap} (MAX_RUN_SIZE_BYTES)")
    placement_values = shape.world * shape.world * slots
    if placement_values > MAX_PLACEMENT_VALUES:
        raise ValueError(f"experts_per_rank={shape.experts_per_rank} + spare_slots={spare_slots} slots at "
                         f"world={shape.world}: the ranks' placements ({placement_values} values) exceed the "
                         f"{MAX_PLACEMENT_VALUES} a record holds (MAX_PLACEMENT_VALUES)")


def mitigation_label(r) -> str:
    """A record's (or case's) mitigation in a few characters: replicate/aware+1, adaptive/100ms ..."""
    p = r.params
    text = p.get("mitigation", Mitigation.kind)
    if text == "replicate":
        text += f"/{p['routing']}+{p['spare_slots']}"
    elif text == "adaptive":
        text += f"/{p['window_steps']}st" if p.get("window_steps") else f"/{p['window_ms']:g}ms"
    elif text == "capacity":
        text += f"/{p['capacity_factor']:g}/{p['overflow']}"
    return text


def workload_label(r) -> str:
    """A record's (or case's) workload in a few characters: uniform, hot17~40 ..."""
    p = r.params
    text = p["workload"] if p["workload"] == "uniform" else f"{p['workload']}{p['skew']:g}"
    return text + (f"~{p['drift_steps']}" if p.get("drift_steps") else "")
