"""``critpath gate-power``: the gate's false-alarm rate and power, measured the way users run it.

Each *cell* is one kind of gate (one case alone, or a group of cases under Holm) on one kind of
change: none (A/A: the candidate is an empty commit on top of the base), or a known slowdown of
one case committed to a throwaway branch of a private clone (``harness.gatepower.inject``). Every
trial is a real ``critpath gate`` process on those two commits, with the default exit rules:
what a CI job would run. Trials go round the cells in turn, so the machine's drift over the
session is shared by every cell.

A trial *fails the build* when the gate exits 1. On an A/A cell that is a false alarm; on a
slowdown cell it is a detection when the slowed case itself was found (regressed, or a likely
regression at the budget). Rates come with Clopper-Pearson 95 % intervals.

``--tools asv,pytest-benchmark`` also runs those tools on the same commits for the one-rank
single-case cells (``harness.gatepower.tools``), in the same session.

Everything measured is appended to ``power.json`` in ``--out`` after each trial; ``--resume``
carries on from there, ``--report`` prints the tables from it. The clone stays in ``--out``; the
worktrees of it that gate-power and its gates check out are ``harness.gate.trees.checkout``'s,
removed when they are done, and a gate-power killed outright leaves them to the next run into the
same ``--out``, which removes them first.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

import jsonschema
import numpy as np
import scipy  # scipy.stats loads on first use (scipy's lazy loading): gate-power --help does not pay it

from harness.core import atomic, registry
from harness.core.claim import claim_dir, refuse_links_below
from harness.core.figures import FigureUnavailable
from harness.core.git import run_git
from harness.core.inputfile import read_bounded
from harness.core.jsonfile import JsonFileError, JsonLimits, loads_strict
from harness.core.numbers import NumberError, parse_float
from harness.core.options import (absolute, at_least, comma_separated, given_flags, number_in, path_option, positive,
                                  print_error, refuse_given)
from harness.core.schema import strict_validator
from harness.gate.between import heterogeneity, log_pct, pooled
from harness.gate.config import MAX_MIN_EFFECT
from harness.gate.factors import FACTORS
from harness.gate.outputs import EXIT_COULD_NOT_RUN, EXIT_REGRESSION, fails_build
from harness.gate.schedule import MAX_BUDGET_S, MAX_ROUNDS, Plan, Schedule
from harness.gate.sequential import estimate_se, hodges_lehmann, min_detectable_effect
from harness.gate.sides import RoundCase, WorkerSide
from harness.gate.trees import BASE, CANDIDATE, Tree, TreeError, checkout, repo_root, resolve, sweep_orphans
from harness.gate.values import default_direction, statistic_option
from harness.gatepower import inject, tools
from harness.gatepower.resample import GATE_JSON_LIMITS, MAX_GATE_JSON_BYTES, MeasuredGate, resampled_rate
from harness.run.lifetime import interrupt_signal, stop_signals_unwind, stop_with_parent

SCHEMA = "critpath.gate-power/2"
AA = "A/A"
OWNER = "critpath gate-power"  # of the worktrees gate-power checks out itself (its gates' are "critpath gate")
TOOLS = ("asv", "pytest-benchmark")
RESAMPLE_SHIFTS = (0.05, 0.10)  # sizes of the targets in docs/gate.md, replayed as modelled slowdowns
GATE_STOP_S = 30.0  # how long an interrupted gate gets to remove its worktrees and workers
CALIBRATION_ROUNDS = 3
CALIBRATION_PAIRS = 32  # pairs per sizing step: at 10-20 % noise per pair, 16 left +-3-5 % on the effect
CALIBRATION_STEPS = 4
CALIBRATION_TOLERANCE = 0.25  # of the fraction asked for: +10 % means +7.5 to +12.5 % measured


# A case ID is "family/key=value,key=value": its own commas separate parameters, so a list of IDs
# splits only at a comma that starts another "family/".
_NEXT_ID = re.compile(r",(?=[A-Za-z_][A-Za-z0-9_]*/)")


def _case_ids(text: str) -> tuple[str, ...]:
    ids = tuple(p.strip() for p in _NEXT_ID.split(text) if p.strip())
    if len(ids) < 2:
        raise argparse.ArgumentTypeError(f"a group needs two or more case IDs (family/params,family/params,...), "
                                         f"got {text!r}")
    return ids


NO_SLOWDOWNS = "none"  # A/A gates only: the false-alarm rate, said out loud rather than as an empty list


def _slowdowns(text: str) -> tuple[tuple[str, float], ...]:
    if text.strip() == NO_SLOWDOWNS:
        return ()
    out = []
    for part in comma_separated(text):
        kind, _, fraction = part.partition(":")
        if kind not in inject.KINDS or not fraction:
            raise argparse.ArgumentTypeError(f"slowdown {part!r}: expected KIND:FRACTION with KIND one of "
                                             f"{', '.join(inject.KINDS)}, e.g. uniform:0.10")
        try:
            parse_float(fraction, "fraction")
        except NumberError:
            raise argparse.ArgumentTypeError(f"slowdown {part!r}: the fraction {fraction!r} is not a number") from None
        try:
            out.append((kind, _fraction(fraction)))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"slowdown {part!r}: the fraction {fraction!r} {exc}") from None
    return tuple(out)


# power.json: every gate's summary of a measurement, a few kB each.
MAX_POWER_JSON_BYTES = 256 << 20
MAX_TRIALS = 10_000  # real gates per cell: at minutes a gate, far beyond any measurement
# A measurement of 100 cells of 100 trials, each a gate of 5 cases, holds some 600,000 keys; the
# nesting is 6 levels (trials[0].cases[ID].ratio, tool_trials[0].verdicts[0].ratio).
POWER_JSON_LIMITS = JsonLimits(keys=2_000_000, values=8_000_000, depth=16)

_NUMBER_OR_NULL = {"type": ["number", "null"]}
_STRING_OR_NULL = {"type": ["string", "null"]}
_COUNT_OR_NULL = {"type": ["integer", "null"], "minimum": 0}
# What --report and --resume read of a stored measurement (others fields pass): a file of another
# shape was a TypeError or a bare KeyError. Each object is required to hold the fields read
# without a default; a trial's, a tool's or a replay's cell must be one of the cells.
POWER_SCHEMA = {
    "type": "object",
    "required": ["base", "settings", "cells", "trials"],
    "properties": {
        "base": {"type": "string", "minLength": 1},
        "settings": {
            "type": "object", "required": ["budget_s", "min_effect", "statistic", "rounds"],
            "properties": {"budget_s": {"type": "number", "exclusiveMinimum": 0},
                           "min_effect": {"type": "number", "minimum": 0},
                           "statistic": _STRING_OR_NULL, "rounds": {"type": ["integer", "null"], "minimum": 1},
                           "trials": {"type": "integer", "minimum": 1, "maximum": MAX_TRIALS},
                           "tool_trials": {"type": "integer", "minimum": 0, "maximum": MAX_TRIALS},
                           "tools": {"type": "array", "items": {"enum": list(TOOLS)}}}},
        "cells": {"type": "array", "items": {
            "type": "object", "required": ["name", "case_ids", "condition", "candidate"],
            "properties": {"name": {"type": "string"}, "condition": {"type": "string"},
                           "case_ids": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                           "candidate": {"type": "string"}, "target": _STRING_OR_NULL,
                           "rounds": {"type": ["integer", "null"], "minimum": 1},
                           "toggle": {"enum": [None, *FACTORS]}, "measure_only": {"type": "boolean"}}}},
        "trials": {"type": "array", "items": {
            "type": "object", "required": ["cell", "trial", "exit_code", "wall_s", "cases"],
            "properties": {"cell": {"type": "string"}, "trial": {"type": "integer", "minimum": 0},
                           "exit_code": {"type": "integer"}, "wall_s": {"type": "number", "minimum": 0},
                           "cases": {"type": "object", "additionalProperties": {
                               "type": "object",
                               "properties": {"outcome": {"type": "string"}, "likely_regression": {"type": "boolean"},
                                              # a ratio's log is taken: a ratio is positive
                                              "ratio": {"type": ["number", "null"], "exclusiveMinimum": 0},
                                              "low": _NUMBER_OR_NULL, "high": _NUMBER_OR_NULL,
                                              "n_pairs": _COUNT_OR_NULL, "mde": _NUMBER_OR_NULL,
                                              "decided_at_s": _NUMBER_OR_NULL,
                                              "noise_per_pair": {"type": ["number", "null"], "minimum": 0},
                                              "seconds_per_pair": {"type": ["number", "null"], "minimum": 0},
                                              "reason": _STRING_OR_NULL}}}}}},
        "tool_trials": {"type": "array", "items": {
            "type": "object", "required": ["cell", "tool", "trial"],
            "properties": {"cell": {"type": "string"}, "tool": {"type": "string"},
                           "trial": {"type": "integer", "minimum": 0},
                           "verdicts": {"type": "array", "items": {
                               "type": "object", "required": ["tool", "rule", "fails"],
                               "properties": {"tool": {"type": "string"}, "rule": {"type": "string"},
                                              "fails": {"type": ["boolean", "null"]}, "ratio": _NUMBER_OR_NULL}}}}}},
        "branches": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["fraction", "sha"],
            "properties": {"fraction": {"type": "number"}, "sha": {"type": "string"}}}},
        "resampled": {
            "type": "object", "required": ["gates_per_cell", "rows"],
            "properties": {"gates_per_cell": {"type": "integer", "minimum": 0}, "rows": {"type": "array", "items": {
                "type": "object", "required": ["cell"],
                "properties": {"cell": {"type": "string"}, "shift": {"type": "number"}, "why": {"type": "string"},
                               "gates": _COUNT_OR_NULL},
                # a row of replayed gates holds what the table prints of it
                "if": {"required": ["gates"], "properties": {"gates": {"type": "integer", "minimum": 1}}},
                "then": {"required": ["distinct_pairs", "measured_gates", "fails", "rate", "ci95", "wall_median_s",
                                      "wall_max_s"],
                         "properties": {"distinct_pairs": {"type": "object",
                                                           "additionalProperties": {"type": "integer"}},
                                        "measured_gates": {"type": "integer"}, "fails": {"type": "integer"},
                                        "rate": {"type": "number"}, "wall_median_s": {"type": "number"},
                                        "wall_max_s": {"type": "number"},
                                        "ci95": {"type": "array", "minItems": 2, "maxItems": 2,
                                                 "items": {"type": "number"}}}}}}}},
    },
}
# --resume carries a measurement on: it needs what started it too.
RESUME_REQUIRED = {"": ["aa", "clone", "branches", "tool_trials"], "settings": ["trials", "tools", "tool_trials"]}
_POWER_VALIDATOR = strict_validator(POWER_SCHEMA)
# A slowdown injected, as a fraction of the case's time: above 5, no gate needs measuring.
_fraction = number_in(0.0, MAX_MIN_EFFECT)
_rounds = at_least(1, MAX_ROUNDS)


def _rounds_sweep(text: str) -> tuple[int, ...]:
    return tuple(_rounds(x) for x in comma_separated(text))


def _toggles(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(comma_separated(text)))
    unknown = [n for n in names if n not in FACTORS]
    if unknown:
        raise argparse.ArgumentTypeError(f"no such factor: {', '.join(unknown)}; the factors are {', '.join(FACTORS)}")
    return names


def register(sub) -> None:
    p = sub.add_parser("gate-power", help="measure the gate's false-alarm rate and power on real trees with injected slowdowns",
                       description="Run real critpath gate processes on an A/A commit and on committed slowdowns "
                                   "(uniform and partial) of real cases, and report how often each fails the build, "
                                   "with Clopper-Pearson intervals. See docs/gate.md.")
    p.add_argument("--case", dest="case_ids", action="append", default=[], metavar="ID",
                   help="a case gated alone (repeatable); each is also slowed on its own branch")
    p.add_argument("--group", dest="groups", action="append", default=[], type=_case_ids, metavar="ID,ID,...",
                   help="a multi-case gate (Holm across its cases); its first case is the one slowed")
    p.add_argument("--slowdowns", type=_slowdowns, default=(("uniform", 0.10), ("partial", 0.10)),
                   help=f"KIND:FRACTION,... (default uniform:0.10,partial:0.10), or {NO_SLOWDOWNS!r} for A/A gates only")
    p.add_argument("--trials", type=at_least(1, MAX_TRIALS), default=20, help="real gates per cell (default 20)")
    p.add_argument("--budget", type=positive(float, MAX_BUDGET_S), default=Plan.budget_s, help=f"--budget of each gate (default {Plan.budget_s:g})")
    p.add_argument("--min-effect", type=_fraction, default=0.05, help="--min-effect of each gate (default 0.05)")
    p.add_argument("--statistic", type=statistic_option, default=None, help="--statistic of each gate (default: the gate's)")
    p.add_argument("--rounds", type=_rounds, default=None, help="--rounds of each gate (default: the gate's)")
    p.add_argument("--rounds-sweep", type=_rounds_sweep, default=(), metavar="K,K,...",
                   help="instead: A/A gates of each --case at each --rounds, run to the budget, for the trade-off "
                        "between rounds per process pair and fresh processes")
    p.add_argument("--toggles", type=_toggles, default=(), metavar="FACTOR,...",
                   help="instead: A/A gates of each --case with each FACTOR toggled (gate --toggle), beside A/A gates "
                        "with none, to find what offsets a whole gate (docs/gate.md)")
    p.add_argument("--tools", type=comma_separated, default=(), help=f"also run these on the same commits: {','.join(TOOLS)}")
    p.add_argument("--tool-trials", type=at_least(1, MAX_TRIALS), default=10, help="trials per tool and change (default 10)")
    p.add_argument("--out", type=path_option, default=Path("reports/gate-power"),
                   help="directory for power.json and every gate")
    p.add_argument("--resume", action="store_true",
                   help="carry on with the measurement already in --out: every cell, or only the cells of the "
                        "--case and --group given")
    p.add_argument("--report", type=path_option, metavar="POWER_JSON", help="print the tables of a stored measurement")
    p.add_argument("--resample", type=at_least(0, MAX_TRIALS), default=0, metavar="GATES",
                   help="with --report: also replay GATES gates per cell from the pairs its real gates measured "
                        "(labelled resampled) and store them in POWER_JSON")
    p.set_defaults(func=cmd_power, measure_defaults={dest: p.get_default(dest) for dest in MEASURE_ONLY})


# The options that shape a measurement (argparse dest -> flag): --report prints one stored, and
# would leave each of them unread.
MEASURE_ONLY = {"case_ids": "--case", "groups": "--group", "slowdowns": "--slowdowns", "trials": "--trials",
                "budget": "--budget", "min_effect": "--min-effect", "statistic": "--statistic", "rounds": "--rounds",
                "rounds_sweep": "--rounds-sweep", "toggles": "--toggles", "tools": "--tools",
                "tool_trials": "--tool-trials", "out": "--out",
                "resume": "--resume"}


# -- the measurement -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PowerRequest:
    """What ``critpath gate-power`` was asked to measure, read once from its command line."""

    case_ids: tuple[str, ...]  # each gated alone, and slowed on its own branch
    groups: tuple[tuple[str, ...], ...]  # multi-case gates; the first case is the one slowed
    slowdowns: tuple[tuple[str, float], ...]  # (kind, fraction)
    trials: int  # real gates per cell
    budget_s: float  # each gate's --budget
    min_effect: float  # each gate's --min-effect
    statistic: Optional[str]  # each gate's --statistic; None: the gate's default
    rounds: Optional[int]  # each gate's --rounds; None: the gate's default
    rounds_sweep: tuple[int, ...]  # instead: A/A gates of each case at each of these --rounds
    toggles: tuple[str, ...]  # instead: A/A gates of each case with each of these factors toggled, and with none
    tools: tuple[str, ...]  # other tools run on the same commits
    tool_trials: int
    out: Path
    resume: bool  # carry on with the measurement already in out


@dataclass(frozen=True)
class Cell:
    name: str
    case_ids: tuple[str, ...]
    condition: str  # "A/A" or a slowdown's label
    candidate: str  # the commit the gate's candidate is
    target: Optional[str] = None  # the case slowed; None for A/A
    rounds: Optional[int] = None  # the gate's --rounds, when the cell sets its own (a rounds sweep)
    toggle: Optional[str] = None  # the gate's --toggle (a factor sweep)
    measure_only: bool = False  # a sweep: the gate runs to its budget and measures, never stops as unchanged


def _calibrate(tree: Tree, case_id: str, out: Path) -> float:
    """The case's mean iteration time on the base tree: a few worker rounds, their median."""
    side = WorkerSide(tree, "base", 0, out, {"timeout_s": 60.0, "warmup": None, "target_s": Plan.window_s})
    side.start()
    try:
        side.await_ready(120)
        values = []
        for r in range(CALIBRATION_ROUNDS):
            result = side.run_round(r, [RoundCase(case_id)], 120)
            record = result.records.get(case_id)
            if record is None or not record.ok:
                raise TreeError(f"calibrating {case_id}: {result.error or (record and record.error)}")
            values.append(float(np.mean(record.samples_ns)))
    finally:
        side.stop()
    return float(np.median(values))


