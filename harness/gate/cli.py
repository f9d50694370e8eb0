"""``critpath gate`` and ``critpath compare``: the regression gate on the command line.

Exit codes: 0 pass, 1 regression, 2 could not run (see ``harness.gate.outputs``).
"""
from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Optional

from harness.core import figures
from harness.core.claim import claim_dir
from harness.core.comparable import mismatch
from harness.core.escape import for_terminal
from harness.core.figures import FigureUnavailable, is_sample_statistic
from harness.core.git import over_repository
from harness.core.inputfile import declare_inputs
from harness.core.options import (absolute, at_least, case_id_option, families_option, given_flags, number_in,
                                  path_option, positive, print_error, seconds)
from harness.core.records import MAX_SAMPLES, Record
from harness.core.store import RESULTS, LoadedRun, ResultsFileError, distinct_run_ids, load_whole, run_inputs
from harness.core.walk import WalkError, walk_bounded
from harness.gate import between as between_gates
from harness.gate.factors import FACTORS, tree_prefix
from harness.gate.config import ALPHA_RANGE, MAX_MIN_EFFECT, ConfigError, GateConfig, load_baselines, load_config
from harness.gate.outputs import EXIT_COULD_NOT_RUN, GateResult
from harness.gate.paired import DESIGN, SPENDING, paired_verdicts, recheck_verdicts
from harness.gate.progress import GateProgress
from harness.gate.recheck import describe, disjoint_sides, is_gate_side, whole_gate
from harness.gate.repeats import ProcessRun, Repeats, run_repeats
from harness.gate.request import MODE_ONLY, CompareRequest, GateOutputs, GateRequest
from harness.gate.schedule import MAX_BUDGET_S, MAX_PAIRS, MAX_ROUNDS, Plan, Schedule, side_kind
from harness.gate.sequential import CaseSpec, SequentialGate
from harness.gate.stats import CaseInput, Outcome, Unit, verdicts
from harness.gate.trees import (BASE, CANDIDATE, WORKTREE, TreeError, checkout, list_cases, probe, repo_root,
                                sweep_orphans, worktree_ambiguity)
from harness.gate.values import ITERATION_STATISTIC, failure_text, iteration_values, statistic_option
from harness.run.lifetime import interrupt_signal, stop_signals_unwind

