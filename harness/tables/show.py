"""``critpath show``: the tables of a stored run again, from its records, or several runs side by
side with a ratio column each (harness.tables.family builds the rows, harness.tables.terminal
prints them)."""
from __future__ import annotations

import sys

from harness.core.contention import tally
from harness.core.escape import for_terminal
from harness.core.options import EXIT_FAILED, EXIT_OK, add_label_option, check_labels, path_option
from harness.core.store import (
    distinct_run_ids,
    distinct_runs,
    load_records,
    run_documents,
    run_of,
)
from harness.tables.frame import records_of
from harness.tables.terminal import print_comparison, print_tables


def register(sub) -> None:
    p_show = sub.add_parser("show", help="print the tables of a stored run, or of several side by side")
    p_show.add_argument("run_dirs", type=path_option, nargs="+", metavar="RUN_DIR",
                        help="one run: its tables; several: one table per family, a column per run and a ratio column")
    add_label_option(p_show)
    p_show.add_argument("--skip-invalid", action="store_true", help="show the valid records and list the invalid lines")
    p_show.set_defaults(func=cmd_show)


def cmd_show(args) -> int:
    check_labels(args.label, len(args.run_dirs))
    loaded, skipped_of = [], []
    for i, run_dir in enumerate(distinct_runs(args.run_dirs)):
        skipped: list = []
        records = load_records(run_dir, skip_invalid=args.skip_invalid, skipped=skipped)
        # a run's results file is judged as its directory; one given alone reads both as {}
        loaded.append(run_of(run_dir, records, *run_documents(run_dir), label=args.label[i] if args.label else None))
        skipped_of.append(skipped)
    distinct_run_ids(loaded)  # a copy of a run shown beside it is refused, before anything is shown
    frames, whole = [records_of([run]) for run in loaded], True
    for run, skipped in zip(loaded, skipped_of):
        if len(loaded) == 1:
            print_tables(run.records, frame=frames[0])
        for item in skipped:
            print(for_terminal(f"skipped {run.path}: line {item.line}: {item.reason}"), file=sys.stderr)
        incomplete = run.incomplete
        if incomplete:  # a killed or empty run is not shown as a whole one
            print(for_terminal(f"{run.path}: {incomplete}"), file=sys.stderr)
        whole = whole and all(r.ok for r in run.records) and not skipped and not incomplete
    if len(loaded) > 1:
        print_comparison(frames, [run.label for run in loaded], records=[run.records for run in loaded])
    for run in loaded:  # each run's count of contended records, said after its tables
        print(for_terminal(f"{run.label}: {tally(r.contention_verdict for r in run.records)}"))
    return EXIT_OK if whole else EXIT_FAILED