@dataclass(frozen=True)
class _Open:
    """The decision of a schedule that only measures: never decided."""

    outcome: Optional[str] = None


def _never(tau, pairs, final):
    return {case_id: _Open() for case_id in pairs}


def realized_ratio(repo: Path, base_sha: str, cand_sha: str, case_id: str, out: Path,
                   pairs: int = CALIBRATION_PAIRS) -> float:
    """What a slowdown does to the case's mean, measured as the gate measures it: pairs of fresh
    processes on the two commits, interleaved; the Hodges-Lehmann estimate of their ratio."""
    with checkout(repo, base_sha, BASE) as base, checkout(repo, cand_sha, CANDIDATE) as cand:
        plan = Plan(budget_s=math.inf, max_pairs=pairs, look_every_s=math.inf)
        result = Schedule([case_id], {BASE: base, CANDIDATE: cand}, "worker", plan, out, "mean_ns", _never).run()
    track = result.tracks[case_id]
    if track.problem or len(track.pairs) < 2:
        raise TreeError(f"measuring the slowdown of {case_id}: {track.problem or 'no pairs'}")
    return math.exp(hodges_lehmann(track.pairs))


def _calibrated_slowdown(clone: Path, base_sha: str, branch: str, wanted: inject.Slowdown, out: Path) -> dict:
    """Commit the slowdown, measure what it does to the case's mean, and resize it until that is
    within ``CALIBRATION_TOLERANCE`` of the fraction asked for (at most ``CALIBRATION_STEPS``
    measurements): "+10 %" must mean +10 % measured, and a busy-wait does not cost its length.
    A wait of 10 % of a round trip slowed it by 22 % here (the peer sleeps meanwhile and wakes
    later); in a two-rank allreduce the spinning main thread also holds off the transport's own
    thread, and small waits cost several times their length. The sizes tried come from the
    measured (wait, effect) points (``_next_scale``); the branch keeps the closest."""
    tried: list[tuple[float, float]] = []  # (scale, measured effect)
    slowdown, sha = wanted, ""
    for step in range(CALIBRATION_STEPS):
        if tried:
            slowdown = replace(wanted, scale=_next_scale(tried, wanted.fraction))
        sha = inject.commit_slowdowns(clone, base_sha, branch, [slowdown])
        effect = realized_ratio(clone, base_sha, sha, wanted.case_id, out / f"step-{step}") - 1.0
        tried.append((slowdown.scale, effect))
        print(f"  {wanted.label} on {wanted.case_id}: a wait of {slowdown.wait_ns / 1e3:.1f} us every "
              f"{slowdown.every} step(s) gives {effect * 100:+.1f} %", file=sys.stderr, flush=True)
        if abs(effect - wanted.fraction) <= CALIBRATION_TOLERANCE * wanted.fraction:
            break
    scale, effect = _closest(tried, wanted.fraction)
    if scale != slowdown.scale:  # the last try was not the closest: commit the one that was
        slowdown = replace(wanted, scale=scale)
        sha = inject.commit_slowdowns(clone, base_sha, branch, [slowdown])
    return {"sha": sha, **inject.describe({branch: slowdown})[0],
            "calibration": [{"scale": sc, "effect": ef} for sc, ef in tried], "calibrated_effect": effect}