DEFAULT_REPEATS = 10  # --against: processes of the candidate
MAX_REPEATS = 1000  # --against: each is a fresh process; a thousand is hours
# --repeats: at least 2 per side to test anything.
_repeats = at_least(2, MAX_REPEATS)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=path_option,
                   help="gate config YAML: alpha, confidence, statistic, min_effect per family/case")
    p.add_argument("--statistic", type=statistic_option,
                   help=f"per-round statistic (default {GateConfig.statistic}; p50_ns, pNN_ns, min_ns, a metric)")
    p.add_argument("--min-effect", type=number_in(0.0, MAX_MIN_EFFECT), metavar="FRACTION", help="default minimum effect (0.05 = 5 %%), below per-family/case config")
    p.add_argument("--alpha", type=number_in(*ALPHA_RANGE),
                   help=f"family-wise false-alarm rate across cases (Holm; default 0.01; in [{ALPHA_RANGE[0]:g}, {ALPHA_RANGE[1]:g}])")
    p.add_argument("--direction", choices=("lower", "higher"),
                   help="which way is better for --statistic (default: as the case's family declares it; sample statistics lower)")
    p.add_argument("--out", type=path_option, help="directory for gate.json, gate.xml (JUnit), gate.md and the runs")
    p.add_argument("--markdown", type=path_option, metavar="FILE",
                   help="also append the markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
    p.add_argument("--fail-on-inconclusive", action="store_true", help="exit 1 when any case is inconclusive")


# The options of one gate mode (request.MODE_ONLY) by their argparse dest, as given_flags reads them.
_MODE_ONLY_FLAGS = {option.lstrip("-").replace("-", "_"): option for option in MODE_ONLY}


def register(sub) -> None:
    p = sub.add_parser("gate", help="A/B regression gate: base vs candidate, interleaved, in this job",
                       description="Measure base and candidate in pairs of fresh processes, interleaved A B / B A, "
                                   "look at the pairs as they come and stop each case once it is decided, within "
                                   "--budget seconds: regressed, improved, unchanged, inconclusive, could not run. "
                                   "Exit 0 pass, 1 regression (or a likely one at the budget), 2 could not run.")
    p.add_argument("--base", metavar="REF", help="git ref of the base (checked out in a temporary git worktree)")
    p.add_argument("--candidate", metavar="REF",
                   help="git ref of the candidate, or 'worktree' (default): this checkout with its edits")
    p.add_argument("--against", type=path_option, metavar="FILE",
                   help="compare the candidate with a baseline table (YAML) instead of a base ref")
    # The options of one mode only (request.MODE_ONLY) default to None: given at their default
    # value to the other mode, they are refused like any other value.
    p.add_argument("--case", action="append", metavar="ID", type=case_id_option, help="case ID (repeatable)")
    p.add_argument("--families", type=families_option, help="comma-separated families (their quick grid, or --full)")
    p.add_argument("--full", action="store_true", help="with --families: the full grid")
    p.add_argument("--budget", type=positive(float, MAX_BUDGET_S), default=Plan.budget_s, metavar="SECONDS",
                   help=f"wall time for measuring (default {Plan.budget_s:g}, at most {MAX_BUDGET_S:g}); the gate stops "
                        "earlier once every case is decided, and starts no round it cannot finish within it")
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="A/B: pass a case still undecided at the budget even when its estimate reaches the minimum effect")
    p.add_argument("--rounds", type=at_least(1, MAX_ROUNDS), metavar="N",
                   help=f"A/B: rounds per fresh process pair (default {Plan.rounds}, at most {MAX_ROUNDS}; see docs/gate.md)")
    p.add_argument("--window", type=seconds, metavar="SECONDS",
                   help=f"A/B: timed seconds per case per round, calibrated once (default {Plan.window_s:g})")
    p.add_argument("--max-pairs", type=at_least(1, MAX_PAIRS), metavar="N", help="A/B: stop after this many process pairs")
    p.add_argument("--toggle", choices=tuple(FACTORS), metavar="FACTOR",
                   help=f"A/B, an experiment for A/A gates: hold FACTOR ({', '.join(FACTORS)}) at two different "
                        "values, one per side, for the whole gate, where the gate otherwise draws it anew per pair "
                        "or holds it equal; an estimate that moves with it is a per-gate offset (docs/gate.md)")
    p.add_argument("--between-gates", action="append", type=path_option, metavar="DIR",
                   help=f"A/B: stored A/A gates (DIR or up to {between_gates.GATE_DEPTH} levels under it, repeatable) "
                        "whose spread estimates the offset fixed per gate; each case they cover gets it in its "
                        "interval and test (docs/gate.md)")
    p.add_argument("--repeats", type=_repeats, help=f"with --against: candidate processes (default {DEFAULT_REPEATS})")
    p.add_argument("--iters", type=at_least(1, MAX_SAMPLES),
                   help=f"timed iterations per case per round (default: from --window; at most {MAX_SAMPLES})")
    p.add_argument("--timeout", type=seconds, default=60.0, metavar="SECONDS", help="per-case limit in one round")
    p.add_argument("--repo", type=path_option, default=Path.cwd(),
                   help="the git checkout (default: the current directory)")
    _common(p)
    # given_flags tells an option given from one left out by its parser default (False for --full)
    p.set_defaults(func=cmd_gate, mode_only_defaults={dest: p.get_default(dest) for dest in _MODE_ONLY_FLAGS})

    c = sub.add_parser("compare", help="the gate's statistics on two stored runs (not an A/B: see the warning)")
    c.add_argument("run_a", type=path_option, help="base: a run directory, or a directory of run directories (repeats)")
    c.add_argument("run_b", type=path_option, help="candidate: same")
    _common(c)
    c.set_defaults(func=cmd_compare)


def _directions(direction: Callable[[str], str], case_ids, problems: dict) -> dict[str, str]:
    """Each case's direction; a case whose statistic has none becomes a could-not-run problem."""
    out = {}
    for case_id in case_ids:
        try:
            out[case_id] = direction(case_id)
        except FigureUnavailable as exc:
            problems.setdefault(case_id, (Outcome.COULD_NOT_RUN, str(exc)))
    return out


