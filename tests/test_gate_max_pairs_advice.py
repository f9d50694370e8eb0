"""The gate's advice for a case with too few pairs names what bounded them: ``--max-pairs`` when it
stops before the pairs the test needs, the budget otherwise."""
from __future__ import annotations

from harness.gate.config import GateConfig
from harness.gate.paired import SPENDING, paired_verdicts, probe_lines
from harness.gate.schedule import CaseTrack, Plan, ScheduleResult
from harness.gate.sequential import CaseSpec, SequentialGate
from harness.gate.stats import Outcome

CASE = "rpc/mode=noop"


def _short_gate(plan: Plan):
    config = GateConfig()
    spec = CaseSpec(CASE, config.min_effect(CASE), "lower")
    gate = SequentialGate([spec], alpha=config.policy.alpha, confidence=config.policy.confidence, spending=SPENDING)
    track = CaseTrack(CASE, pairs=[0.01, -0.02, 0.0, 0.015])
    result = ScheduleResult({CASE: track}, generations=4, wall_s=8.0, side_kind="worker", stopped="max_pairs",
                            generation_s=[2.0] * 4)
    return config, spec, gate, track, result


def test_a_gate_stopped_by_max_pairs_says_raise_max_pairs_not_the_budget():
    # Before: "budget too small to reach a decision: 4 pairs in 60 s ...; use --budget 26 or more",
    # though 60 s held far more pairs than the test needs and --max-pairs 5 was what stopped it.
    plan = Plan(budget_s=60.0, max_pairs=5)
    config, spec, gate, track, result = _short_gate(plan)
    assert 5 < gate.min_pairs
    (verdict,) = paired_verdicts(result, gate, [spec], plan, config).values()
    assert verdict.outcome == Outcome.COULD_NOT_RUN
    assert verdict.reason == (f"too few pairs to decide: 4; --max-pairs 5 stops before the {gate.min_pairs} pairs "
                              "the test needs; raise --max-pairs")
    (line,) = probe_lines({CASE: track}, {CASE: spec}, gate, plan, 8.0, 2.0)
    assert "--max-pairs 5 stops before" in line and "--budget" not in line


def test_a_gate_the_budget_stopped_still_says_raise_the_budget():
    plan = Plan(budget_s=8.0)
    config, spec, gate, track, result = _short_gate(plan)
    (verdict,) = paired_verdicts(result, gate, [spec], plan, config).values()
    assert verdict.reason.startswith("budget too small to reach a decision: 4 pairs in 8 s") and "--budget" in verdict.reason
