"""The pipeline configurations critpath measures, each named, and the rule for a distorted run.

The family builds its grid from these; ``critpath pipeline-compare`` reads them back to set each
comparison beside the article figure it is compared with.
"""
from __future__ import annotations

from dataclasses import dataclass

STRETCH_WARN = 1.15  # compute ran 15 % over its configured time: the machine was not quiet


@dataclass(frozen=True)
class Scenario:
    """A named configuration; ``claim`` names the figure in claims.md it is compared with."""

    name: str
    stages: int
    compute_us: int
    rtt_us: int
    schedules: tuple[str, ...]
    claim: str = ""
    claim_efficiency: float = 0.0  # sync throughput / ideal the article reports


SCENARIOS = {
    s.name: s
    for s in (
        # 4 stages, 3 ms compute, 0.4 ms round trip, a barrier each step: "throughput fell 30 %".
        Scenario("a0_pipeline_barrier", 4, 3000, 400, ("sync", "async"), "A0.pipeline_barrier", 0.70),
        # 5 ms compute + a 1 ms synchronous message each step: "83 % of ideal throughput".
        Scenario("a0_sync_tax", 2, 5000, 1000, ("sync", "async"), "A0.sync_tax", 0.83),
        Scenario("schedules", 4, 500, 0, ("gpipe", "1f1b")),
    )
}