def cmd_gate(args) -> int:
    # Every path against the user's directory, here: a tree's processes run in its worktree.
    outputs = GateOutputs("gate", absolute(args.out), absolute(args.markdown), args.fail_on_inconclusive,
                          args.allow_inconclusive)
    over = _outputs_over_repo(absolute(args.repo), outputs)
    if over:  # refused before anything is written: a refusal's own outputs would land there too
        print_error("gate", over)
        return EXIT_COULD_NOT_RUN
    # Its inputs declared first, so a --markdown over the config or the table is refused with the
    # rest, before a worktree is made: a refusal when the result is written loses the whole gate.
    declare_inputs([path for path in (absolute(args.config), absolute(args.against)) if path is not None])
    outputs.check_out("gate")  # a finished gate's directory is not this gate's to write into
    outputs.check("gate")
    try:
        config = load_config(absolute(args.config)).overridden(args.alpha, args.min_effect, args.statistic, args.direction)
        for case_id in [] if args.against else args.case or []:
            config.direction(case_id)  # a statistic with no direction for a named case: refused before any worktree
        if args.against:
            load_baselines(absolute(args.against))  # its errors before any worktree, as the config's
    except (ConfigError, ValueError) as exc:
        return outputs.error("against" if args.against else "ab", str(exc))
    ambiguous = _ambiguous_worktree(args)
    if ambiguous:
        return outputs.error("against" if args.against else "ab", ambiguous)
    # What the command line left out stays the Plan's default.
    measuring = {"rounds": args.rounds, "window_s": args.window, "max_pairs": args.max_pairs, "iters": args.iters,
                 "toggle": args.toggle}
    if args.toggle == "tree_path" and not args.against and (args.candidate or WORKTREE) == WORKTREE:
        return outputs.error("ab", "--toggle tree_path: the candidate must be a ref (--candidate REF): the working "
                                   "tree stays where it is, so its path cannot be made longer")
    plan = Plan(budget_s=args.budget, case_timeout_s=args.timeout, **{k: v for k, v in measuring.items() if v is not None})
    between = None  # no term asked for: nothing said of it
    if args.between_gates and not args.against:
        try:  # read and held whole before any worktree: a refusal after the pairs would lose them
            between, _dirs = between_gates.from_aa_gates([absolute(d) for d in args.between_gates], config.statistic)
        except ResultsFileError as exc:
            return outputs.error("ab", f"--between-gates: {exc}")
    return gate(GateRequest(args.base, args.candidate or WORKTREE, absolute(args.against), absolute(args.repo),
                            tuple(args.case or ()), args.families, "full" if args.full else "quick", plan,
                            args.repeats or DEFAULT_REPEATS, config, outputs,
                            frozenset(given_flags(args, _MODE_ONLY_FLAGS, args.mode_only_defaults)), between))


def _outputs_over_repo(repo: Path, outputs: GateOutputs) -> str:
    """Why an output of the gate would be written over the repository it measures
    (``over_repository``): ``--markdown harness/__init__.py`` appended the table to the candidate's
    tracked source. "" when none would, or when ``repo`` is no checkout (the gate says so itself)."""
    try:
        top = repo_root(repo)
    except TreeError:
        return ""
    for option, path in (("--out", outputs.out_dir("gate")), ("--markdown", outputs.markdown)):
        why = over_repository(top, path) if path is not None else ""
        if why:
            return f"{option} {path} {why}; choose a path outside it, or one inside it where git tracks nothing"
    return ""


def _ambiguous_worktree(args) -> str:
    """Why a ``worktree`` the user wrote could mean a ref too, or "" (the default candidate is the
    working tree whatever refs exist)."""
    for option, given in (("--base", args.base), ("--candidate", args.candidate)):
        if given == WORKTREE:
            try:
                why = worktree_ambiguity(absolute(args.repo), option)
            except TreeError:
                return ""  # not a checkout: the gate says so itself
            if why:
                return why
    return ""