def _next_scale(tried: list[tuple[float, float]], target: float) -> float:
    """The next size to try. Effects measured on a few dozen pairs scatter by a few percent, so a secant
    through the last two points can leap far; instead interpolate between the closest points
    either side of the target once there are some, else scale the closest point proportionally."""
    below = [(s, e) for s, e in tried if e < target]
    above = [(s, e) for s, e in tried if e >= target]
    if below and above:
        (s0, e0), (s1, e1) = max(below, key=lambda p: p[1]), min(above, key=lambda p: p[1])
        if e1 > e0:
            return s0 + (target - e0) * (s1 - s0) / (e1 - e0)
    s1, e1 = _closest(tried, target)
    return s1 * target / e1 if e1 > 0 else s1 * 2.0


def _closest(tried: list[tuple[float, float]], target: float) -> tuple[float, float]:
    return min(tried, key=lambda p: abs(p[1] - target))


def _git(repo: Path, *args: str) -> str:
    return run_git(repo, *args, check=True).stdout.strip()


def _prepare(request: PowerRequest, out: Path) -> dict:
    """Clone, calibrate, commit the A/A and slowdown branches; the plan of the measurement."""
    repo = repo_root(Path.cwd())
    base_sha = resolve(repo, "HEAD")
    clone = out / "clone"
    if clone.exists():
        shutil.rmtree(clone)
    inject.clone(repo, clone)
    _git(clone, "checkout", "--quiet", "--force", "-B", "gate-power/aa", base_sha)
    _git(clone, "commit", "--quiet", "--allow-empty", "-m", "gate-power: A/A (no change)")
    aa_sha = _git(clone, "rev-parse", "HEAD")
    sweep = bool(request.rounds_sweep or request.toggles)  # A/A gates only: nothing slowed
    targets = [] if sweep else list(dict.fromkeys(list(request.case_ids) + [g[0] for g in request.groups]))
    calibration, branches = {}, {}
    with checkout(clone, base_sha, BASE, OWNER) as base_tree:
        for case_id in targets:
            mean_ns = _calibrate(base_tree, case_id, out / "calibration" / f"case-{targets.index(case_id)}")
            calibration[case_id] = mean_ns
            print(f"calibrated {case_id}: mean {mean_ns / 1e3:.1f} us per iteration", file=sys.stderr)
            for kind, fraction in request.slowdowns:
                slowdown = inject.Slowdown(case_id, kind, fraction, mean_ns)
                name = inject.branch_name(slowdown, len(branches))
                branches[name] = _calibrated_slowdown(clone, base_sha, name, slowdown,
                                                      out / "calibration" / name.replace("/", "-"))
    cells = []
    if request.rounds_sweep:
        cells = [Cell(f"{case_id}: {AA}, {k} rounds", (case_id,), AA, aa_sha, rounds=k, measure_only=True)
                 for k in request.rounds_sweep for case_id in request.case_ids]
    if request.toggles:
        cells = [Cell(f"{case_id}: {AA}, {toggle or 'nothing'} toggled", (case_id,), AA, aa_sha, toggle=toggle,
                      measure_only=True) for toggle in (None, *request.toggles) for case_id in request.case_ids]
    gates = [] if sweep else [(c,) for c in request.case_ids] + [tuple(g) for g in request.groups]
    for case_ids in gates:
        label = case_ids[0] if len(case_ids) == 1 else f"{len(case_ids)} cases, {case_ids[0]} first"
        cells.append(Cell(f"{label}: {AA}", case_ids, AA, aa_sha))
        for b in branches.values():
            if b["case_id"] == case_ids[0]:
                condition = inject.Slowdown(b["case_id"], b["kind"], b["fraction"], b["mean_ns"], b["scale"]).label
                cells.append(Cell(f"{label}: {condition}", case_ids, condition, b["sha"], b["case_id"]))
    return {
        "schema": SCHEMA, "repo": str(repo), "base": base_sha, "aa": aa_sha, "clone": str(clone),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": {"trials": request.trials, "budget_s": request.budget_s, "min_effect": request.min_effect,
                     "statistic": request.statistic, "rounds": request.rounds, "tools": list(request.tools),
                     "tool_trials": request.tool_trials},
        "calibration_mean_ns": calibration, "branches": branches, "cells": [asdict(c) for c in cells],
        "trials": [], "tool_trials": [],
    }


