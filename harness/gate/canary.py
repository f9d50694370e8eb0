"""``critpath canary``: an A/A gate recorded on a runner now and then, and a warning when the
runner moved.

Each call runs one A/A gate (one commit against itself, ``critpath gate --base REF --candidate
REF``) into a store of such gates, then asks of every case it measured whether its estimate
lies inside what the gates stored before it predict: the random-effects prediction interval of
Higgins, Thompson & Spiegelhalter (2009), centre and between-gate SD from those gates (the
DerSimonian-Laird estimate ``between.pooled`` gives), widened by the new gate's own
standard error, on Student's t with k - 2 degrees of freedom. A case outside it is a platform
shift (or a false alarm, at rate ``--alpha``): the code did not change, so the runner did. The
same store is what ``critpath gate --between-gates`` reads, so the canary's gates are also the
evidence for the term a real gate adds to its interval.
"""
from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import scipy  # scipy.stats loads on first use

from harness.core.options import (EXIT_OK, EXIT_USAGE, absolute, at_least, case_id_option, number_in, path_option,
                                  positive, print_error)
from harness.core.store import ResultsFileError
from harness.gate.between import GateEstimate, log_pct, per_gate, pooled
from harness.gate.config import ALPHA_RANGE, GateConfig
from harness.gate.schedule import MAX_BUDGET_S, MAX_PAIRS, Plan
from harness.gate.stats import Policy

# A series whose code never changes: the timing loop's own cost (selftest mode=noop).
DEFAULT_CASE = "selftest/fault_rank=0,mode=noop,world=1"
# Gates stored before the newest that its prediction needs: the interval's t has k - 2 degrees
# of freedom, and with 3 (t on 1) it is so wide that nothing is ever outside it.
MIN_BEFORE = 4
EXIT_SHIFT = 1


@dataclass(frozen=True)
class Prediction:
    """What the gates stored before the newest predict for it, and where it fell; log scale."""

    before: int
    centre_log: float
    between_sd_log: float
    low_log: float
    high_log: float
    p: float  # two-sided, of an estimate this far from the centre

    def outside(self, estimate_log: float) -> bool:
        return not self.low_log <= estimate_log <= self.high_log


def predict(before: Sequence[GateEstimate], newest: GateEstimate, alpha: float) -> Optional[Prediction]:
    """The 1 - alpha prediction interval for ``newest`` from ``before``; None with fewer than
    MIN_BEFORE of them."""
    k = len(before)
    if k < MIN_BEFORE:
        return None
    centre, centre_se, tau = pooled([g.estimate_log for g in before], [g.se_log for g in before])
    spread = math.sqrt(tau ** 2 + centre_se ** 2 + newest.se_log ** 2)
    half = float(scipy.stats.t.ppf(1 - alpha / 2, k - 2)) * spread
    p = float(2 * scipy.stats.t.sf(abs(newest.estimate_log - centre) / spread, k - 2))
    return Prediction(k, centre, tau, centre - half, centre + half, p)


def judge(per_case: dict[str, list[GateEstimate]], newest_dir: Path, alpha: float) -> tuple[list[str], bool]:
    """A line per case the newest gate measured, and whether any moved; each gate is placed by
    its ID (``between.per_gate`` refuses a gate without one)."""
    lines, shifted = [], False
    for case_id, found in sorted(per_case.items()):
        newest = [g for g in found if g.gate_dir == newest_dir]
        if not newest:
            continue
        before = [g for g in found if g.gate_id < newest[0].gate_id]
        at = f"{case_id}: this gate {log_pct(newest[0].estimate_log)} (SE {newest[0].se_log * 100:.1f} %)"
        prediction = predict(before, newest[0], alpha)
        if prediction is None:
            lines.append(f"{at}; not established: {len(before)} stored gate(s) before it, {MIN_BEFORE} needed")
            continue
        moved = prediction.outside(newest[0].estimate_log)
        shifted |= moved
        lines.append(f"{at}; the {prediction.before} stored gates before it predict [{log_pct(prediction.low_log)}, "
                     f"{log_pct(prediction.high_log)}] ({(1 - alpha) * 100:g} %, between-gate SD "
                     f"{math.expm1(prediction.between_sd_log) * 100:.1f} %): "
                     + (f"OUTSIDE (p = {prediction.p:.3g}): platform shift?" if moved else "steady"))
    return lines, shifted