def gate(request: GateRequest) -> int:
    """Run the gate ``request`` asks for and write its result; the exit code."""
    outputs = request.outputs
    refusal = request.refusal()
    if refusal:
        return outputs.error(request.mode, refusal)
    out = outputs.out_dir("gate")
    with claim_dir(out, "gate") as claim:  # before looking in: two gates into one --out cannot both find it empty
        if claim.contents():
            # Not written into: the directory holds something else, often what a killed gate
            # measured, kept as `critpath run` keeps a killed run's directory. The worktrees that
            # gate left go all the same, as this gate would have removed them had it run.
            _sweep(request)
            print_error("gate", f"{out} is not empty; choose another --out")
            return EXIT_COULD_NOT_RUN
        return _gate_into(request, out)


def _gate_into(request: GateRequest, out: Path) -> int:
    mode, config, outputs = request.mode, request.config, request.outputs
    start = time.perf_counter()
    interrupted = None
    try:
        with stop_signals_unwind():
            if request.against:
                result = _run_against(request, out)
            else:
                result = _run_ab(request, out)
    except (TreeError, ConfigError) as exc:
        result = outputs.result(mode, config.statistic, config.policy, error=str(exc), **request.unmeasured())
    except Exception as exc:  # noqa: BLE001 -- whatever a tree does to the gate, it could not run; exit 1 is a regression
        result = outputs.result(mode, config.statistic, config.policy, **request.unmeasured(),
                                error=f"the gate could not run: {type(exc).__name__}: {exc}")
    except KeyboardInterrupt as exc:
        interrupted = interrupt_signal(exc)
        result = outputs.result(mode, config.statistic, config.policy, **request.unmeasured(),
                                error=f"interrupted by {interrupted.name}; worktrees and processes were removed")
    result.wall_s = time.perf_counter() - start
    code = outputs.finish(result, out, own=True)
    return 128 + int(interrupted) if interrupted is not None else code


def _select_cases(request: GateRequest, sides: dict) -> tuple[list[str], list[str]]:
    """(every case ID, the ones named explicitly): --case first, then each side's --families grid."""
    explicit = list(dict.fromkeys(request.case_ids))
    from_families: list[str] = []
    if request.families:
        for tree in sides.values():
            from_families += list_cases(tree, request.families, request.profile)
    return list(dict.fromkeys(explicit + from_families)), explicit


def _repo(request: GateRequest) -> Path:
    """The checkout, rid of the worktrees that killed gates and histories left in it."""
    repo = repo_root(request.repo)
    for removed in sweep_orphans(repo):
        print(f"critpath gate: {removed}", file=sys.stderr)
    return repo


def _sweep(request: GateRequest) -> None:
    """The sweep of ``_repo``, for a gate refused before it measures; nothing where the repository
    is no checkout (the refusal is what the user is told)."""
    try:
        _repo(request)
    except TreeError:
        pass