def _save(out: Path, doc: dict, name: str = "power.json") -> None:
    """Written whole, then renamed: an interrupted write leaves the previous file as it was. It is
    the campaign's own state, read back by --resume and --report, so it may replace what was read."""
    atomic.write_json(out / name, doc, indent=1, sort_keys=False, updates=True)


def _field(where: list, error) -> str:
    """The field a schema error is about, as ``trials[0].cases`` (a required one: the one missing)."""
    if error.validator == "required" and isinstance(error.instance, dict):
        where = [*where, *[k for k in error.validator_value if k not in error.instance][:1]]
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where).lstrip(".") or "(document)"


def _check_document(path: Path, doc, resume: bool) -> dict:
    """``doc`` when it is a measurement as gate-power writes it; ValueError naming the file and field."""
    def refuse(field_name: str, why: str):
        raise ValueError(f"{path}: not a readable gate-power measurement: field {field_name}: {why}")

    error = jsonschema.exceptions.best_match(_POWER_VALIDATOR.iter_errors(doc))
    if error is not None:
        refuse(_field(list(error.absolute_path), error), error.message)
    for field_name, value in atomic.non_finite(doc)[:1]:  # gate-power never writes one: strict JSON out
        refuse(field_name, f"{value} is not a finite number")
    names = {c["name"] for c in doc["cells"]}
    for section in ("trials", "tool_trials"):
        # a trial is counted from 0 within the settings' count of it (settings.trials, settings.tool_trials)
        count = doc["settings"].get(section)
        for i, entry in enumerate(doc.get(section, ())):
            if entry["cell"] not in names:
                refuse(f"{section}[{i}].cell", f"{entry['cell']!r} is none of the cells")
            if count is not None and entry["trial"] >= count:
                refuse(f"{section}[{i}].trial", f"{entry['trial']} is beyond settings.{section}: trials are "
                                                f"numbered 0 to {count - 1}")
    for i, row in enumerate((doc.get("resampled") or {}).get("rows", ())):
        if row["cell"] not in names:
            refuse(f"resampled.rows[{i}].cell", f"{row['cell']!r} is none of the cells")
    if resume:
        for section, keys in RESUME_REQUIRED.items():
            held = doc[section] if section else doc
            missing = [k for k in keys if k not in held]
            if missing:
                refuse(f"{section + '.' if section else ''}{missing[0]}", "missing: --resume carries on from it")
    return doc


def _load(path: Path, resume: bool = False) -> dict:
    try:
        doc = loads_strict(read_bounded(path, "gate-power measurement", MAX_POWER_JSON_BYTES), str(path),
                           POWER_JSON_LIMITS)
    except (OSError, JsonFileError) as exc:  # OSError: absent, unreadable, or not a regular file within the limit
        raise ValueError(f"{path}: not a readable gate-power measurement ({exc})") from None
    return _check_document(path, doc, resume)


