"""Stored runs as pandas data frames, for notebooks and export (``harness.frame``, ``critpath export``).

One row per record, typed columns: the case and its params (``param.<name>``), the outcome, the
summary of its raw samples in microseconds, each declared figure under its own name (its unit in the
name: ``busbw_gbps``), and the run it came from (run id, directory, commit, host, whether the run is
incomplete). What each figure means is in ``frame.attrs["figures"]`` (unit, better, source,
definition, from the families' declarations); the row's ``figures_not_measured`` names its modelled
or simulated figures, so a CSV that loses ``attrs`` still says so; ``figures_unverified`` names the
figures its record holds that could not be recomputed when it was read (``Record.unverifiable``),
``unverified_reason`` says why: no measurement, whatever its column shows. ``check_wrong`` / ``check_checked``
hold the correctness count. ``contended`` is the contention rule's verdict on the record's timed
loop (NA: no evidence to judge), ``contention_evidence`` the terms that fired, and
``contention_pressure_share`` / ``_pressure_source`` / ``_nivcsw`` / ``_tick_share`` /
``_foreign_cpu_share`` the figures it judged (harness.core.contention). A frame that holds an nccl-tests import also has nccl-tests' own columns
(``nccltests.count``, ``.type``, ``.redop``, ``.root``, and per side ``nccltests.in_place.time_us``,
``.time_printed``, ``.algbw_gbps``, ``.busbw_gbps``, ``.wrong``, ``.max_error``; NA in other rows).
The report's tables and ``critpath show`` are built from this frame (harness.tables.family).

pandas is imported inside the functions: ``import harness`` and the commands that measure nothing
stay light (tests/test_project.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union

import numpy as np

from harness.core import registry
from harness.core.declarations import declared
from harness.core.escape import for_file
from harness.core.figures import is_mean_only
from harness.core.store import LoadedRun, distinct_run_ids, distinct_runs, load_run, run_of

PathLike = Union[str, Path]
STATS_US = ("min", "p50", "p90", "p99", "p999", "max", "mean")
PARAM_PREFIX = "param."
RUN_COLUMNS = ("run_id", "run_dir", "commit", "commit_dirty", "host", "incomplete", "incomplete_reason")
CASE_COLUMNS = ("case_id", "family", "family_version", "timer", "reduction", "backend", "world", "status", "label",
                "ok", "error", "flags")
SUMMARY_COLUMNS = ("n_samples", "mean_only") + tuple(f"{s}_us" for s in STATS_US)
CHECK_COLUMNS = ("check_wrong", "check_checked")  # the correctness count after timing, as nccl-tests' #wrong
# The contention rule's verdict on the record's timed loop (harness.core.contention): true, false, or
# NA where the record holds no evidence to judge; the evidence says which terms fired, or why none could.
CONTENDED, CONTENTION_EVIDENCE = "contended", "contention_evidence"
CONTENTION_COLUMNS = (CONTENDED, CONTENTION_EVIDENCE, "contention_pressure_share", "contention_pressure_source",
                      "contention_nivcsw", "contention_tick_share", "contention_foreign_cpu_share")
NOTE_COLUMN = "figures_not_measured"
# The figures of a row that are no measurement (harness.core.verify), and why: beside the figures,
# so that no export presents them like the others.
UNVERIFIED_COLUMN, UNVERIFIED_REASON = "figures_unverified", "unverified_reason"
# An nccl-tests import keeps the columns nccl-tests printed, both sides: present only when a run
# holds an import, so the frame of a critpath run carries no empty nccl-tests columns.
NCCL_PREFIX = "nccltests."
NCCL_SIDES = ("out_of_place", "in_place")
NCCL_SIDE_COLUMNS = {"time_us": "Float64", "time_printed": "string", "algbw_gbps": "Float64", "busbw_gbps": "Float64",
                     "wrong": "Int64", "max_error": "Float64"}
NCCL_COLUMNS = {
    **{NCCL_PREFIX + k: t for k, t in (("file", "string"), ("format", "string"), ("collective", "string"), ("count", "Int64"),
                                       ("type", "string"), ("redop", "string"), ("root", "Int64"),
                                       ("iters", "Int64"), ("check", "string"))},
    **{f"{NCCL_PREFIX}{side}.{k}": t for side in NCCL_SIDES for k, t in NCCL_SIDE_COLUMNS.items()},
}


def _run_columns(run: LoadedRun) -> dict:
    git = run.fingerprint.get("git") or {}
    incomplete = run.incomplete
    return {"run_id": run.run_id, "run_dir": str(run.path), "commit": git.get("commit"),
            "commit_dirty": git.get("dirty"), "host": run.fingerprint.get("host"),
            "incomplete": bool(incomplete), "incomplete_reason": incomplete or None}


def _paths(run_dirs: Iterable[Any]) -> list[Path]:
    """``frame("a", "b")`` and ``frame(["a", "b"])`` alike."""
    out: list[Path] = []
    for item in run_dirs:
        if isinstance(item, (str, Path)):
            out.append(Path(item))
        else:
            out.extend(_paths(item))
    if not out:
        raise ValueError("give at least one run directory")
    return out


def load_runs(*run_dirs: Any) -> list[LoadedRun]:
    return distinct_run_ids([load_run(p) for p in distinct_runs(_paths(run_dirs))])


def figure_declarations(runs: list[LoadedRun]) -> dict[str, dict]:
    """Figure name -> its declaration (unit, better, source, definition) and the families that
    declare it. A figure of a family critpath does not know (an imported nccl-tests collective other
    than all_reduce) is listed in ``undeclared_in`` rather than given a borrowed declaration."""
    families: dict[str, set] = {}
    for run in runs:
        for record in run.records:
            for name in record.metrics:
                families.setdefault(name, set()).add(record.family)
    result = {}
    for name, fams in sorted(families.items()):
        figs = {fam: declared(fam, name) for fam in sorted(fams)}
        undeclared = [fam for fam, f in figs.items() if f is None]
        figs = {fam: f for fam, f in figs.items() if f is not None}
        kinds = {(f.unit, f.better, f.source) for f in figs.values()}
        # Two families declaring one name differently are said to, not resolved by picking one.
        unit, better, source = kinds.pop() if len(kinds) == 1 else (None, None, "conflicting" if kinds else "undeclared")
        definitions = sorted({f.definition for f in figs.values()})
        result[name] = {
            "unit": unit, "better": better, "source": source,
            "definition": definitions[0] if len(definitions) == 1 else
            "; ".join(f"{fam}: {f.definition}" for fam, f in figs.items()),
            "families": sorted(figs), "undeclared_in": undeclared,
        }
    return result


def _source(family: str, name: str) -> str:
    figure = declared(family, name)
    return figure.source if figure is not None else "undeclared"


def _summary_columns(record) -> dict:
    row: dict = {"n_samples": len(record.samples_ns), "mean_only": is_mean_only(record)}
    summary = record.summary
    for stat in STATS_US:
        # An import of nccl-tests' averaged time holds one number: its mean, never a percentile.
        keep = summary is not None and (stat == "mean" or not row["mean_only"])
        row[f"{stat}_us"] = summary.us(stat) if keep else float("nan")
    return row


def _nccl_columns(record) -> dict:
    """The columns nccl-tests printed for this row (``extra.imported``); {} for a measured record."""
    block = record.extra.get("imported") if isinstance(record.extra, Mapping) else None
    if not isinstance(block, Mapping) or block.get("source") != "nccl-tests":
        return {}
    row = {NCCL_PREFIX + k: block.get(k) for k in ("file", "format", "collective", "count", "type", "redop", "root", "iters")}
    # nccl-tests before 2.13 printed an ``error`` column (the largest deviation) where later ones count #wrong
    row[NCCL_PREFIX + "check"] = "error" if any("max_error" in (block.get(s) or {}) for s in NCCL_SIDES) else "#wrong"
    for side in NCCL_SIDES:
        figures = block.get(side) or {}
        row.update({f"{NCCL_PREFIX}{side}.{k}": figures.get(k) for k in NCCL_SIDE_COLUMNS})
    return row


def _flags(record) -> Optional[str]:
    """Why the family says a record's figures are distorted (oversubscribed cores), None when clean."""
    family = registry.FAMILIES.get(record.family)
    return (family.flags(record) or None) if family is not None and family.flags is not None else None