def _run_ab(request: GateRequest, out: Path) -> GateResult:
    started_at = time.monotonic()  # the budget counts the worktrees and probes too
    config, plan = request.config, request.plan
    repo = _repo(request)
    with ExitStack() as stack:
        # Both checkouts' directories the same length (harness.gate.factors), unless that is the toggle.
        cand = stack.enter_context(checkout(repo, request.candidate, CANDIDATE,
                                            prefix=tree_prefix(CANDIDATE, plan.toggle)))
        base = stack.enter_context(checkout(repo, request.base, BASE, prefix=tree_prefix(BASE, plan.toggle)))
        sides = {BASE: base, CANDIDATE: cand}
        case_ids, explicit = _select_cases(request, sides)
        problems: dict[str, tuple[str, str]] = {}  # case -> (outcome, reason)
        protocols = {}
        for label, tree in sides.items():
            found = probe(tree, case_ids)
            protocols[label] = found.worker_protocol
            for case_id, why in found.unknown.items():
                outcome = Outcome.COULD_NOT_RUN if case_id in explicit else Outcome.INCONCLUSIVE
                problems.setdefault(case_id, (outcome, f"unknown in {label} ({tree.ref}): {why}"))
        directions = _directions(config.direction, [c for c in case_ids if c not in problems], problems)
        runnable = [c for c in case_ids if c not in problems]
        kind = side_kind(protocols)
        specs = [CaseSpec(c, config.min_effect(c), directions[c], between_gates.sd_of(request.between or {}, c))
                 for c in runnable]
        for line in between_gates.lines(request.between, runnable) if request.between is not None else ():
            print(f"critpath gate: {line}", file=sys.stderr)
        gate = SequentialGate(specs, alpha=config.policy.alpha, confidence=config.policy.confidence,
                              spending=SPENDING) if specs else None
        progress = GateProgress(plan, gate, specs, sys.stderr)
        print(f"critpath gate: {len(runnable)} cases, base {request.base} vs candidate {request.candidate}, "
              f"budget {plan.budget_s:g} s, {plan.rounds} rounds per process pair"
              f"{'' if kind == 'worker' else ' (a fresh critpath run per round: a tree predates critpath worker)'}"
              f" -> {out}", file=sys.stderr)
        schedule_result = None
        if runnable:
            schedule = Schedule(runnable, sides, kind, plan, out, config.statistic, gate.look, progress.event,
                                started_at=started_at)
            with progress:
                schedule_result = schedule.run()
    inputs_problems = [CaseInput(c, problem=reason, problem_outcome=outcome, min_effect=config.min_effect(c))
                       for c, (outcome, reason) in problems.items()]
    verdicts_ = verdicts(inputs_problems, config.policy)
    extra = {"plan": plan.to_dict(), "design": DESIGN, "side_kind": kind}
    if request.between is not None:
        extra["between_gate"] = between_gates.to_dict(request.between, runnable)
    if schedule_result is not None:
        verdicts_.update(paired_verdicts(schedule_result, gate, specs, plan, config))
        extra.update(schedule_result.summary())
    budget_ended = (schedule_result is not None and schedule_result.stopped == "budget"
                    and any(v.outcome == Outcome.INCONCLUSIVE for v in verdicts_.values()))
    zero_effect = not request.outputs.allow_inconclusive and any(s.min_effect == 0 for s in specs)
    warnings = [text for text, applies in (
        (f"the {plan.budget_s:g} s budget ended before every case was decided", budget_ended),
        ("a minimum effect of 0: a case still undecided at the budget fails whenever its estimate is worse at all; "
         "give a positive --min-effect or --allow-inconclusive", zero_effect),
        (_cut_warning(plan, schedule_result), schedule_result is not None and bool(schedule_result.cut)),
        (f"--toggle {plan.toggle}: the sides differed by {plan.toggle} for the whole gate, an experiment on an "
         "A/A gate, not a verdict on a change", plan.toggle is not None),
        ("the candidate has uncommitted changes", cand.dirty)) if applies]
    return request.outputs.result("ab", config.statistic, config.policy, verdicts={c: verdicts_[c] for c in case_ids},
                                  base=base.to_dict(), candidate=cand.to_dict(), extra=extra, warnings=warnings,
                                  repeats=schedule_result.generations if schedule_result is not None else 0)


def _cut_warning(plan: Plan, result) -> str:
    """What the budget cut: the generations that ran fewer rounds than asked (gate.json: cut)."""
    cut = result.cut if result is not None else []
    runs = ", ".join(f"generation {c['generation']} ran {c['rounds_run']} of {c['rounds_planned']}" for c in cut[:3])
    return (f"the {plan.budget_s:g} s budget cut {len(cut)} process pair(s) short of {plan.rounds} rounds "
            f"({runs}{', ...' if len(cut) > 3 else ''}); each was paired over the rounds it ran")