def _gate_trial(doc: dict, cell: Cell, trial: int, out: Path, base_tree: Tree) -> dict:
    settings = doc["settings"]
    trial_dir = out / "gates" / f"cell-{[c['name'] for c in doc['cells']].index(cell.name):02d}" / f"trial-{trial:02d}"
    if trial_dir.exists():
        shutil.rmtree(trial_dir)  # an interrupted trial is measured again, whole
    args = [sys.executable, "-m", "harness", "gate", "--repo", doc["clone"], "--base", doc["base"],
            "--candidate", cell.candidate, "--budget", str(settings["budget_s"]),
            "--min-effect", str(settings["min_effect"]), "--out", str(trial_dir)]
    for case_id in cell.case_ids:
        args.append(f"--case={case_id}")  # one word: never read as an option
    if settings["statistic"]:
        args += ["--statistic", settings["statistic"]]
    rounds = cell.rounds or settings["rounds"]
    if rounds:
        args += ["--rounds", str(rounds)]
    if cell.toggle:
        args += ["--toggle", cell.toggle]
    if cell.rounds or cell.measure_only:
        # A sweep measures noise and pace per pair: run to the budget, never stop as unchanged.
        args[args.index("--min-effect") + 1] = "0"
    # The gate itself runs from the base commit's tree, not from this checkout: every trial of a
    # measurement is then the same gate, whatever this checkout becomes meanwhile. Killed outright,
    # this process cannot stop it: SIGTERM on this one's death lets it remove its worktrees itself.
    start = time.perf_counter()
    with open(out / "gates" / "gates.log", "ab") as log:
        gate = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=base_tree.path, env=base_tree.env(), preexec_fn=stop_with_parent)
        try:
            code = gate.wait()
        except BaseException:
            # Interrupted: the gate removes its worktrees and workers on SIGTERM; then it is gone.
            gate.send_signal(signal.SIGTERM)
            try:
                gate.wait(GATE_STOP_S)
            except subprocess.TimeoutExpired:
                gate.kill()
                gate.wait()
            raise
    wall_s = time.perf_counter() - start
    record = {"cell": cell.name, "trial": trial, "exit_code": code, "wall_s": round(wall_s, 2), "cases": {}}
    gate_json = trial_dir / "gate.json"
    if gate_json.exists():
        data = loads_strict(read_bounded(gate_json, "gate.json", MAX_GATE_JSON_BYTES), str(gate_json), GATE_JSON_LIMITS)
        record["stopped"] = data.get("extra", {}).get("stopped")
        record["generations"] = data.get("extra", {}).get("generations")
        for case in data["cases"]:
            comparison = case.get("comparison") or {}
            detail = case.get("detail") or {}
            record["cases"][case["case_id"]] = {
                "outcome": case["outcome"], "likely_regression": case.get("likely_regression", False),
                "ratio": comparison.get("ratio"), "low": comparison.get("ci_low"), "high": comparison.get("ci_high"),
                "n_pairs": detail.get("n_pairs"), "mde": detail.get("mde"), "decided_at_s": detail.get("decided_at_s"),
                "noise_per_pair": detail.get("noise_per_pair"), "seconds_per_pair": detail.get("seconds_per_pair"),
                "reason": case["reason"],
            }
    return record


def _tool_trees(doc: dict, stack: contextlib.ExitStack) -> dict:
    """Worktrees of every candidate commit, for the tools (the gate makes its own), removed when
    ``stack`` closes."""
    return {sha: stack.enter_context(checkout(Path(doc["clone"]), sha, CANDIDATE, OWNER)).path
            for sha in {doc["aa"], *(b["sha"] for b in doc["branches"].values())}}


def _tool_trial(doc: dict, cell: Cell, tool: str, trial: int, out: Path, base_tree: Tree, trees: dict) -> dict:
    pair = {"base": (doc["base"], base_tree.path), "candidate": (cell.candidate, trees[cell.candidate])}
    scratch = out / "tools" / tool / f"{cell.candidate[:12]}-trial-{trial:02d}"
    if scratch.exists():
        shutil.rmtree(scratch)
    record = {"cell": cell.name, "tool": tool, "trial": trial, "verdicts": []}
    start = time.perf_counter()
    try:
        if tool == "asv":
            verdicts = [tools.asv_trial(scratch, Path(doc["clone"]), cell.case_ids[0], pair)]
        else:
            verdicts = tools.pytest_benchmark_trial(scratch, cell.case_ids[0], pair)
        record["verdicts"] = [v.to_dict() for v in verdicts]
    except (tools.ToolError, subprocess.TimeoutExpired, OSError) as exc:
        record["error"] = str(exc)
    record["wall_s"] = round(time.perf_counter() - start, 2)
    return record


def _one_rank(case_id: str) -> bool:
    return registry.parse(case_id).world == 1


def _chosen(cells: list[Cell], request: PowerRequest, out: Path) -> list[Cell]:
    """On --resume, the stored cells of the gates named by --case and --group; all of them when none is
    named. A name that matches no stored cell is refused: carrying on nothing would look like done."""
    wanted = [(cid,) for cid in request.case_ids] + [tuple(g) for g in request.groups]
    if not wanted:
        return cells
    stored = {c.case_ids for c in cells}
    missing = [w for w in wanted if w not in stored]
    if missing:
        raise ValueError(f"{out / 'power.json'} has no cells for {','.join(missing[0])}; it measures: "
                         + "; ".join(sorted({','.join(c.case_ids) for c in cells})))
    return [c for c in cells if c.case_ids in wanted]


def _sweep(out: Path) -> None:
    """Remove the worktrees of ``out``'s clone that a gate-power killed outright, or its gates,
    left there (wherever their temp dir): nothing else ever removes them, and a rerun refused as
    "not empty", or the clone removed by hand, would leave them for ever."""
    clone = out / "clone"
    if (clone / ".git").is_dir():
        for removed in sweep_orphans(clone):
            print(f"critpath gate-power: {removed}", file=sys.stderr)


def _unmeasurable(statistic: Optional[str], case_ids) -> Optional[str]:
    """Why some gate would not run on ``statistic``, as the gate refuses it for a named case (a
    figure the case's family does not declare, or one that is neither better nor worse): before
    any clone, not as every trial's could-not-run."""
    for case_id in case_ids if statistic else ():
        try:
            default_direction(case_id, statistic)
        except FigureUnavailable as exc:
            return f"--statistic {statistic}: {case_id}: {exc}"
    return None


