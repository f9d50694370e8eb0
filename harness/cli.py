"""The ``critpath`` command line.

Exit codes: 0 every case ran and passed its check; 1 a case failed, timed out or gave a wrong
answer; 2 the command could not run (bad options, unreadable input).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from harness.core.options import UsageError, at_least, comma_separated, seconds, size_sweep


EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name


def build_parser(modules: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The parser with the built-in commands and those of ``modules`` (default: every module)."""
    parser = argparse.ArgumentParser(
        prog="critpath",
        description="Latency of collectives and control messages on the critical path of distributed LLM inference.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="families and their case IDs")
    p_list.add_argument("--families", type=comma_separated, help="comma-separated family names")
    _grid_args(p_list)

    p_run = sub.add_parser("run", help="run cases and write a run directory")
    p_run.add_argument("--families", type=comma_separated, help="comma-separated family names (default: every default family)")
    p_run.add_argument("--case", dest="case_ids", action="append", default=[], metavar="ID",
                       help="run exactly this case ID (repeatable); overrides --families")
    _grid_args(p_run)
    p_run.add_argument("--iters", type=at_least(1), help="timed iterations per case (default: calibrated by rank 0)")
    p_run.add_argument("--warmup", type=at_least(0), help="warm-up iterations per case")
    p_run.add_argument("--timeout", type=seconds, default=60.0, metavar="SECONDS",
                       help="per-case limit from set-up to check (default 60)")
    p_run.add_argument("--out", type=Path, help="run directory (default reports/<run-id>)")

    p_show = sub.add_parser("show", help="print the tables of a stored run, or of several side by side")
    p_show.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR",
                        help="one run: its tables; several: one table per family, a column per run and a ratio column")
    p_show.add_argument("--label", action="append", default=[], help="label per run, in order (default: the run ID)")
    p_show.add_argument("--skip-invalid", action="store_true", help="show the valid records and list the invalid lines")
    p_list.set_defaults(func=cmd_list)
    p_run.set_defaults(func=cmd_run)
    p_show.set_defaults(func=cmd_show)
    for module in COMMAND_MODULES if modules is None else modules:
        importlib.import_module(module).register(sub)
    return parser


def _grid_args(p: argparse.ArgumentParser) -> None:
    profile = p.add_mutually_exclusive_group()
    profile.add_argument("--quick", dest="profile", action="store_const", const="quick", help="quick profile (default)")
    profile.add_argument("--full", dest="profile", action="store_const", const="full", help="full profile")
    p.set_defaults(profile="quick")
    p.add_argument("--world", type=at_least(1), help="ranks to spawn locally (default 2; under torchrun: WORLD_SIZE)")
    p.add_argument("--backend", choices=("gloo", "nccl"), help="default: nccl when every rank has a GPU, else gloo")
    p.add_argument("--sizes", type=size_sweep, metavar="SPEC", help="size sweep like nccl-tests: 8:64M:x2, 1K:8K:+1K or 8,1K,1M")


def cmd_list(args) -> int:
    from harness.core import registry
    from harness.core.family import GridOptions

    grid = GridOptions(args.profile, args.world or 2, args.backend or "gloo", args.sizes)
    for family in registry.select(args.families) if args.families else registry.FAMILIES.values():
        marker = "" if family.default else "  (opt-in)"
        print(f"{family.name} v{family.version}: {family.description}{marker}")
        for case in family.grid(grid):
            print(f"  {case.id}")
    return EXIT_OK