def _run_against(request: GateRequest, out: Path) -> GateResult:
    """--against: only the candidate runs, a fixed number of fresh processes, each case tested
    against its table value (a table measured elsewhere is not an A/B)."""
    config, plan, repeats = request.config, request.plan, request.repeats
    started_at = time.monotonic()  # the budget counts the worktree and probe too, as the A/B loop's does
    repo = _repo(request)
    baselines = load_baselines(request.against)
    case_ids = list(dict.fromkeys(b.case_id for b in baselines))
    run_args = ["--timeout", str(plan.case_timeout_s)] + (["--iters", str(plan.iters)] if plan.iters else [])
    with ExitStack() as stack:
        cand = stack.enter_context(checkout(repo, request.candidate, CANDIDATE))
        problems = {c: f"unknown in candidate ({cand.ref}): {why}" for c, why in probe(cand, case_ids).unknown.items()}
        runnable = [c for c in case_ids if c not in problems]
        print(f"critpath gate: {len(runnable)} cases, {repeats} candidate processes against {request.against} -> {out}",
              file=sys.stderr)

        def progress(run: ProcessRun) -> None:
            state = "ok" if run.records and run.exit_code == 0 else f"exit {run.exit_code}"
            print(for_terminal(f"  {run.side:<9} repeat {run.repeat + 1}/{repeats}: {state}, {run.wall_s:.1f} s"
                               + (f" ({run.error})" if run.error else "")), file=sys.stderr)

        runs = (run_repeats(runnable, cand, repeats, out, run_args, plan.case_timeout_s, progress,
                            budget_s=plan.budget_s, started_at=started_at) if runnable else Repeats())
    inputs = [_against_input(b, problems.get(b.case_id), runs, config) for b in baselines]
    stats = {b.statistic for b in baselines}
    warnings = [text for text, applies in (
        ("a baseline table was measured elsewhere: this is not an A/B in one job, so machine and job differences "
         "count as change; set min_effect accordingly", True),
        ("the candidate has uncommitted changes", cand.dirty),
        (runs.stopped, bool(runs.stopped)),
        (f"the {plan.budget_s:g} s budget cut the candidate's processes at {len(runs.runs)} of {repeats} repeats "
         f"(the next would have ended past it); each case is tested on the {len(runs.runs)} it ran", bool(runs.cut)))
        if applies]
    return request.outputs.result(request.mode, stats.pop() if len(stats) == 1 else "per baseline entry",
                                  config.policy, verdicts=verdicts(inputs, config.policy),
                                  base={"ref": str(request.against)}, candidate=cand.to_dict(),
                                  repeats=len(runs.runs), warnings=warnings,
                                  extra={"plan": plan.to_dict(), "cut": list(runs.cut)})


def _against_input(baseline, problem: Optional[str], runs: Repeats, config: GateConfig) -> CaseInput:
    """One table entry's case: its candidate values against the table's value, or why it has none."""
    if problem:
        return CaseInput(baseline.case_id, problem=problem, min_effect=config.min_effect(baseline.case_id))
    cand_values, cand_problem = runs.values(baseline.case_id, baseline.statistic)
    min_effect = baseline.min_effect if baseline.min_effect is not None else config.min_effect(baseline.case_id)
    return CaseInput(baseline.case_id, (), cand_values, min_effect, baseline.direction,
                     f"candidate: {cand_problem}" if cand_problem else "", reference=baseline.value)


# -- compare ------------------------------------------------------------------------------------

# A side is a run directory, or a directory of them as the gate writes its own (out/candidate/rep-001)
# with a level or two above for grouping. Its runs are repeats, at most as many as a gate takes.
SIDE_DEPTH = 4
MAX_SIDE_DIRS = 4 * MAX_REPEATS


def _side_runs(path: Path) -> list[Path]:
    """The run directories of one side: ``path`` itself, or those below it within SIDE_DEPTH."""
    if (path / RESULTS).exists() or path.is_file():
        return [path]
    try:
        runs = [d for d, names in walk_bounded(path, "a compare side", SIDE_DEPTH, MAX_SIDE_DIRS,
                                                 refuse_links=True) if RESULTS in names]
    except WalkError as exc:
        raise ResultsFileError(str(exc)) from None
    if len(runs) > MAX_REPEATS:
        raise ResultsFileError(f"{path}: {len(runs)} run directories; a compare side takes at most {MAX_REPEATS} "
                               "repeats")
    return sorted(runs)


def _load_side(path: Path, label: str) -> list[LoadedRun]:
    """A run directory, or a directory whose subdirectories (recursively) are run directories,
    each a distinct run: the same run twice would count one process as two repeats."""
    runs = _side_runs(path)
    if not runs:
        raise ResultsFileError(f"{path}: no run directory (results.jsonl) found")
    declare_inputs(run_inputs(runs))  # known before they are read: no output of this compare may replace them
    loaded = [load_whole(run) for run in runs]  # a killed run's cases are not a side's measurement
    try:
        distinct_run_ids(loaded)
    except ResultsFileError as exc:
        raise ResultsFileError(f"{label} side {path}: {exc}") from None
    return loaded