def measure(request: PowerRequest) -> dict:
    out = request.out
    claim = claim_dir(out, "gate-power")
    _sweep(out)
    if request.resume:
        doc = _load(out / "power.json", resume=True)
    else:
        if claim.contents():
            raise ValueError(f"{out} is not empty; choose another --out or --resume")
        doc = _prepare(request, out)
        _save(out, doc)
    cells = [Cell(**{**c, "case_ids": tuple(c["case_ids"])}) for c in doc["cells"]]
    if request.resume:
        cells = _chosen(cells, request, out)
    refuse_links_below(out, out / "gates")  # each gate's --out is below it: never through a link to elsewhere
    (out / "gates").mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        base_tree = stack.enter_context(checkout(Path(doc["clone"]), doc["base"], BASE, OWNER))
        _trials(doc, cells, out, base_tree, stack)
    # Finished only when every stored cell has its trials, not just the cells this resume chose.
    settings = doc["settings"]
    if all((c["name"], t) in {(r["cell"], r["trial"]) for r in doc["trials"]}
           for c in doc["cells"] for t in range(settings["trials"])):
        doc["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _save(out, doc)
    return doc


def _trials(doc: dict, cells: list[Cell], out: Path, base_tree: Tree, stack: contextlib.ExitStack) -> None:
    """Every trial of ``cells`` not stored yet, each stored as it ends."""
    settings = doc["settings"]
    done = {(t["cell"], t["trial"]) for t in doc["trials"]}
    tool_done = {(t["cell"], t["tool"], t["trial"]) for t in doc["tool_trials"]}
    tool_cells = [c for c in cells if len(c.case_ids) == 1 and _one_rank(c.case_ids[0])]
    trees = _tool_trees(doc, stack) if settings["tools"] and tool_cells else {}
    total = settings["trials"] * len(cells)
    measured = sum(1 for t in doc["trials"] if t["cell"] in {c.name for c in cells})
    for trial in range(settings["trials"]):
        for cell in cells:
            if (cell.name, trial) in done:
                continue
            record = _gate_trial(doc, cell, trial, out, base_tree)
            doc["trials"].append(record)
            _save(out, doc)
            measured += 1
            target = record["cases"].get(cell.target or cell.case_ids[0], {})
            seen = "" if target.get("ratio") is None else f"{(target['ratio'] - 1) * 100:+.1f} %"
            print(f"[{measured}/{total}] {cell.name} trial {trial + 1}: exit {record['exit_code']}, "
                  f"{record['wall_s']:.0f} s, {target.get('outcome')} {seen}", file=sys.stderr, flush=True)
        if trial < settings["tool_trials"]:
            for cell in tool_cells:
                for tool in settings["tools"]:
                    if (cell.name, tool, trial) in tool_done:
                        continue
                    doc["tool_trials"].append(_tool_trial(doc, cell, tool, trial, out, base_tree, trees))
                    _save(out, doc)


# -- the analysis ------------------------------------------------------------------------------------


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    ci = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def _fails(case: dict) -> bool:
    """Whether a stored case failed the build under the default exit rules."""
    return fails_build(case.get("outcome"), bool(case.get("likely_regression")))


def analyse(doc: dict) -> list[dict]:
    rows = []
    for c in doc["cells"]:
        cell = Cell(**{**c, "case_ids": tuple(c["case_ids"])})
        trials = [t for t in doc["trials"] if t["cell"] == cell.name]
        n = len(trials)
        fails = sum(1 for t in trials if t["exit_code"] == EXIT_REGRESSION)
        could_not = sum(1 for t in trials if t["exit_code"] == EXIT_COULD_NOT_RUN)
        watched = cell.target or cell.case_ids[0]
        if cell.target:
            hits = sum(1 for t in trials if t["exit_code"] == EXIT_REGRESSION and _fails(t["cases"].get(watched, {})))
        else:
            hits = fails
        others = [cid for cid in cell.case_ids if cid != cell.target]
        other_alarms = sum(1 for t in trials if any(_fails(t["cases"].get(cid, {})) for cid in others)) \
            if cell.target and others else None
        walls = [t["wall_s"] for t in trials]
        ratios = [t["cases"].get(watched, {}).get("ratio") for t in trials]
        ratios = [r for r in ratios if r is not None]
        pairs = [t["cases"].get(watched, {}).get("n_pairs") for t in trials]
        pairs = [p for p in pairs if p is not None]
        mdes = [t["cases"].get(watched, {}).get("mde") for t in trials]
        mdes = [m for m in mdes if m is not None]
        outcomes = {}
        for t in trials:
            o = t["cases"].get(watched, {}).get("outcome", f"exit {t['exit_code']}")
            if t["cases"].get(watched, {}).get("likely_regression"):
                o += " (likely)"
            outcomes[o] = outcomes.get(o, 0) + 1
        low, high = clopper_pearson(hits, n)
        rows.append({
            "cell": cell.name, "gate_cases": len(cell.case_ids), "condition": cell.condition, "trials": n,
            "fails_build": fails, "counted": hits, "rate": hits / n if n else math.nan, "ci95": [low, high],
            "could_not_run": could_not, "other_case_alarms": other_alarms,
            "wall_median_s": float(np.median(walls)) if walls else math.nan,
            "wall_max_s": max(walls) if walls else math.nan,
            "effect_median": float(np.median(ratios)) - 1 if ratios else math.nan,
            "pairs_median": float(np.median(pairs)) if pairs else math.nan,
            "mde_median": float(np.median(mdes)) if mdes else math.nan,
            "outcomes": outcomes,
        })
    return rows


def _gate_estimates(doc: dict, cell: dict) -> tuple[list[float], list[float]]:
    """Each of the cell's gates' log estimate of its watched case, and that estimate's standard error."""
    watched = cell.get("target") or cell["case_ids"][0]
    est, se = [], []
    for t in doc["trials"]:
        case = t["cases"].get(watched, {}) if t["cell"] == cell["name"] else {}
        if case.get("ratio") and case.get("noise_per_pair") and case.get("n_pairs"):
            est.append(math.log(case["ratio"]))
            se.append(estimate_se(case["noise_per_pair"], case["n_pairs"]))
    return est, se


def toggle_effects(doc: dict, confidence: float = 0.95) -> list[dict]:
    """Per toggled cell: how far its A/A gates' random-effects mean lies from that of the same
    case's A/A gates with nothing toggled, with its interval. A factor whose interval excludes 0
    moves a whole gate by itself: held fixed for a gate, it is a per-gate offset."""
    reference = {c["case_ids"][0]: c for c in doc["cells"] if c.get("measure_only") and c.get("toggle") is None
                 and not c.get("rounds")}
    z = float(scipy.stats.norm.ppf(0.5 + confidence / 2))
    rows = []
    for c in doc["cells"]:
        ref = reference.get(c["case_ids"][0])
        if not c.get("toggle") or ref is None:
            continue
        sides = [_gate_estimates(doc, cell) for cell in (ref, c)]
        if min(len(est) for est, _ in sides) < 2:
            rows.append({"cell": c["name"], "toggle": c["toggle"], "gates": [len(e) for e, _ in sides],
                         "difference": None})
            continue
        (ref_mean, ref_se, _), (mean, se, tau) = (pooled(est, se) for est, se in sides)
        diff, diff_se = mean - ref_mean, math.hypot(se, ref_se)
        rows.append({"cell": c["name"], "toggle": c["toggle"], "gates": [len(e) for e, _ in sides],
                     "untoggled": ref_mean, "toggled": mean, "difference": diff,
                     "ci": [diff - z * diff_se, diff + z * diff_se],
                     "p": float(2 * scipy.stats.norm.sf(abs(diff) / diff_se)) if diff_se > 0 else math.nan})
    return rows


def between_gates(doc: dict) -> list[dict]:
    """Per cell: do the gates' estimates of the watched case spread more than their own standard
    errors allow? Cochran's Q on the log estimates, and the DerSimonian-Laird between-gate standard
    deviation. A per-gate offset is what no number of pairs inside one gate averages away: where
    it is real, a gate's interval is too narrow and its false alarms exceed alpha."""

    rows = []
    for c in doc["cells"]:
        est, se = _gate_estimates(doc, c)
        if len(est) < 2:
            continue
        h = heterogeneity(est, se)
        rows.append({"cell": c["name"], "gates": h.gates, "q": h.q, "p": h.p, "between_sd": h.between_sd_log,
                     "within_se_median": h.within_se_median, "spread": list(h.spread)})
    return rows


def analyse_tools(doc: dict) -> list[dict]:
    rows = {}
    for t in doc.get("tool_trials", []):
        for v in t.get("verdicts", []) or [{"tool": t["tool"], "rule": "(error)", "fails": None, "ratio": None}]:
            key = (t["cell"], v["tool"], v["rule"])
            row = rows.setdefault(key, {"cell": t["cell"], "tool": v["tool"], "rule": v["rule"], "trials": 0,
                                        "fails": 0, "errors": 0, "ratios": []})
            row["trials"] += 1
            if v["fails"] is None:
                row["errors"] += 1
            elif v["fails"]:
                row["fails"] += 1
            if v.get("ratio") is not None:
                row["ratios"].append(v["ratio"])
    out = []
    for row in rows.values():
        n = row["trials"] - row["errors"]
        low, high = clopper_pearson(row["fails"], n)
        out.append({**{k: v for k, v in row.items() if k != "ratios"}, "rate": row["fails"] / n if n else math.nan,
                    "ci95": [low, high], "ratio_median": float(np.median(row["ratios"])) if row["ratios"] else None})
    return out


def rounds_tradeoff(doc: dict, budget_s: float) -> list[dict]:
    """Per case and rounds per pair: the noise of a pair and the seconds it costs, measured, and
    what they give in ``budget_s``: the standard error of the estimate and the smallest slowdown
    found 95 % of the time at the cells' minimum effect."""
    rows = []
    for c in doc["cells"]:
        if not c.get("rounds"):
            continue
        case_id = c["case_ids"][0]
        trials = [t for t in doc["trials"] if t["cell"] == c["name"]]
        pairs = [t["cases"].get(case_id, {}) for t in trials]
        noise = [p["noise_per_pair"] for p in pairs if p.get("noise_per_pair")]
        pace = [p["seconds_per_pair"] for p in pairs if p.get("seconds_per_pair")]
        count = sum(p.get("n_pairs") or 0 for p in pairs)
        if not noise or not pace:
            continue
        sd, per_pair = float(np.sqrt(np.mean(np.square(noise)))), float(np.median(pace))
        n_budget = max(1, int(budget_s // per_pair))
        rows.append({"case_id": case_id, "rounds": c["rounds"], "trials": len(trials), "pairs": count,
                     "noise_per_pair": sd, "seconds_per_pair": per_pair, "pairs_in_budget": n_budget,
                     "se_at_budget": estimate_se(sd, n_budget),
                     "mde_at_budget": min_detectable_effect(sd, n_budget, 0.01, doc["settings"]["min_effect"])})
    return rows


def resample(doc: dict, out: Path, gates: int) -> dict:
    """Rates of ``gates`` replayed gates per cell, from the pairs that the cell's real gates (in
    ``out/gates``) measured; stored in the document as ``resampled``."""
    rows = []
    for index, c in enumerate(doc["cells"]):
        if c.get("rounds"):
            continue
        trials = [t for t in doc["trials"] if t["cell"] == c["name"] and t["exit_code"] != EXIT_COULD_NOT_RUN]
        paths = [out / "gates" / f"cell-{index:02d}" / f"trial-{t['trial']:02d}" / "gate.json" for t in trials]
        measured = [MeasuredGate.load(p) for p in paths if p.exists()]
        found = resampled_rate(measured, c["case_ids"], c.get("target"), doc["settings"]["budget_s"],
                               doc["settings"]["min_effect"], gates=gates)
        rows.append({"cell": c["name"], "shift": 0.0, **_with_interval(found)})
        if c["condition"] != AA:
            continue
        # The A/A pairs moved by exactly the sizes asked for: a model of a uniform slowdown of
        # that size, free of the sizing's own error, on this runner's measured noise.
        for shift in sorted({b["fraction"] for b in doc["branches"].values()} | set(RESAMPLE_SHIFTS)):
            found = resampled_rate(measured, c["case_ids"], c["case_ids"][0], doc["settings"]["budget_s"],
                                   doc["settings"]["min_effect"], gates=gates, shift=shift)
            rows.append({"cell": c["name"], "shift": shift, **_with_interval(found)})
    doc["resampled"] = {"gates_per_cell": gates, "method": "harness/gatepower/resample.py", "rows": rows}
    return doc


def _with_interval(found: dict) -> dict:
    if found.get("gates"):
        found["ci95"] = list(clopper_pearson(found["fails"], found["gates"]))
    return found


def _resampled_table(doc: dict, legend: dict) -> list[str]:
    found = doc.get("resampled")
    if not found:
        return []
    lines = ["", f"**Resampled, not real gates**: {found['gates_per_cell']} gates per cell replayed by the gate's own "
             "loop and decision on pairs drawn with replacement from that cell's real gates above "
             "(`critpath gate-power --report POWER_JSON --resample N`). The interval is Monte Carlo only; the "
             "real gates' intervals carry the uncertainty of the pool itself. A row \"A/A pairs +N %\" is a "
             "*model*: the A/A gates' pairs of the first case moved by exactly +N %, as a uniform slowdown of that "
             "size would move them.", "",
             "| gate | change | measured gates | distinct process pairs (per case) | fails the build | "
             "rate [95 % CI] | wall median / max |", "|---|---|---|---|---|---|---|"]
    for r in found["rows"]:
        cell = next(c for c in doc["cells"] if c["name"] == r["cell"])
        gate = " + ".join(legend[cid] for cid in cell["case_ids"])
        condition = f"A/A pairs {r['shift'] * 100:+g} % (model)" if r.get("shift") else cell["condition"]
        if not r.get("gates"):
            lines.append(f"| {gate} | {condition} | 0 | - | - | {r.get('why', 'n/a')} | - |")
            continue
        pairs = ", ".join(str(n) for n in r["distinct_pairs"].values())
        lines.append(f"| {gate} | {condition} | {r['measured_gates']} | {pairs} | {r['fails']} / {r['gates']} | "
                     f"{_pct(r['rate'], 1)} [{_pct(r['ci95'][0], 1)}, {_pct(r['ci95'][1], 1)}] | "
                     f"{r['wall_median_s']:.0f} / {r['wall_max_s']:.0f} s |")
    return lines


def _gate_label(cell: dict, legend: dict) -> str:
    """A cell's gate as the tables name it: its cases, and the --rounds or --toggle it sets."""
    sets = [f"{cell['rounds']} rounds" if cell.get("rounds") else "",
            f"{cell['toggle']} toggled" if cell.get("toggle") else ""]
    return ", ".join([" + ".join(legend[cid] for cid in cell["case_ids"]), *filter(None, sets)])


def _toggle_table(doc: dict, legend: dict) -> list[str]:
    rows = toggle_effects(doc)
    if not rows:
        return []
    lines = ["", "factors toggled one at a time (gate --toggle): each toggled cell's A/A gates against the same "
                 "case's A/A gates with nothing toggled, random-effects means; an interval that excludes 0 is a "
                 "factor that moves a whole gate:", "",
             "| case | toggled | gates (none / toggled) | mean, nothing toggled | mean, toggled | difference "
             "[95 % CI] | p |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        cell = next(c for c in doc["cells"] if c["name"] == r["cell"])
        gates = " / ".join(map(str, r["gates"]))
        if r["difference"] is None:
            lines.append(f"| {legend[cell['case_ids'][0]]} | {r['toggle']} | {gates} | not established: fewer than "
                         "2 gates on a side | | | |")
            continue
        low, high = r["ci"]
        lines.append(f"| {legend[cell['case_ids'][0]]} | {r['toggle']} | {gates} | {log_pct(r['untoggled'])} | "
                     f"{log_pct(r['toggled'])} | {log_pct(r['difference'])} [{log_pct(low)}, {log_pct(high)}] | "
                     f"{r['p']:.3f} |")
    return lines


def _pct(x: float, digits: int = 0) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:.{digits}f} %"


def table(doc: dict) -> str:
    s = doc["settings"]
    case_ids = list(dict.fromkeys(cid for c in doc["cells"] for cid in c["case_ids"]))
    legend = {cid: f"C{i + 1}" for i, cid in enumerate(case_ids)}
    lines = [f"gate: budget {s['budget_s']:g} s, minimum effect {s['min_effect'] * 100:g} %, statistic "
             f"{s['statistic'] or 'default'}, rounds {s['rounds'] or 'default'}; base {doc['base'][:12]}", ""]
    lines += [f"- C{i + 1}: `{cid}`" for i, cid in enumerate(case_ids)]
    lines += ["",
             "| gate | change | trials | fails the build (counted) | rate [95 % CI] | could not run | wall median / max | "
             "pairs (median) | change seen (median) | detectable here (median) | outcomes of the watched case |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in analyse(doc):
        counted = "false alarms" if r["condition"] == AA else "detected"
        extra = f"; other cases failed it in {r['other_case_alarms']}" if r["other_case_alarms"] else ""
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))
        seen = "n/a" if math.isnan(r["effect_median"]) else f"{r['effect_median'] * 100:+.1f} %"
        mde = "n/a" if math.isnan(r["mde_median"]) else f">= {r['mde_median'] * 100:.1f} %"
        cell = next(c for c in doc["cells"] if c["name"] == r["cell"])
        gate = _gate_label(cell, legend)
        lines.append(
            f"| {gate} | {r['condition']} | {r['trials']} | {r['fails_build']} ({counted}: "
            f"{r['counted']}{extra}) | {_pct(r['rate'], 1)} [{_pct(r['ci95'][0], 1)}, {_pct(r['ci95'][1], 1)}] | "
            f"{r['could_not_run']} | {r['wall_median_s']:.0f} / {r['wall_max_s']:.0f} s | {r['pairs_median']:.0f} | "
            f"{seen} | {mde} | {outcomes} |")
    budget = Plan.budget_s  # the gate's default
    sweep = rounds_tradeoff(doc, budget)
    if sweep:
        lines += ["", f"rounds per process pair (A/A gates run to their budget; projected to the default {budget:g} s "
                  f"budget, minimum effect {s['min_effect'] * 100:g} %):", "",
                  f"| case | rounds | trials | pairs | noise per pair | s per pair | pairs in {budget:g} s | "
                  f"SE of the estimate | detectable in {budget:g} s |", "|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(sweep, key=lambda r: (r["case_id"], r["rounds"])):
            lines.append(f"| {legend[r['case_id']]} | {r['rounds']} | {r['trials']} | {r['pairs']} | "
                         f"{_pct(r['noise_per_pair'], 1)} | {r['seconds_per_pair']:.1f} | {r['pairs_in_budget']} | "
                         f"{_pct(r['se_at_budget'], 2)} | >= {_pct(r['mde_at_budget'], 1)} |")
    spread = between_gates(doc)
    if spread:
        lines += ["", "between-gate spread of the watched case's estimates (Cochran's Q against each gate's own standard "
                  "error; a small p: the gates differ by more than their pairs explain):", "",
                  "| gate | change | gates | estimates, lowest / highest | SE within a gate (median) | Q | p | "
                  "between-gate SD |", "|---|---|---|---|---|---|---|---|"]
        for r in spread:
            cell = next(c for c in doc["cells"] if c["name"] == r["cell"])
            low, high = (math.expm1(v) * 100 for v in r["spread"])
            lines.append(f"| {_gate_label(cell, legend)} | {cell['condition']} | {r['gates']} | "
                         f"{low:+.1f} % / {high:+.1f} % | {_pct(r['within_se_median'], 1)} | {r['q']:.1f} | "
                         f"{r['p']:.3f} | {_pct(r['between_sd'], 1)} |")
    lines += _toggle_table(doc, legend)
    lines += _resampled_table(doc, legend)
    tool_rows = analyse_tools(doc)
    if tool_rows:
        lines += ["", "| gate | change | tool, rule | trials | fails | rate [95 % CI] | ratio seen (median) |",
                  "|---|---|---|---|---|---|---|"]
        for r in tool_rows:
            cell = next(c for c in doc["cells"] if c["name"] == r["cell"])
            case, condition = legend[cell["case_ids"][0]], cell["condition"]
            ratio = "n/a" if r["ratio_median"] is None else f"{r['ratio_median']:.3f}"
            errors = f" ({r['errors']} errors)" if r["errors"] else ""
            lines.append(f"| {case} | {condition} | {r['tool']} `{r['rule']}` | {r['trials']}{errors} | {r['fails']} | "
                         f"{_pct(r['rate'], 1)} [{_pct(r['ci95'][0], 1)}, {_pct(r['ci95'][1], 1)}] | {ratio} |")
    return "\n".join(lines)


def cmd_power(args) -> int:
    if args.report:
        given = given_flags(args, MEASURE_ONLY, args.measure_defaults)
        refuse_given(given, f"{'shapes' if len(given) == 1 else 'shape'} a measurement, and --report prints one stored")
        try:
            # --resample writes into the measurement's directory: held, as a measurement holds it,
            # before the document is read, so a live measurement or --resume is refused up front.
            with claim_dir(args.report.parent, "gate-power") if args.resample > 0 else nullcontext():
                doc = _load(args.report)
                if args.resample > 0:
                    if not (args.report.parent / "gates").is_dir():
                        raise ValueError(f"{args.report.parent / 'gates'}: no real gates to resample (--resample needs "
                                         "the measurement directory, not a copy of power.json)")
                    # Into the file that was read, whatever its name: the replay belongs to that measurement.
                    _save(args.report.parent, resample(doc, args.report.parent, args.resample), args.report.name)
        except ValueError as exc:
            print_error("gate-power", exc)
            return 2
        print(table(doc))
        return 0
    refuse_given(["--resample"] if args.resample > 0 else [],
                 "replays the gates of a stored measurement; give --report POWER_JSON too")
    unknown = [t for t in args.tools if t not in TOOLS]
    if unknown:
        print_error("gate-power", f"unknown tool {unknown[0]!r}; expected {', '.join(TOOLS)}")
        return 2
    if not args.case_ids and not args.groups and not args.resume:
        print("critpath gate-power: error: give --case ID (repeatable) and/or --group ID,ID,...", file=sys.stderr)
        return 2
    if args.trials < 1:
        print("critpath gate-power: error: --trials must be >= 1", file=sys.stderr)
        return 2
    unmeasurable = _unmeasurable(args.statistic, (*args.case_ids, *(c for group in args.groups for c in group)))
    if unmeasurable:
        print_error("gate-power", unmeasurable)
        return 2
    request = PowerRequest(tuple(args.case_ids), tuple(args.groups), tuple(args.slowdowns), args.trials, args.budget,
                           args.min_effect, args.statistic, args.rounds, tuple(args.rounds_sweep), tuple(args.toggles),
                           tuple(args.tools),
                           args.tool_trials, absolute(args.out), args.resume)  # gates run from clones: absolute
    try:
        with stop_signals_unwind():
            doc = measure(request)
    except (ValueError, TreeError, inject.InjectError, OSError, subprocess.CalledProcessError) as exc:
        print_error("gate-power", exc)
        return 2
    except KeyboardInterrupt as exc:
        signum = interrupt_signal(exc)
        stored = request.out / "power.json"
        where = (f"the trials measured so far are in {stored} (--resume carries on)" if stored.is_file() else
                 f"it stopped before its first trial was stored: nothing to resume; remove {request.out} to start again")
        print(f"critpath gate-power: interrupted by {signum.name}; {where}", file=sys.stderr)
        return 128 + signum
    text = table(doc)
    atomic.write_text(request.out / "power.md", text + "\n")
    print(text)
    return 0