def cmd_run(args) -> int:
    import signal

    from harness.run.lifetime import raise_on_sigterm
    from harness.run.runner import RunOptions, run

    opts = RunOptions(
        families=args.families, case_ids=tuple(args.case_ids), profile=args.profile, world=args.world,
        backend=args.backend, sizes_bytes=args.sizes, iters=args.iters, warmup=args.warmup,
        timeout_s=args.timeout, out=args.out, argv=tuple(sys.argv),
    )
    # SIGTERM (CI cancellation, a Slurm time limit) unwinds as Ctrl-C does: run.json says
    # interrupted, the ranks and their servers are killed, temporary directories removed.
    previous = signal.signal(signal.SIGTERM, raise_on_sigterm)
    try:
        return run(opts)
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_show(args) -> int:
    from harness.core.store import FINGERPRINT, RUN_META, ResultsFileError, load_records, read_json, run_of
    from harness.tables.frame import records_of
    from harness.tables.terminal import print_comparison, print_tables

    if args.label and len(args.label) != len(args.run_dirs):
        raise ResultsFileError(f"--label given {len(args.label)} times for {len(args.run_dirs)} runs")
    frames, labels, runs, whole = [], [], [], True
    for i, run_dir in enumerate(args.run_dirs):
        skipped: list = []
        records = load_records(run_dir, skip_invalid=args.skip_invalid, skipped=skipped)
        # a results file given alone has no run.json or fingerprint.json beside it: both read as {}
        run = run_of(run_dir, records, read_json(run_dir / RUN_META), read_json(run_dir / FINGERPRINT),
                     args.label[i] if args.label else None)
        frames.append(records_of([run]))
        runs.append(records)
        labels.append(run.label)
        if len(args.run_dirs) == 1:
            print_tables(records, frame=frames[0])
        for item in skipped:
            print(f"skipped {run_dir}: line {item.line}: {item.reason}", file=sys.stderr)
        incomplete = run.incomplete
        if incomplete:  # a killed or empty run is not shown as a whole one
            print(f"{run_dir}: {incomplete}", file=sys.stderr)
        whole = whole and all(r.ok for r in records) and not skipped and not incomplete
    if len(args.run_dirs) > 1:
        print_comparison(frames, labels, records=runs)
    return EXIT_OK if whole else EXIT_FAILED


# Other subcommands live with their concern; each module has register(subparsers), which adds
# its parser with set_defaults(func=handler); a handler takes the parsed args, returns the exit code.
# Keyed by the commands each module registers, so that one command imports only its own module:
# the report's matplotlib and the gate's scipy cost most of a second, which every `critpath run`
# and every gate repeat would otherwise pay (tests/test_project.py keeps this table true).
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "harness.model.command": ("model",),
    "harness.pipeline.compare": ("pipeline-compare",),
    "harness.moe_a2a.cli": ("moe-sim", "moe-report"),
    "harness.report.cli": ("report",),
    "harness.accept.command": ("accept",),
    "harness.diagnose.cli": ("diagnose",),
    "harness.nccltests.importer": ("import-nccl-tests",),
    "harness.claims.baselines": ("baselines",),
    "harness.gate.cli": ("gate", "compare"),
    "harness.gatepower.power": ("gate-power",),
    "harness.run.rounds": ("worker",),
    "harness.history.campaign": ("history",),
    "harness.tables.export": ("export",),
}


BUILTIN_COMMANDS = ("list", "run", "show")  # defined in this module, below


def _modules_for(argv: Sequence[str]) -> tuple[str, ...]:
    """The command modules a command line needs: the one that owns its command, or all of them
    (help, a typo, no command) so argparse can list every choice."""
    command = next((a for a in argv if not a.startswith("-")), None)
    owner = [m for m, commands in COMMAND_MODULES.items() if command in commands]
    if owner or command in BUILTIN_COMMANDS:
        return tuple(owner)
    return tuple(COMMAND_MODULES)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from harness.core.records import RecordError
    from harness.core.store import ResultsFileError

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(_modules_for(argv)).parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, ResultsFileError, RecordError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"critpath {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `critpath list | head`: the reader left; nothing to report
        # Before OSError, which it is. Point stdout at /dev/null so the interpreter's last flush
        # does not fail on the closed pipe again and print a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # a full disk or an unwritable --out: what was written stays valid
        print(f"critpath {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        from harness.run.lifetime import interrupt_signal

        signum = interrupt_signal(exc)
        print(f"critpath: interrupted by {signal_name(signum)}; records written so far are kept", file=sys.stderr)
        return 128 + signum
