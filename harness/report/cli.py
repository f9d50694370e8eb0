"""``critpath report RUN_DIR [RUN_DIR ...]``: markdown + self-contained HTML from stored records.

One run writes ``report.md``, ``report.html`` and ``plots/`` into the run directory (or --out);
several runs give a comparison with the plots overlaid (--out, default reports/compare-<labels>).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Optional, Sequence

from harness.claims import baselines
from harness.core import atomic, registry
from harness.core.claim import claim_dir
from harness.core.inputfile import declare_inputs
from harness.core.escape import for_terminal
from harness.core.options import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_label_option, check_labels, path_option,
                                  print_error)
from harness.core.store import (
    distinct_run_ids,
    distinct_runs,
    load_run,
    run_dir_of,
    run_inputs,
)
from harness.document.blocks import (
    PLOTS_DIR,
    Block,
    Heading,
    Image,
    to_html,
    to_markdown,
)
from harness.history.view import HistoryError, history_blocks, is_history_plot
from harness.report.build import Report, build


def register(sub) -> None:
    p = sub.add_parser("report", help="markdown + HTML report of one run, or a comparison of several")
    p.add_argument("run_dirs", type=path_option, nargs="*", metavar="RUN_DIR",
                   help="stored runs (none: a history report of --asv-results alone)")
    p.add_argument("--out", type=path_option,
                   help="output directory (default: the run directory; for several runs reports/compare-...)")
    add_label_option(p)
    p.add_argument("--baselines", type=path_option, default=baselines.DEFAULT_DIR, help="directory of baselines YAML")
    p.add_argument("--asv-results", type=path_option, metavar="DIR",
                   help="asv results directory (.asv/results) for history plots")
    p.set_defaults(func=cmd_report)


def write_report(report: Report, out: Path, beside: Optional[Mapping[Path, bytes]] = None) -> tuple[Path, Path]:
    """The report's files written into ``out`` as one set, with ``beside`` (files of the command the
    report belongs to, such as acceptance.json) in that same set."""
    with claim_dir(out, "report"):
        return _write_report(report, out, beside or {})


def report_targets(report: Report, out: Path) -> list[Path]:
    """Every file ``write_report`` writes into ``out``: report.md, report.html and the plots."""
    images = [b for b in report.blocks if isinstance(b, Image)]
    return [out / "report.md", out / "report.html", *(out / PLOTS_DIR / f"{image.name}.png" for image in images)]


def _write_report(report: Report, out: Path, beside: Mapping[Path, bytes]) -> tuple[Path, Path]:
    # One set (atomic.write_set): all checked before the first is written (a refused plot, a planted
    # ``plots`` link, leaves no report.md beside it), and none renamed until all are written (a full
    # disk leaves the previous report whole, never its markdown new and its HTML old).
    targets = report_targets(report, out)
    images = [b for b in report.blocks if isinstance(b, Image)]
    md, html = targets[:2]
    files = {md: to_markdown(report.blocks).encode("utf-8"), html: to_html(report.blocks, report.title).encode("utf-8"),
             **{path: image.png for image, path in zip(images, targets[2:])}, **beside}
    atomic.check_targets(files)
    plots = out / PLOTS_DIR
    made = bool(images) and not os.path.lexists(plots)
    if images:
        plots.mkdir(exist_ok=True)
    try:
        atomic.write_set(files)
    except BaseException:
        if made:
            _rmdir_if_empty(plots)
        raise
    _remove_old_plots(plots, {path.name for path in targets[2:]})
    return md, html


def _remove_old_plots(plots: Path, kept: set[str]) -> None:
    """Remove the plots an earlier report left in ``plots`` that this one did not write: a report
    in the same --out showed them beside the new ones. Only files named as critpath names a plot
    (a family's declared plot, a history plot) go; anything else there is not critpath's."""
    if os.path.islink(plots) or not plots.is_dir():
        return
    ours = {plot.name for family in registry.FAMILIES.values() for plot in family.plots}
    for entry in os.scandir(plots):
        stem, suffix = os.path.splitext(entry.name)
        if (suffix == ".png" and entry.name not in kept and entry.is_file(follow_symlinks=False)
                and (stem in ours or is_history_plot(stem))):
            os.unlink(entry.path)


def _rmdir_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        pass  # it holds something: kept


def make_report(run_dirs: Sequence[Path], labels: Sequence[str] = (), baselines_dir: Path = baselines.DEFAULT_DIR,
                asv_results: Path | None = None, families=None) -> Report:
    check_labels(labels, len(run_dirs))
    runs = distinct_run_ids([load_run(p, labels[i] if labels else None) for i, p in enumerate(distinct_runs(run_dirs))])
    claims = baselines.load_dir(baselines_dir)
    extra: list[Block] = []
    if asv_results is not None:
        extra = history_blocks(asv_results, claims)
        if not runs:
            title = f"critpath history: {asv_results}"
            return Report(title, [Heading(1, title), *extra])
    return build(runs, claims, extra, families)


def cmd_report(args) -> int:
    if not args.run_dirs and args.asv_results is None:
        print("critpath report: error: give RUN_DIR (one or more), or --asv-results DIR for history alone",
              file=sys.stderr)
        return EXIT_USAGE
    if not args.run_dirs and args.out is None:
        print("critpath report: error: a history report needs --out DIR", file=sys.stderr)
        return EXIT_USAGE
    declare_inputs(run_inputs(args.run_dirs))  # known before they are read: no output may replace one
    try:
        report = make_report(args.run_dirs, args.label, args.baselines, args.asv_results)
    except (baselines.BaselineError, HistoryError) as exc:
        print_error("report", exc)
        return EXIT_USAGE
    if args.out:
        out = args.out
    elif len(args.run_dirs) == 1:  # beside the run, also when named by its results file (a file is no --out)
        out = run_dir_of(args.run_dirs[0])
    else:
        out = Path("reports") / atomic.fit_name("compare-" + "-".join(p.name for p in args.run_dirs), 120)
    md, html = write_report(report, out)
    print(f"{md}\n{html}")
    for note in report.incomplete:  # as `critpath show` says it: a script reading the exit is told too
        print(for_terminal(f"critpath report: {note}: the report says INCOMPLETE RUN at its top"), file=sys.stderr)
    return EXIT_FAILED if report.incomplete else EXIT_OK