def _contention_columns(record) -> dict:
    verdict = record.contention_verdict
    return dict(zip(CONTENTION_COLUMNS, (verdict.contended, verdict.evidence, verdict.pressure_share_max,
                                         verdict.pressure_source, verdict.nivcsw_total, verdict.tick_share,
                                         verdict.foreign_cpu_share)))


def _record_row(run: LoadedRun, run_columns: dict, record) -> dict:
    error = f"{record.error.kind}: {record.error.message}" if record.error else None
    row = {**run_columns, "case_id": record.case_id, "family": record.family,
           "family_version": record.family_version, "backend": record.backend, "world": record.world,
           "timer": record.timer or None, "reduction": record.reduction or None,  # "" for a case that never timed
           "status": record.status, "label": record.label, "ok": record.ok, "error": error,
           "flags": _flags(record), **_summary_columns(record),
           "check_wrong": record.check.wrong if record.check else None,
           "check_checked": record.check.checked if record.check else None,
           **_contention_columns(record), **_nccl_columns(record)}
    for name, value in record.params.items():
        row[PARAM_PREFIX + name] = value
    clash = set(record.metrics) & set(row)
    if clash:
        raise ValueError(f"{run.path}: {record.case_id}: figure(s) {sorted(clash)} clash with frame columns")
    row.update({name: float(value) for name, value in record.metrics.items()})
    sources = {name: _source(record.family, name) for name in sorted(record.metrics)}
    row[NOTE_COLUMN] = ",".join(f"{name}={source}" for name, source in sources.items() if source != "measured") or None
    row[UNVERIFIED_COLUMN] = ",".join(sorted(record.unverifiable)) or None
    row[UNVERIFIED_REASON] = "; ".join(sorted(set(record.unverifiable.values()))) or None
    return row


