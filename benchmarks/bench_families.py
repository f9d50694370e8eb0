"""asv benchmarks generated from the critpath registry: one class per default family, one
parameter value per quick-profile case ID, so a new family or case is tracked without editing this
file. Each class runs its family once (``setup_cache``, a real ``critpath run`` at world 2) and its
``track_*`` methods read the stored records.

Record a commit's results with the environment you are in:
    asv run --environment existing:same --set-commit-hash $(git rev-parse HEAD)
    asv publish && asv preview        # HTML in .asv/html
"""
from __future__ import annotations

import math
import tempfile
from pathlib import Path

from harness import registry
from harness.family import GridOptions
from harness.figures import sample_parts
from harness.runner import RunOptions, run
from harness.store import load_records

WORLD = 2
GRID = GridOptions(profile="quick", world=WORLD, backend="gloo")
# Bump when what a tracked figure means changes; asv keeps history while this stays the same.
VERSION = "critpath-families-1"


def _run_family(family_name: str) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        run(RunOptions(families=(family_name,), world=WORLD, backend="gloo", out=out))
        figures = {}
        for record in load_records(out):
            summary = record.summary
            if not record.ok or summary is None:
                continue
            figures[record.case_id] = {"p50_us": summary.p50_ns / 1e3, "p99_us": summary.p99_ns / 1e3, **record.metrics}
        return figures


def _figure(cache: dict, case_id: str, name: str) -> float:
    # A case that failed is missing, not zero: asv shows NaN as a failed measurement.
    return cache.get(case_id, {}).get(name, math.nan)


def _make_suite(family):
    case_ids = [case.id for case in family.grid(GRID)]

    class Suite:
        params = [case_ids]
        param_names = ["case"]
        timeout = 900
        # asv compares only results of one version: a family's history restarts when, and only
        # when, its definition version changes (or this file's VERSION does).
        version = f"{VERSION}-{family.name}-v{family.version}"

        def setup_cache(self):
            return _run_family(family.name)

        def track_p50_us(self, cache, case_id):
            return _figure(cache, case_id, "p50_us")

        track_p50_us.unit = sample_parts("p50_us")[1]

        def track_p99_us(self, cache, case_id):
            return _figure(cache, case_id, "p99_us")

        track_p99_us.unit = sample_parts("p99_us")[1]

    Suite.__name__ = Suite.__qualname__ = "".join(part.title() for part in family.name.split("_"))
    return Suite


for _family in registry.FAMILIES.values():
    if _family.default or _family.name == "selftest":
        globals()[_make_suite(_family).__name__] = _make_suite(_family)


class AllreduceBandwidth:
    """busbw as nccl-tests defines it, per quick-profile case."""

    params = [[c.id for c in registry.get("allreduce").grid(GRID)]]
    param_names = ["case"]
    timeout = 900
    version = f"{VERSION}-allreduce-v{registry.get('allreduce').version}"

    def setup_cache(self):
        return _run_family("allreduce")

    def track_busbw_gbps(self, cache, case_id):
        return _figure(cache, case_id, "busbw_gbps")

    track_busbw_gbps.unit = registry.get("allreduce").figure("busbw_gbps").unit  # as the family declares it
