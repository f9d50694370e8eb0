"""``critpath list`` and ``critpath run``: the cases a grid holds, and running them into a run
directory (harness.run.runner)."""
from __future__ import annotations

import argparse
import sys

from harness.core import registry
from harness.core.family import BACKENDS, GRID_FLAGS, GridOptions
from harness.core.options import (EXIT_OK, at_least, comma_separated, given_flags, path_option, refuse_given, seconds,
                                  size_sweep)
from harness.core.records import MAX_SAMPLES
from harness.core.scale import MAX_WORLD
from harness.run.lifetime import stop_signals_unwind
from harness.run.limit import POOL_START_TIMEOUT_S
from harness.run.plan import MAX_LOCAL_WORLD, RUN_GRID_ONLY
from harness.run.runner import RunOptions, run


def register(sub) -> None:
    p_list = sub.add_parser("list", help="families and their case IDs")
    p_list.add_argument("--families", type=comma_separated, help="comma-separated family names")
    _grid_args(p_list)
    p_list.set_defaults(func=cmd_list)

    p_run = sub.add_parser("run", help="run cases and write a run directory")
    p_run.add_argument("--families", type=comma_separated, help="comma-separated family names (default: every default family)")
    p_run.add_argument("--case", dest="case_ids", action="append", default=[], metavar="ID",
                       help="run exactly this case ID (repeatable); overrides --families; the ID names its own "
                            "world and size, so --world and --sizes are refused with it")
    _grid_args(p_run)
    p_run.add_argument("--iters", type=at_least(1, MAX_SAMPLES),
                       help=f"timed iterations per case (default: calibrated by rank 0; at most {MAX_SAMPLES}, "
                            "what a record holds)")
    p_run.add_argument("--warmup", type=at_least(0, MAX_SAMPLES), help="warm-up iterations per case")
    p_run.add_argument("--timeout", type=seconds, default=60.0, metavar="SECONDS",
                       help="per-case limit from set-up to check (default 60); a pool of ranks' start has a "
                            f"limit of its own ({POOL_START_TIMEOUT_S:g} s)")
    p_run.add_argument("--out", type=path_option, help="run directory (default reports/<run-id>)")
    p_run.set_defaults(func=cmd_run)


def _grid_args(p: argparse.ArgumentParser) -> None:
    profile = p.add_mutually_exclusive_group()
    profile.add_argument("--quick", dest="profile", action="store_const", const="quick", help="quick profile (default)")
    profile.add_argument("--full", dest="profile", action="store_const", const="full", help="full profile")
    p.set_defaults(profile="quick")
    p.add_argument("--world", type=at_least(1, MAX_WORLD), help=f"ranks to spawn locally (default 2, at most {MAX_LOCAL_WORLD}; under torchrun: WORLD_SIZE)")
    p.add_argument("--backend", choices=BACKENDS, help="default: nccl when every rank has a GPU, else gloo")
    p.add_argument("--sizes", dest="sizes_bytes", type=size_sweep, metavar="SPEC", help="size sweep like nccl-tests: 8:64M:x2, 1K:8K:+1K or 8,1K,1M")


def cmd_list(args) -> int:
    grid = GridOptions(args.profile, args.world or 2, args.backend or "gloo", args.sizes_bytes)
    families = registry.select(args.families) if args.families else list(registry.FAMILIES.values())
    # Here --backend, too, shapes nothing but the grid: a grid that never reads it lists alike.
    given = [name for name in GRID_FLAGS if getattr(args, name) is not None]
    for family, cases in zip(families, registry.grids(families, grid, given).values()):
        marker = "" if family.default else "  (opt-in)"
        print(f"{family.name} v{family.version}: {family.description}{marker}")
        for case in cases:
            print(f"  {case.id}")
    return EXIT_OK


# The options that shape the grid --families selects, by their flags: a --case ID names its own
# world and size, so given with one they would change nothing. (--quick/--full also set the
# timing policy, and --backend the process group: both still act on a --case.)
GRID_ONLY = {name: GRID_FLAGS[name] for name in RUN_GRID_ONLY}


def _refuse_grid_with_cases(args) -> None:
    if args.case_ids:
        refuse_given(given_flags(args, GRID_ONLY), "shape the grid of --families, which --case replaces: a case "
                                                   "ID names its own world and size (world=..., size_bytes=...)")


def cmd_run(args) -> int:
    _refuse_grid_with_cases(args)
    opts = RunOptions(
        families=args.families, case_ids=tuple(args.case_ids), profile=args.profile, world=args.world,
        backend=args.backend, sizes_bytes=args.sizes_bytes, iters=args.iters, warmup=args.warmup,
        timeout_s=args.timeout, out=args.out, argv=tuple(sys.argv),
    )
    # SIGTERM (CI cancellation, a Slurm time limit) or SIGHUP unwinds as Ctrl-C does: run.json
    # says interrupted, the ranks and their servers are killed, temporary directories removed.
    with stop_signals_unwind():
        return run(opts)