def _param_dtype(values: list) -> str:
    """The nullable dtype a param column's values share; object when they mix kinds."""
    present = [v for v in values if v is not None]
    kinds = {bool if isinstance(v, bool) else int if isinstance(v, int) else float if isinstance(v, float)
             else str if isinstance(v, str) else object for v in present}
    if kinds == {bool}:
        return "boolean"
    if kinds == {int}:
        return "Int64"
    if kinds and kinds <= {int, float}:
        return "Float64"
    if kinds == {str}:
        return "string"
    return "object"


def frame(*run_dirs: Any, samples: bool = False):
    """The records of ``run_dirs`` as one DataFrame, one row per record (``samples=True``: the raw
    samples instead, as ``samples_frame`` gives them). Records that fail verification raise
    ``harness.core.store.ResultsFileError`` naming file and line; none is skipped."""
    runs = load_runs(*run_dirs)
    return samples_of(runs) if samples else records_of(runs)


def frame_of(records, run_dir: PathLike = ".", meta: dict | None = None, fingerprint: dict | None = None):
    """The records frame of one run's records already loaded (a run just measured, shown with
    --skip-invalid, or a run the report has loaded), without reading the run directory again."""
    return records_of([run_of(run_dir, records, meta, fingerprint)])


def records_of(runs: list[LoadedRun]):
    """``frame`` of runs already loaded."""
    import pandas as pd  # 0.4 s: paid where a frame is built, not by every command that imports tables

    figures = figure_declarations(runs)
    # A record's text can hold what no UTF-8 file can (a lone surrogate in an error message): the
    # frame holds it visibly escaped, so every export and the report can write it.
    # A run's columns once per run, not per record: they are judged from all of its records, and
    # judging them again for each row made a run of 3,000 records take minutes to show.
    rows = [{k: for_file(v) if isinstance(v, str) else v for k, v in _record_row(run, columns, record).items()}
            for run, columns in ((run, _run_columns(run)) for run in runs) for record in run.records]
    params = sorted({k for row in rows for k in row if k.startswith(PARAM_PREFIX)})
    nccl = NCCL_COLUMNS if any(NCCL_PREFIX + "file" in row for row in rows) else {}
    columns = [*RUN_COLUMNS, *CASE_COLUMNS, *params, *SUMMARY_COLUMNS, *CHECK_COLUMNS, *CONTENTION_COLUMNS, *figures,
               *nccl, NOTE_COLUMN,
               UNVERIFIED_COLUMN, UNVERIFIED_REASON]
    df = pd.DataFrame(rows, columns=columns)
    dtypes = {"run_id": "string", "run_dir": "string", "commit": "string", "commit_dirty": "boolean",
              "host": "string", "incomplete": "bool", "incomplete_reason": "string", "case_id": "string",
              "family": "string", "family_version": "int64", "backend": "string", "world": "int64",
              "timer": "string", "reduction": "string", "status": "string", "label": "string", "ok": "bool",
              "error": "string", "flags": "string", "n_samples": "int64",
              "mean_only": "bool", NOTE_COLUMN: "string", UNVERIFIED_COLUMN: "string", UNVERIFIED_REASON: "string",
              "check_wrong": "Int64", "check_checked": "Int64",
              **dict(zip(CONTENTION_COLUMNS, ("boolean", "string", "Float64", "string", "Int64", "Float64", "Float64"),
                         strict=True)),
              **nccl,
              **{f"{s}_us": "float64" for s in STATS_US}, **{name: "float64" for name in figures},
              **{p: _param_dtype([row.get(p) for row in rows]) for p in params}}
    df = df.astype(dtypes)
    df.attrs["figures"] = SharedDict(figures)
    df.attrs["runs"] = SharedList({"run_id": r.run_id, "run_dir": str(r.path), "records": len(r.records),
                                   "incomplete": r.incomplete} for r in runs)
    return df