def register(sub) -> None:
    p = sub.add_parser("canary", help="record an A/A gate in a store and warn when the runner shifted",
                       description="Run one A/A gate (REF against itself) into a new directory of --store, then "
                                   "test each case's estimate against the prediction interval of the gates stored "
                                   "before it. Exit 0 steady (or not yet established), 1 a platform shift or the "
                                   "A/A gate failed the build, 2 could not run. The store is what "
                                   "`critpath gate --between-gates` reads.")
    p.add_argument("--store", type=path_option, required=True, metavar="DIR", help="the directory of stored A/A gates")
    p.add_argument("--ref", default="HEAD", help="the commit both sides measure (default HEAD)")
    p.add_argument("--repo", type=path_option, default=Path.cwd(),
                   help="the git checkout (default: the current directory)")
    p.add_argument("--case", action="append", metavar="ID", type=case_id_option,
                   help=f"case ID (repeatable; default {DEFAULT_CASE}, whose code never changes)")
    p.add_argument("--budget", type=positive(float, MAX_BUDGET_S), default=Plan.budget_s, metavar="SECONDS",
                   help=f"the A/A gate's wall time for measuring (default {Plan.budget_s:g})")
    p.add_argument("--max-pairs", type=at_least(1, MAX_PAIRS), metavar="N",
                   help=f"the A/A gate stops after this many pairs (at most {MAX_PAIRS})")
    p.add_argument("--alpha", type=number_in(*ALPHA_RANGE), default=Policy.alpha,
                   help=f"the A/A gate's alpha, and the rate of a shift called on a steady runner, per case "
                        f"(default {Policy.alpha:g})")
    p.add_argument("--no-gate", action="store_true", help="run no gate: judge the newest gate already stored")
    p.set_defaults(func=cmd_canary)


def cmd_canary(args) -> int:
    store = absolute(args.store)
    gate_code = None
    if not args.no_gate:
        from harness.gate import cli as gate_cli  # the gate's own command line: every check it makes, made here too

        out = store / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        argv = ["gate", "--repo", str(absolute(args.repo)), "--base", args.ref, "--candidate", args.ref,
                "--budget", repr(args.budget), "--out", str(out), "--alpha", repr(args.alpha)]
        argv += [a for case in (args.case or [DEFAULT_CASE]) for a in ("--case", case)]
        argv += ["--max-pairs", str(args.max_pairs)] if args.max_pairs else []
        parser = argparse.ArgumentParser(prog="critpath")
        gate_cli.register(parser.add_subparsers(dest="command", required=True))
        gate_args = parser.parse_args(argv)
        gate_code = gate_args.func(gate_args)
        if gate_code not in (0, 1):
            print_error("canary", f"the A/A gate in {out} could not run (exit {gate_code}); nothing judged")
            return EXIT_USAGE
    try:
        per_case, dirs = per_gate([store], GateConfig.statistic)
        newest = out.resolve() if gate_code is not None else _newest(per_case, dirs)
        lines, shifted = judge(per_case, newest, args.alpha)
    except ResultsFileError as exc:
        print_error("canary", f"--store: {exc}")
        return EXIT_USAGE
    print(f"canary: {newest} against the {len(dirs) - 1} other stored gate(s)")
    for line in lines or [f"no case was measured in {newest} with two pairs or more: nothing to judge"]:
        print(f"  {line}")
    if gate_code == 1:
        print("canary: the A/A gate failed the build: with one commit on both sides that is a false alarm "
              "of the gate, or a shift inside it")
    return EXIT_SHIFT if shifted or gate_code == 1 else EXIT_OK


def _newest(per_case: dict[str, list[GateEstimate]], dirs: list[Path]) -> Path:
    """The stored gate with the latest ID (the ID starts with its start time)."""
    ids = {g.gate_dir: g.gate_id for found in per_case.values() for g in found}
    if not ids:
        raise ResultsFileError(f"{dirs[0]}: no stored gate measured a case with two pairs or more")
    return max(ids, key=lambda d: ids[d])
