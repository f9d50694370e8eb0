"""``critpath export RUN_DIR... --format csv|json|parquet --out FILE``: stored runs as one table.

The table is ``harness.frame`` (or, with ``--samples``, ``harness.samples_frame``). Every record is
written: one that fails verification stops the export with its file and line; an incomplete run's
rows carry ``incomplete`` and its reason, and a run with no records is named on stderr. JSON is
pandas' table orient (a schema with each column's type, then the rows), plus the figures'
declarations under ``figures``; parquet keeps them in the frame's attrs.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from harness.core import atomic
from harness.core.escape import for_csv, for_terminal
from harness.core.options import UsageError, path_option, print_error
from harness.core.store import run_inputs
from harness.tables.frame import load_runs, records_of, samples_of

FORMATS = ("csv", "json", "parquet")
PARQUET_HINT = "parquet needs pyarrow: pip install pyarrow (or export --format csv or json)"


class ExportUnavailable(RuntimeError):
    """A format whose library is not installed; the message says how to get it."""


def require(fmt: str) -> None:
    """Refuse a format whose library is missing before any run is read."""
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:  # pandas' parquet engine
        raise ExportUnavailable(PARQUET_HINT)


def check_suffix(fmt: str, out: Path) -> None:
    """Refuse an --out whose suffix names another format (``--format json --out x.csv``): a reader
    goes by the name. A suffix that names no format (``.txt``, none) is the user's to choose."""
    named = out.suffix.lower().lstrip(".")
    if named in FORMATS and named != fmt:
        raise UsageError(f"--out {out} names {named}, but --format is {fmt}; name it {out.with_suffix('.' + fmt)} "
                         f"or give --format {named}")


def write(df, fmt: str, out: Path) -> None:
    """``df`` as ``fmt`` into ``out``, atomically: an export that fails leaves the old file whole."""
    out = Path(out)
    if fmt == "csv":
        text = df.select_dtypes(include=["string", "object"]).columns
        df = df.assign(**{c: df[c].map(lambda v: for_csv(v) if isinstance(v, str) else v) for c in text})
        with atomic.atomic_file(out, "w") as f:
            df.to_csv(f, index=False)
    elif fmt == "json":
        doc = json.loads(df.to_json(orient="table", index=False))
        doc["figures"] = df.attrs.get("figures", {})
        doc["runs"] = df.attrs.get("runs", [])
        atomic.write_json(out, doc, indent=1, sort_keys=False)
    elif fmt == "parquet":
        require(fmt)
        with atomic.atomic_file(out) as f:
            df.to_parquet(f, index=False)
    else:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")


def register(sub) -> None:
    p = sub.add_parser("export", help="stored runs as one table: csv, json or parquet")
    p.add_argument("run_dirs", nargs="+", type=path_option, metavar="RUN_DIR")
    p.add_argument("--format", dest="fmt", choices=FORMATS, required=True)
    p.add_argument("--out", type=path_option, required=True, help="file to write")
    p.add_argument("--samples", action="store_true",
                   help="the raw samples, one row per iteration (run_id, case_id, iteration, sample_ns)")
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    try:
        require(args.fmt)
    except ExportUnavailable as exc:
        print_error("export", exc)
        return 2
    check_suffix(args.fmt, args.out)
    atomic.refuse_inputs(args.out, run_inputs(args.run_dirs))
    runs = load_runs(args.run_dirs)  # an invalid record raises here, naming file and line
    df = samples_of(runs) if args.samples else records_of(runs)
    write(df, args.fmt, args.out)
    what = "samples" if args.samples else "records"
    print(f"wrote {len(df)} {what} of {len(runs)} run(s) to {args.out} ({args.fmt})")
    for run in runs:
        if not run.records:  # no row can carry it: say so here
            print(for_terminal(f"{run.path}: no records{'; ' + run.incomplete if run.incomplete else ''}"),
                  file=sys.stderr)
        elif run.incomplete:
            print(for_terminal(f"{run.path}: {run.incomplete} (its rows are marked incomplete)"), file=sys.stderr)
    return 0