def _load_sides(request: CompareRequest) -> list[list[list[Record]]]:
    """Each side's runs' records, base first; a run on both sides is refused (``disjoint_sides``)
    once each side is read whole, so a side that is not whole is named for that first."""
    sides = [_load_side(request.run_a, "base"), _load_side(request.run_b, "candidate")]
    disjoint_sides([request.run_a, request.run_b], sides[0] + sides[1])
    return [[list(run.records) for run in side] for side in sides]


def cmd_compare(args) -> int:
    outputs = GateOutputs("compare", absolute(args.out), absolute(args.markdown), args.fail_on_inconclusive)
    # Before anything is read or written: a refused --out takes not even the result saying why.
    outputs.check_out("compare", (absolute(args.run_a), absolute(args.run_b)))
    try:
        config = load_config(absolute(args.config)).overridden(args.alpha, args.min_effect, args.statistic, args.direction)
    except (ConfigError, ValueError) as exc:
        return outputs.error("compare", str(exc))
    return compare(CompareRequest(absolute(args.run_a), absolute(args.run_b), config, outputs))


def compare(request: CompareRequest) -> int:
    """The gate's statistics on the two stored sides ``request`` names; the exit code."""
    out = request.outputs.out_dir("compare")
    with claim_dir(out, "compare"):
        return _compare_into(request, out)


def _compare_into(request: CompareRequest, out: Path) -> int:
    config, outputs = request.config, request.outputs
    start = time.perf_counter()
    if is_gate_side(request.run_a) and is_gate_side(request.run_b):
        return _recheck_gate(request, out, start)
    try:
        sides = _load_sides(request)
    except ResultsFileError as exc:
        return outputs.error("compare", str(exc), config.statistic)
    outputs.check("compare")  # its inputs now declared: a --markdown over one is refused before any result
    unit = Unit.PROCESS if min(len(s) for s in sides) >= 2 else Unit.ITERATION
    warnings = ["these runs were not measured interleaved in one job: differences between jobs, machines or "
                "times count as change. This is not an A/B; use critpath gate for a verdict you can trust."]
    single = _single_runs(request, sides) if unit == Unit.ITERATION else ""
    if single:
        warnings.append(single)
    case_ids = list(dict.fromkeys(r.case_id for side in sides for run in side for r in run))
    inputs = []
    for case_id in case_ids:
        values, problems = [], []
        try:
            case_direction = config.direction(case_id)
        except FigureUnavailable as exc:
            inputs.append(CaseInput(case_id, problem=str(exc), min_effect=config.min_effect(case_id)))
            continue
        differs = mismatch({label: [r for run in side for r in run if r.case_id == case_id]
                            for label, side in zip(("base", "candidate"), sides)})
        if differs:
            inputs.append(CaseInput(case_id, [], [], config.min_effect(case_id), case_direction, problem=differs))
            continue
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
                    values.append([figures.value(r, config.statistic) for r in records])
                else:
                    values.append(list(iteration_values(records[0], config.statistic)))
            except FigureUnavailable as exc:
                problems.append(f"{label}: {exc}")
                values.append([])
        inputs.append(CaseInput(case_id, values[0], values[1], config.min_effect(case_id), case_direction,
                                problem="; ".join(problems)))
    # Named as compared only where some case was: a statistic no case's samples support is the
    # statistic asked, and each case says why it could not run.
    compared, instead = _compared_statistic(unit, config.statistic, _single_side(sides),
                                            any(not case.problem for case in inputs))
    result = outputs.result("compare", compared, config.policy, unit, verdicts=verdicts(inputs, config.policy),
                            base={"ref": str(request.run_a), "runs": len(sides[0])},
                            candidate={"ref": str(request.run_b), "runs": len(sides[1])},
                            repeats=min(len(s) for s in sides), warnings=warnings + [instead] * bool(instead),
                            extra={"statistic_asked": config.statistic} if instead else {})
    result.wall_s = time.perf_counter() - start
    return outputs.finish(result, out)


