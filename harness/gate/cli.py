"""``critpath gate`` and ``critpath compare``: the regression gate on the command line.

Exit codes: 0 pass, 1 regression, 2 could not run (see ``harness.gate.outputs``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

from harness.gate import ab
from harness.gate.config import ConfigError, GateConfig, load_baselines, load_config
from harness.gate.outputs import EXIT_COULD_NOT_RUN, GateResult, write_outputs
from harness.gate.stats import CaseInput, Outcome, Unit, verdicts
from harness.gate.trees import WORKTREE, TreeError, checkout, list_cases, probe, repo_root
from harness.gate.values import (
    StatisticError, default_direction, failure_text, iteration_values, process_value, validate_statistic,
)
from harness.records import Record
from harness.store import ResultsFileError, load_records

DEFAULT_REPEATS = 10


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _repeats(text: str) -> int:
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"need at least 2 repeats per side to test anything, got {value}")
    return value


def _statistic(text: str) -> str:
    try:
        return validate_statistic(text)
    except StatisticError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="gate config YAML: alpha, confidence, statistic, min_effect per family/case")
    p.add_argument("--statistic", type=_statistic, help="per-process statistic (default p50_ns; p99_ns, pNN_ns, min_ns, a metric)")
    p.add_argument("--min-effect", type=float, metavar="FRACTION", help="default minimum effect (0.05 = 5 %%), below per-family/case config")
    p.add_argument("--alpha", type=float, help="family-wise false-alarm rate across cases (Holm; default 0.01)")
    p.add_argument("--direction", choices=("lower", "higher"),
                   help="which way is better for --statistic (default: from its unit: *_ns lower, *_gbps higher)")
    p.add_argument("--out", type=Path, help="directory for gate.json, gate.xml (JUnit), gate.md and the runs")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also append the markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
    p.add_argument("--fail-on-inconclusive", action="store_true", help="exit 1 when a case is inconclusive (default: pass, listed)")


def register(sub) -> None:
    p = sub.add_parser("gate", help="A/B regression gate: base vs candidate, interleaved, in this job",
                       description="Measure base and candidate interleaved (A B, B A, ...) in fresh processes and "
                                   "decide per case: regressed, improved, unchanged, inconclusive, could not run. "
                                   "Exit 0 pass, 1 regression, 2 could not run.")
    p.add_argument("--base", metavar="REF", help="git ref of the base (checked out in a temporary git worktree)")
    p.add_argument("--candidate", metavar="REF", default=WORKTREE,
                   help="git ref of the candidate, or 'worktree' (default): this checkout with its edits")
    p.add_argument("--against", type=Path, metavar="FILE", help="compare the candidate with a baseline table (YAML) instead of a base ref")
    p.add_argument("--case", dest="case_ids", action="append", default=[], metavar="ID", help="case ID (repeatable)")
    p.add_argument("--families", type=_csv, help="comma-separated families (their quick grid, or --full)")
    p.add_argument("--full", action="store_true", help="with --families: the full grid")
    p.add_argument("--repeats", type=_repeats, default=DEFAULT_REPEATS, help=f"processes per side (default {DEFAULT_REPEATS})")
    p.add_argument("--iters", type=int, help="passed to critpath run: timed iterations per case")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS", help="passed to critpath run: per-case limit")
    p.add_argument("--repo", type=Path, default=Path.cwd(), help="the git checkout (default: the current directory)")
    _common(p)
    p.set_defaults(func=cmd_gate)

    c = sub.add_parser("compare", help="the gate's statistics on two stored runs (not an A/B: see the warning)")
    c.add_argument("run_a", type=Path, help="base: a run directory, or a directory of run directories (repeats)")
    c.add_argument("run_b", type=Path, help="candidate: same")
    _common(c)
    c.set_defaults(func=cmd_compare)


def _gate_config(args) -> GateConfig:
    from dataclasses import replace

    config = load_config(args.config)
    policy = config.policy
    if args.alpha is not None:
        policy = replace(policy, alpha=args.alpha)
    if args.min_effect is not None:
        policy = replace(policy, min_effect=args.min_effect)
    return replace(config, policy=policy, statistic=args.statistic or config.statistic)


def _default_out(kind: str) -> Path:
    return Path("reports") / f"{kind}-{_dt.datetime.now(_dt.timezone.utc):%Y%m%d-%H%M%S}"


def _finish(result: GateResult, args, out: Path) -> int:
    paths = write_outputs(result, out, args.markdown)
    print(result.headline)
    for case_id, v in result.verdicts.items():
        if v.outcome != Outcome.UNCHANGED:
            print(f"  {v.outcome:<13} {case_id}: {v.reason}")
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"gate results: {paths['json']}, {paths['junit']}, {paths['markdown']}")
    return result.exit_code


def _error_result(args, mode: str, message: str, statistic: str = "p50_ns") -> int:
    from harness.gate.stats import Policy

    result = GateResult(mode, statistic, Unit.PROCESS, Policy(), error=message,
                        fail_on_inconclusive=args.fail_on_inconclusive)
    out = args.out or _default_out(mode)
    code = _finish(result, args, out)
    print(f"critpath {args.command}: error: {message}", file=sys.stderr)
    return code


def _direction(args, statistic: str) -> str:
    return args.direction or default_direction(statistic)


def cmd_gate(args) -> int:
    mode = "against" if args.against else "ab"
    try:
        config = _gate_config(args)
        direction = None if args.against else _direction(args, config.statistic)
    except (ConfigError, ValueError) as exc:
        return _error_result(args, mode, str(exc))
    if args.against and args.base:
        return _error_result(args, mode, "give --base REF or --against FILE, not both")
    if not args.against and not args.base:
        return _error_result(args, mode, "--base REF (or --against FILE) is required")
    if not args.case_ids and not args.families and not args.against:
        return _error_result(args, mode, "select cases with --case ID or --families F")
    if args.against and (args.case_ids or args.families):
        return _error_result(args, mode, "with --against, the cases are the table's entries; drop --case/--families")
    out = args.out or _default_out("gate")
    if out.exists() and any(out.iterdir()):
        # Not written into: the directory holds something else.
        print(f"critpath gate: error: {out} is not empty; choose another --out", file=sys.stderr)
        return EXIT_COULD_NOT_RUN
    start = time.perf_counter()
    try:
        result = _run_gate(args, config, out, mode, direction)
    except (TreeError, ConfigError) as exc:
        result = GateResult(mode, config.statistic, Unit.PROCESS, config.policy, error=str(exc),
                            fail_on_inconclusive=args.fail_on_inconclusive)
    result.wall_s = time.perf_counter() - start
    return _finish(result, args, out)


def _run_gate(args, config: GateConfig, out: Path, mode: str, direction: Optional[str]) -> GateResult:
    repo = repo_root(args.repo)
    baselines = load_baselines(args.against) if args.against else []
    explicit = list(dict.fromkeys(args.case_ids + [b.case_id for b in baselines]))
    run_args = ["--timeout", str(args.timeout)] + (["--iters", str(args.iters)] if args.iters else [])
    with ExitStack() as stack:
        cand = stack.enter_context(checkout(repo, args.candidate, ab.CANDIDATE))
        base = None if args.against else stack.enter_context(checkout(repo, args.base, ab.BASE))
        sides = {ab.CANDIDATE: cand} if base is None else {ab.BASE: base, ab.CANDIDATE: cand}
        from_families: list[str] = []
        if args.families:
            profile = "full" if args.full else "quick"
            for tree in sides.values():
                from_families += list_cases(tree, args.families, profile)
        case_ids = list(dict.fromkeys(explicit + from_families))
        problems: dict[str, tuple[str, str]] = {}  # case -> (outcome, reason)
        for label, tree in sides.items():
            for case_id, why in probe(tree, case_ids).unknown.items():
                outcome = Outcome.COULD_NOT_RUN if case_id in explicit else Outcome.INCONCLUSIVE
                problems.setdefault(case_id, (outcome, f"unknown in {label} ({tree.ref}): {why}"))
        runnable = [ab.GateCase.same(c) for c in case_ids if c not in problems]
        print(f"critpath gate: {len(runnable)} cases, {args.repeats} repeats per side, "
              f"{'against ' + str(args.against) if base is None else f'base {args.base} vs candidate {args.candidate}'} -> {out}",
              file=sys.stderr)

        def progress(run: ab.ProcessRun) -> None:
            state = "ok" if run.records and run.exit_code == 0 else f"exit {run.exit_code}"
            print(f"  {run.side:<9} repeat {run.repeat + 1}/{args.repeats}: {state}, {run.wall_s:.1f} s"
                  + (f" ({run.error})" if run.error else ""), file=sys.stderr)

        runs = ab.ABRuns(runnable)
        if runnable:
            if base is None:
                runs = _run_one_side(runnable, cand, args.repeats, out, run_args, args.timeout, progress)
            else:
                timeout = args.timeout * len(runnable) + 180.0
                runs = ab.run_interleaved(runnable, base, cand, args.repeats, out, run_args, timeout, progress=progress)
        inputs = []
        by_case = {b.case_id: b for b in baselines}
        for case_id in case_ids:
            if case_id in problems:
                outcome, reason = problems[case_id]
                inputs.append(CaseInput(case_id, problem=reason, problem_outcome=outcome,
                                        min_effect=config.min_effect(case_id)))
                continue
            case = ab.GateCase.same(case_id)
            baseline = by_case.get(case_id)
            statistic = baseline.statistic if baseline else config.statistic
            cand_values, cand_problem = runs.values(case, ab.CANDIDATE, statistic)
            if baseline is not None:
                min_effect = baseline.min_effect if baseline.min_effect is not None else config.min_effect(case_id)
                inputs.append(CaseInput(case_id, (), cand_values, min_effect, baseline.direction, cand_problem,
                                        reference=baseline.value))
                continue
            base_values, base_problem = runs.values(case, ab.BASE, statistic)
            inputs.append(CaseInput(case_id, base_values, cand_values, config.min_effect(case_id), direction,
                                    problem="; ".join(p for p in (base_problem, cand_problem) if p)))
    result = GateResult(mode, config.statistic, Unit.PROCESS, config.policy, verdicts(inputs, config.policy),
                        base=base.to_dict() if base else {"ref": str(args.against)}, candidate=cand.to_dict(),
                        repeats=args.repeats, fail_on_inconclusive=args.fail_on_inconclusive)
    if baselines:
        stats = {b.statistic for b in baselines}
        result.statistic = stats.pop() if len(stats) == 1 else "per baseline entry"
    if base is None:
        result.warnings.append("a baseline table was measured elsewhere: this is not an A/B in one job, so "
                               "machine and job differences count as change; set min_effect accordingly")
    if cand.dirty:
        result.warnings.append("the candidate has uncommitted changes")
    if runs.stopped:
        result.warnings.append(runs.stopped)
    return result


def _run_one_side(cases, tree, repeats, out, run_args, timeout, progress) -> ab.ABRuns:
    """--against: only the candidate runs; the same fresh-process repeats as an A/B."""
    result = ab.ABRuns(list(cases))
    ids = [c.cand_id for c in cases]
    for repeat in range(repeats):
        run_dir = out / ab.CANDIDATE / f"rep-{repeat:03d}"
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        code, wall_s, note = ab.run_process(tree, ids, run_dir, run_args, timeout * len(ids) + 180.0, sys.executable)
        run = ab.ProcessRun(ab.CANDIDATE, repeat, run_dir, code, wall_s, error=note)
        if (run_dir / "results.jsonl").exists():
            try:
                run.records = {r.case_id: r for r in load_records(run_dir)}
            except ResultsFileError as exc:
                run.error = str(exc)
        result.runs.append(run)
        progress(run)
        if not run.records and repeat == 0:
            result.stopped = f"candidate repeat 0 produced no records ({run.error or f'exit {code}'}); stopped"
            break
    return result


# -- compare ------------------------------------------------------------------------------------

def _load_side(path: Path) -> list[list[Record]]:
    """A run directory, or a directory whose subdirectories (recursively) are run directories."""
    if (path / "results.jsonl").exists() or path.is_file():
        return [load_records(path)]
    runs = sorted(p.parent for p in path.rglob("results.jsonl"))
    if not runs:
        raise ResultsFileError(f"{path}: no run directory (results.jsonl) found")
    return [load_records(p) for p in runs]


def cmd_compare(args) -> int:
    try:
        config = _gate_config(args)
        direction = _direction(args, config.statistic)
    except (ConfigError, ValueError) as exc:
        return _error_result(args, "compare", str(exc))
    out = args.out or _default_out("compare")
    start = time.perf_counter()
    try:
        sides = [_load_side(args.run_a), _load_side(args.run_b)]
    except ResultsFileError as exc:
        return _error_result(args, "compare", str(exc), config.statistic)
    unit = Unit.PROCESS if min(len(s) for s in sides) >= 2 else Unit.ITERATION
    warnings = ["these runs were not measured interleaved in one job: differences between jobs, machines or "
                "times count as change. This is not an A/B; use critpath gate for a verdict you can trust."]
    if unit == Unit.ITERATION:
        warnings.append("one run per side: per-iteration samples are the unit, and they are not independent "
                        "draws (they share one process), so p-values are optimistic; the minimum effect is "
                        "the only real guard")
    case_ids = list(dict.fromkeys(r.case_id for side in sides for run in side for r in run))
    inputs = []
    for case_id in case_ids:
        values, problems = [], []
        for label, side in zip(("base", "candidate"), sides):
            records = [r for run in side for r in run if r.case_id == case_id]
            if len(records) < len(side):
                problems.append(f"{label}: {len(side) - len(records)} of {len(side)} runs lack the case")
                values.append([])
                continue
            bad = failure_text(records)
            if bad:
                problems.append(f"{label}: {bad}")
                values.append([])
                continue
            try:
                if unit == Unit.PROCESS:
                    values.append([process_value(r, config.statistic) for r in records])
                else:
                    values.append(list(iteration_values(records[0], config.statistic)))
            except StatisticError as exc:
                problems.append(f"{label}: {exc}")
                values.append([])
        inputs.append(CaseInput(case_id, values[0], values[1], config.min_effect(case_id), direction,
                                problem="; ".join(problems)))
    result = GateResult("compare", config.statistic, unit, config.policy, verdicts(inputs, config.policy),
                        base={"ref": str(args.run_a), "runs": len(sides[0])},
                        candidate={"ref": str(args.run_b), "runs": len(sides[1])},
                        repeats=min(len(s) for s in sides), warnings=warnings,
                        fail_on_inconclusive=args.fail_on_inconclusive)
    if unit == Unit.ITERATION and config.statistic != "p50_ns":
        result.warnings.append(f"with per-iteration samples the effect is the ratio of the samples' medians, "
                               f"not of {config.statistic}")
    result.wall_s = time.perf_counter() - start
    return _finish(result, args, out)
