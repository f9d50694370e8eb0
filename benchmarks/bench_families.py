"""asv benchmarks generated from the critpath registry: one class per default family, one
parameter value per quick-profile case ID, so a new family or case is tracked without editing this
file. One real ``critpath run`` of every tracked family at world 2 (the classes' shared
``setup_cache``) feeds every class; ``track_*`` methods read its records.

Record a commit's results with the environment you are in:
    asv run --environment existing:same --set-commit-hash $(git rev-parse HEAD)
    asv publish && asv preview        # HTML in .asv/html
"""
from __future__ import annotations

import math
import sys
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


TRACKED = tuple(f.name for f in registry.FAMILIES.values() if f.default or f.name == "selftest")


def _run_families() -> dict[str, dict[str, float]]:
    """Every tracked family in one critpath run (one process per rank, not one per parameter).

    asv keys a setup_cache by its function's source line, and every class below is made by one
    factory, so they all share this one cache: it must therefore hold every family's figures (it
    once held only the first family's, and the others read NaN). A case that failed is left out,
    and its reason printed, so asv shows NaN for it with the reason in its log."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        run(RunOptions(families=TRACKED, world=WORLD, backend="gloo", out=out))
        figures = {}
        for record in load_records(out):
            summary = record.summary
            if not record.ok or summary is None:
                why = record.error.message.splitlines()[0] if record.error and record.error.message else record.label
                print(f"critpath: {record.case_id}: {record.label}: {why}", file=sys.stderr)
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
            return _run_families()

        def track_p50_us(self, cache, case_id):
            return _figure(cache, case_id, "p50_us")

        track_p50_us.unit = sample_parts("p50_us")[1]

        def track_p99_us(self, cache, case_id):
            return _figure(cache, case_id, "p99_us")

        track_p99_us.unit = sample_parts("p99_us")[1]

    busbw = family.figure("busbw_gbps")
    if busbw is not None:  # nccl-tests' headline figure, for the families that declare it

        def track_busbw_gbps(self, cache, case_id):
            return _figure(cache, case_id, "busbw_gbps")

        track_busbw_gbps.unit = busbw.unit
        Suite.track_busbw_gbps = track_busbw_gbps

    Suite.__name__ = Suite.__qualname__ = "".join(part.title() for part in family.name.split("_"))
    return Suite


for _name in TRACKED:
    _suite = _make_suite(registry.get(_name))
    globals()[_suite.__name__] = _suite