# pandas deep-copies a frame's ``attrs`` into every row, slice and column it derives from the frame
# (``__finalize__``): with the figure declarations there, that copying took half of a two-run
# report's build (7.2-7.7 s, now 3.7-4.1 s on a shared 2-core machine). They are written once,
# when the frame is built, and only read after, so every derived frame may share them.
class SharedDict(dict):
    """A dict that ``copy.deepcopy`` shares rather than copies."""

    def __deepcopy__(self, memo):
        return self


class SharedList(list):
    """A list that ``copy.deepcopy`` shares rather than copies."""

    def __deepcopy__(self, memo):
        return self


def samples_frame(*run_dirs: Any):
    """The raw samples of ``run_dirs`` as a long frame: run_id, case_id, iteration, sample_ns, and
    mean_only (an nccl-tests import's one number is its mean over iterations, not a sample)."""
    return samples_of(load_runs(*run_dirs))


def samples_of(runs: list[LoadedRun]):
    """``samples_frame`` of runs already loaded."""
    import pandas as pd  # 0.4 s: paid where a frame is built, not by every command that imports tables

    columns: dict[str, list] = {"run_id": [], "case_id": [], "iteration": [], "sample_ns": [], "mean_only": []}
    for run in runs:
        for record in run.records:
            n = len(record.samples_ns)
            columns["run_id"] += [run.run_id] * n
            columns["case_id"] += [record.case_id] * n
            columns["iteration"].append(np.arange(n, dtype=np.int64))
            columns["sample_ns"].append(np.asarray(record.samples_ns, dtype=np.int64))
            columns["mean_only"] += [is_mean_only(record)] * n
    return pd.DataFrame({
        "run_id": pd.array(columns["run_id"], dtype="string"),
        "case_id": pd.array(columns["case_id"], dtype="string"),
        "iteration": np.concatenate(columns["iteration"] or [np.array([], np.int64)]),
        "sample_ns": np.concatenate(columns["sample_ns"] or [np.array([], np.int64)]),
        "mean_only": np.array(columns["mean_only"], dtype=bool),
    })