def _single_side(sides: list) -> str:
    """Which side has the one run of an uneven compare ("" when both have one)."""
    base, cand = (len(side) for side in sides)
    return "" if base == cand else "base" if base == 1 else "candidate"


def _single_runs(request: CompareRequest, sides: list) -> str:
    """The warning of a compare with one run on a side: per-iteration samples are its unit, and a
    side of several runs gives only its first (``_compare_into`` compares ``records[0]``)."""
    guard = ("they are not independent draws (they share one process), so p-values are optimistic; the "
             "minimum effect is the only real guard")
    single = _single_side(sides)
    if not single:
        return f"one run per side: per-iteration samples are the unit, and {guard}"
    other, path = ("candidate", request.run_b) if single == "base" else ("base", request.run_a)
    runs = len(sides[single == "base"])
    return (f"the {single} side has one run, the {other} {runs}: with one run on a side there is no spread between "
            f"processes to test against, so the unit is per-iteration samples, of the {single}'s run and of the "
            f"{other}'s first run only ({_side_runs(path)[0]}); {guard}. Give two or more runs on each side to "
            "compare processes")


def _compared_statistic(unit: str, asked: str, single: str = "", compared: bool = True) -> tuple[str, str]:
    """The statistic a compare in ``unit`` compares for ``asked``, and what the result says when it
    is another one ("" when not). A side of one run (each side, or the ``single`` one) has one
    ``p99_ns``, nothing to test: its per-iteration samples are compared, by their medians
    (``ITERATION_STATISTIC``), and gate.json, gate.md and stderr name that, never the statistic
    asked. A figure with no per-iteration samples is refused per case instead
    (``iteration_values``), as is a sample too short for ``asked``; with no case ``compared`` the
    statistic is the one asked, and each case says why it could not run."""
    if (unit != Unit.ITERATION or asked == ITERATION_STATISTIC or not is_sample_statistic(asked)
            or not compared):
        return asked, ""
    one = f"the {single} side's one run has one {asked}" if single else f"one run per side has one {asked} each"
    return ITERATION_STATISTIC, (f"compared {ITERATION_STATISTIC}, not {asked}: {one}, nothing to test, so "
                                 "per-iteration samples are compared by their medians; give two or more runs per "
                                 f"side to compare {asked}")


def _recheck_gate(request: CompareRequest, out: Path, start: float) -> int:
    config, outputs = request.config, request.outputs
    try:
        disjoint_sides([request.run_a, request.run_b])  # a copy of a side: read_pairs compares each pair's runs
        # A gate not finished, or not all of one gate, is refused as a killed run is: its verdict is not the gate's.
        tracks, rounds = whole_gate(request.run_a, request.run_b, config.statistic)
    except ResultsFileError as exc:
        return outputs.error("compare", str(exc), config.statistic)
    outputs.check("compare")
    problems: dict = {}
    directions = _directions(config.direction, tracks, problems)
    for case_id, (_, why) in problems.items():
        tracks[case_id].problem = why
    # A case without a direction carries its problem; its spec's direction is never read.
    # The between-gate term the gate used, from its gate.json: the same test, at one look.
    try:
        stored = between_gates.stored(request.run_a)
        specs = [CaseSpec(c, config.min_effect(c), directions.get(c, "lower"), stored.get(c, 0.0)) for c in tracks]
        rechecked = recheck_verdicts(tracks, specs, config, rounds) if specs else {}
        between_gates.refuse_unless_term_agrees(request.run_a, config.statistic, rechecked)
    except ResultsFileError as exc:
        return outputs.error("compare", str(exc), config.statistic)
    result = outputs.result("compare", config.statistic, config.policy, verdicts=rechecked,
                            base={"ref": str(request.run_a)}, candidate={"ref": str(request.run_b)},
                            repeats=max((len(t.pairs) for t in tracks.values()), default=0))
    result.unit = "pair"
    result.warnings.append(describe(tracks))
    result.wall_s = time.perf_counter() - start
    return outputs.finish(result, out)
