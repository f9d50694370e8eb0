"""From the sequential decision to the gate's verdicts: figures, and what this runner can detect.

The analysis was fixed before any real gate was run, on these grounds (docs/gate.md has the
measured consequences):

- the pair is the unit: both processes of a generation see the same minutes of a shared
  machine, so their log ratio cancels what drifts between generations, which an unpaired test
  would count as noise;
- the signed-rank test and the Hodges-Lehmann estimate, not a t-test and a mean: per-pair log
  ratios on a shared runner have heavy tails (a neighbour's burst hits one process of one pair),
  and rank methods lose only 5 % efficiency when the noise is normal;
- the interval inverts the same test at the same kind of boundary, so "unchanged" (the interval
  inside the minimum effect) may stop a case at any look without breaking its coverage;
- a percentile bootstrap was not used: on 8-20 pairs it under-covers and it has no sequential
  version with a known error rate.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from harness.gate.config import GateConfig
from harness.gate.schedule import BASE, CANDIDATE, CaseTrack, Plan, ScheduleResult
from harness.gate.sequential import (CaseSpec, SequentialGate, false_alarm_at_budget,
                                     min_detectable_effect, noise_per_pair, pairs_needed)
from harness.gate.stats import Comparison, Outcome, Verdict

# Pocock-type spending, chosen by simulation before any real gate ran (docs/gate.md): at the noise
# of this project's cases it stops a +10 % regression at a quarter to a third of the budget where
# O'Brien-Fleming-type spending needs two fifths to a half, at the same power. Its higher final
# boundary costs little here, because a likely regression at the budget fails the build anyway.
SPENDING = "pocock"

DESIGN = {
    "unit": "a pair: one fresh process per side (a generation), rounds of every case interleaved A B / B A",
    "pair_value": "candidate minus base of the mean over the generation's rounds of log(statistic)",
    "test": "Wilcoxon signed-rank on the pairs (exact up to 50 pairs), as a signed z",
    "estimate": "Hodges-Lehmann estimate of the log ratio, reported as a ratio",
    "interval": "repeated confidence interval: the signed-rank test inverted at a group-sequential boundary",
    "sequential": "Lan-DeMets Pocock-type alpha spending by calendar fraction of the budget",
    "multiplicity": "Holm across cases, as a graphical group-sequential procedure (Maurer & Bretz 2013)",
    "fails_build": "regressed, or inconclusive at the budget with an estimate at or beyond the minimum effect",
}
TEST_NAME = "wilcoxon signed-rank, paired, group-sequential"


def projected_pairs(n_pairs: int, elapsed_s: float, seconds_per_pair: float, budget_s: float) -> int:
    """Pairs a case would have at the budget if generations keep their recent pace."""
    if not seconds_per_pair or seconds_per_pair <= 0:
        return n_pairs
    return n_pairs + max(0, int((budget_s - elapsed_s) // seconds_per_pair))


def max_pairs_short(plan: Plan, min_pairs: int) -> str:
    """What to say when ``--max-pairs`` stops the gate before the pairs its test needs ("" when it
    does not): then no budget decides anything, and advice to raise ``--budget`` would mislead."""
    if plan.max_pairs is None or plan.max_pairs >= min_pairs:
        return ""
    return f"--max-pairs {plan.max_pairs} stops before the {min_pairs} pairs the test needs; raise --max-pairs"


def detectable(spec: CaseSpec, sd: float, n_at_budget: int, alpha: float) -> dict:
    """What this runner and budget can detect for one case, at its measured noise."""
    if not (math.isfinite(sd) and sd > 0 and n_at_budget >= 1):
        return {"mde": None, "false_alarm_at_budget": None}
    return {"mde": min_detectable_effect(sd, n_at_budget, alpha, spec.min_effect),
            "false_alarm_at_budget": false_alarm_at_budget(sd, n_at_budget, spec.min_effect, alpha)}


def _center(values_per_generation: Sequence[Sequence[float]]) -> float:
    logs = [np.mean(np.log(v)) for v in values_per_generation]
    return float(np.exp(np.mean(logs))) if logs else math.nan


def _finite(x: float):
    return x if x is not None and math.isfinite(x) else None


def paired_verdicts(result: ScheduleResult, gate: SequentialGate, specs: Sequence[CaseSpec], plan: Plan,
                    config: GateConfig) -> dict[str, Verdict]:
    per_pair_s = result.seconds_per_pair()
    verdicts = {}
    for spec in specs:
        verdicts[spec.case_id] = _verdict(result.tracks[spec.case_id], spec, gate, plan, config, per_pair_s)
    return verdicts


def recheck_verdicts(tracks: Mapping[str, CaseTrack], specs: Sequence[CaseSpec], config: GateConfig,
                     rounds: int) -> dict[str, Verdict]:
    """A gate's stored pairs tested again at a single look (all of alpha at once): the
    fixed-sample version of what the gate decided sequentially."""
    gate = SequentialGate(specs, alpha=config.policy.alpha, confidence=config.policy.confidence, spending=SPENDING)
    pairs = {s.case_id: tracks[s.case_id].pairs for s in specs if not tracks[s.case_id].problem}
    if pairs:
        for case_id, state in gate.look(1.0, pairs, final=True).items():
            tracks[case_id].state = state
    plan = Plan(budget_s=math.inf, rounds=rounds)
    return {s.case_id: _verdict(tracks[s.case_id], s, gate, plan, config, None) for s in specs}


def _verdict(track: CaseTrack, spec: CaseSpec, gate: SequentialGate, plan: Plan, config: GateConfig,
             per_pair_s) -> Verdict:
    alpha = config.policy.alpha
    common = dict(min_effect=spec.min_effect, alpha=alpha, direction=spec.direction)
    if track.problem:
        return Verdict(Outcome.COULD_NOT_RUN, track.problem, **common)
    state = track.state
    n = len(track.pairs)
    sd = noise_per_pair(track.pairs)
    n_budget = max(n, int(plan.budget_s // per_pair_s)) if per_pair_s and math.isfinite(plan.budget_s) else n
    detail = {"n_pairs": n, "rounds_per_pair": plan.rounds, "iters_per_round": track.iters,
              "noise_per_pair": _finite(sd), "seconds_per_pair": per_pair_s,
              "pairs_at_budget": n_budget, "decided_at_s": track.decided_at_s,
              "interval": "repeated CI", "pairs": [round(d, 6) for d in track.pairs],
              **detectable(spec, sd, n_budget, alpha / max(1, len(gate.states)))}
    if (state is None or n < gate.min_pairs) and not math.isfinite(plan.budget_s):
        return Verdict(Outcome.COULD_NOT_RUN, f"too few pairs to decide: {n}; the test needs at least {gate.min_pairs}",
                       detail=detail, **common)
    if (state is None or n < gate.min_pairs) and max_pairs_short(plan, gate.min_pairs):
        return Verdict(Outcome.COULD_NOT_RUN, f"too few pairs to decide: {n}; {max_pairs_short(plan, gate.min_pairs)}",
                       detail=detail, **common)
    if state is None or n < gate.min_pairs:
        need_s = gate.min_pairs * per_pair_s if per_pair_s else None
        return Verdict(Outcome.COULD_NOT_RUN,
                       f"budget too small to reach a decision: {n} pairs in {plan.budget_s:g} s"
                       + (f" ({per_pair_s:.1f} s per pair)" if per_pair_s else "")
                       + f"; the test needs at least {gate.min_pairs}"
                       + (f": use --budget {math.ceil(need_s * 1.2)} or more" if need_s else ""),
                       detail=detail, **common)
    detail.update({"z": state.z, "test_boundary": _finite(state.test_boundary),
                   "interval_boundary": _finite(state.interval_boundary), "local_alpha": state.local_alpha,
                   "looks": state.looks, "rejected": state.rejected})
    comparison = Comparison(
        n_base=n, n_cand=n, base_center=_center(track.values[BASE]), cand_center=_center(track.values[CANDIDATE]),
        ratio=state.ratio, ci_low=state.interval_low, ci_high=state.interval_high, confidence=config.policy.confidence,
        p_value=state.p_nominal, test=TEST_NAME, log_sd=sd,
    )
    to_decide = None
    if state.outcome == Outcome.INCONCLUSIVE and math.isfinite(sd) and sd > 0:
        effect = state.ratio - 1.0
        to_decide = pairs_needed(sd, effect, state.local_alpha, min_effect=spec.min_effect)
        if to_decide is not None and per_pair_s:
            detail["budget_to_decide_s"] = to_decide * per_pair_s
    return Verdict(state.outcome, state.reason, comparison=comparison, repeats_to_decide=to_decide,
                   likely_regression=state.likely_regression, detail=detail, **common)


def probe_lines(tracks: Mapping[str, CaseTrack], specs: Mapping[str, CaseSpec], gate: SequentialGate, plan: Plan,
                elapsed_s: float, per_pair_s: float) -> list[str]:
    """After the first few pairs: what this runner can detect in the budget, per case, and
    whether the budget can decide anything at all."""
    lines = []
    alpha = gate.alpha / max(1, len(specs))
    for case_id, track in tracks.items():
        if track.problem or len(track.pairs) < 2:
            continue
        spec = specs[case_id]
        sd = noise_per_pair(track.pairs)
        n_budget = projected_pairs(len(track.pairs), elapsed_s, per_pair_s, plan.budget_s)
        if max_pairs_short(plan, gate.min_pairs):
            lines.append(f"{case_id}: too few pairs to reach a decision: {max_pairs_short(plan, gate.min_pairs)}")
            continue
        if n_budget < gate.min_pairs:
            lines.append(f"{case_id}: budget too small to reach a decision: about {n_budget} pairs fit in "
                         f"{plan.budget_s:g} s ({per_pair_s:.1f} s per pair), the test needs {gate.min_pairs}; "
                         f"use --budget {math.ceil(gate.min_pairs * per_pair_s * 1.2)} or more")
            continue
        found = detectable(spec, sd, n_budget, alpha)
        if found["mde"] is None:
            continue
        line = (f"{case_id}: noise {sd * 100:.1f} % per pair, {per_pair_s:.1f} s per pair: in {plan.budget_s:g} s "
                f"(about {n_budget} pairs) this runner detects >= {found['mde'] * 100:.1f} % "
                f"(minimum effect {spec.min_effect * 100:g} %)")
        lines.append(line)
    return lines
