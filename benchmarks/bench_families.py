"""asv benchmarks generated from the critpath registry: one class per tracked family, one parameter
value per case ID, so a new family or case is tracked without editing this file. Each class tracks
every case's p50 and p99 and the family's headline figures (``Figure.headline``), in their declared
units.

Where the numbers come from:

- ``critpath history A..B`` (``harness/history/campaign.py``) runs each commit's own ``critpath run`` from a
  worktree of that commit and points this suite at the run directory with CRITPATH_ASV_RUN; the
  tracked cases are the cases of that run.
- Plain ``asv run``: one ``critpath run`` of every tracked family's quick cases at world 2, made by
  the classes' shared ``setup_cache``.

Either way it is one run of each family per commit, not one process per parameter.

    asv run --environment existing:same --set-commit-hash $(git rev-parse HEAD) --bench bench_families
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from asv_runner.benchmarks.mark import SkipNotImplemented

import harness

# The tree asv measures may be older than this suite (`critpath history A..B` over commits from
# before 0.2, whose modules stood side by side in harness/). Which layout it has is read off the
# tree itself, never tried and caught: an editable install serves a module a tree lacks from the
# checkout, so `import harness.core` would succeed in an old tree and measure the wrong code.
if (Path(harness.__file__).parent / "core" / "registry.py").is_file():
    from harness.core import registry
    from harness.core.family import SOURCE_MARKS, GridOptions
    from harness.core.figures import N_TOO_SMALL, supports
    from harness.core.store import load_records
    from harness.run.runner import RunOptions, run
else:  # 0.1: harness/registry.py, harness/runner.py ...
    from harness import registry
    from harness.family import SOURCE_MARKS, GridOptions
    from harness.runner import RunOptions, run
    from harness.store import load_records
    try:
        from harness.figures import N_TOO_SMALL, supports
    except ImportError:  # a tree from before the percentile rule (8a57e7c): its figures as it recorded them
        N_TOO_SMALL = "n too small"

        def supports(name: str, n: int) -> bool:
            return True

RUN_ENV = "CRITPATH_ASV_RUN"  # a finished critpath run directory to read instead of running
WORLD = 2
GRID = GridOptions(profile="quick", world=WORLD, backend="gloo")
SAMPLE_FIGURES = ("p50_us", "p99_us")  # tracked for every case, from its raw samples

TRACKED = tuple(f.name for f in registry.FAMILIES.values() if f.default or f.name == "selftest")


class CaseFailed(RuntimeError):
    """A case whose record failed: asv shows the benchmark as failed, with this reason under it."""


def _stored_run() -> Path | None:
    text = os.environ.get(RUN_ENV)
    return Path(text) if text else None


def _case_ids(family, stored: list) -> list[str]:
    """The stored run's cases of ``family``; its quick grid when the run has none of them, so every
    class is always discovered (asv's benchmarks.json lists what its pages show), and ``critpath
    history`` selects with ``--bench`` only the classes its run holds."""
    in_run = [r.case_id for r in stored if r.family == family.name]
    return in_run or [case.id for case in family.grid(GRID)]


def _figures_of(record) -> dict:
    """What a class reads off one record: its figures, or why it has none."""
    summary = record.summary
    if not record.ok or summary is None:
        message = record.error.message.strip().splitlines() if record.error and record.error.message else []
        return {"failed": f"{record.label}: {message[0] if message else 'no samples'}"}
    n = len(record.samples_ns)
    # A percentile the samples do not support is n/a in asv, as it is "n too small" in every table:
    # p99 of 50 steps is their second-slowest, not a tail.
    values = {name: getattr(summary, name.replace("_us", "_ns")) / 1e3 for name in SAMPLE_FIGURES}
    values.update(record.metrics)  # a headline figure that names a percentile (rtt_p99_us) obeys the rule too
    return {name: value if supports(name, n) else f"{N_TOO_SMALL} ({n} samples)" for name, value in values.items()}


def _collect() -> dict[str, dict]:
    """case ID -> figures, from the stored run or from one critpath run of every tracked family.

    asv keys a setup_cache by its function's source line and every class below is made by one
    factory, so they share this one cache: it holds every family's figures."""
    run_dir = _stored_run()
    if run_dir is not None:
        return {r.case_id: _figures_of(r) for r in load_records(run_dir)}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        run(RunOptions(families=TRACKED, world=WORLD, backend="gloo", out=out))
        return {r.case_id: _figures_of(r) for r in load_records(out)}


def _read(cache: dict, case_id: str, name: str) -> float:
    figures = cache.get(case_id)
    if figures is None:
        raise CaseFailed(f"critpath: {case_id}: no record (the run did not reach it)")
    if "failed" in figures:
        print(f"critpath: {case_id}: {figures['failed']}", file=sys.stderr)
        raise CaseFailed(f"{case_id}: {figures['failed']}")
    if name not in figures:
        raise SkipNotImplemented(f"{case_id} has no {name}")  # n/a: this case does not define it
    if isinstance(figures[name], str):
        raise SkipNotImplemented(f"{case_id}: {name}: {figures[name]}")
    return float(figures[name])


def _tracker(name: str, unit: str):
    def track(self, cache, case_id):
        return _read(cache, case_id, name)

    track.unit = unit
    track.__name__ = f"track_{name}"
    return track


def tracked_figures(family) -> dict[str, str]:
    """figure name -> asv unit: p50 and p99 of every case, then the family's headline figures; a
    modelled or simulated figure says so in its unit, which asv prints beside every value."""
    out = {name: "us" for name in SAMPLE_FIGURES}
    for figure in family.figures:
        # Trees from before headline declarations track p50 and p99 only.
        if getattr(figure, "headline", False):
            out[figure.name] = figure.unit + SOURCE_MARKS[figure.source]
    return out


def suite_version(family) -> str:
    """asv compares only results of one version: a family's history restarts when, and only when,
    its definition version changes."""
    return f"{family.name}-v{family.version}"


def _make_suite(family, stored: list):
    class Suite:
        params = [_case_ids(family, stored)]
        param_names = ["case"]
        timeout = 1800
        version = suite_version(family)

        def setup_cache(self):
            return _collect()

    for name, unit in tracked_figures(family).items():
        setattr(Suite, f"track_{name}", _tracker(name, unit))
    # The name critpath reads a row's family by (harness.history.asvfiles.suite_class, which this
    # suite cannot import from an older tree; a test holds the two alike).
    Suite.__name__ = Suite.__qualname__ = "".join(part.title() for part in family.name.split("_"))
    return Suite


_STORED = load_records(_stored_run()) if _stored_run() is not None else []
for _name in TRACKED:
    _suite = _make_suite(registry.get(_name), _STORED)
    globals()[_suite.__name__] = _suite
