"""The regression gate: A/B in one job, significance plus effect, verdicts for CI.

Reusable API (baselines and acceptance profiles share it):

- ``verdict(base_values, cand_values, policy, min_effect, direction) -> Verdict``: one case;
- ``threshold_verdict(cand_values, reference, policy, min_effect, direction) -> Verdict``: one case
  against a fixed value;
- ``verdicts([CaseInput, ...], policy) -> {case_id: Verdict}``: many cases with Holm's adjustment;
- a record's value of a statistic is ``harness.core.figures.value(record, statistic)``, the grammar
  the claims and acceptance use too.
"""
from harness.gate.stats import CaseInput, Outcome, Policy, Verdict, threshold_verdict, verdict, verdicts

__all__ = ["CaseInput", "Outcome", "Policy", "Verdict", "threshold_verdict", "verdict", "verdicts"]
