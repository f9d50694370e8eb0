"""The regression gate: A/B in one job, significance plus effect, verdicts for CI.

Reusable API (baselines and acceptance profiles share it):

- ``verdict(base_values, cand_values, policy, min_effect, direction) -> Verdict``: one case;
- ``threshold_verdict(cand_values, reference, policy, min_effect, direction) -> Verdict``: one case
  against a fixed value;
- ``verdicts([CaseInput, ...], policy) -> {case_id: Verdict}``: many cases with Holm's adjustment;
- ``process_value(record, statistic)``: the per-process value a record contributes.
"""
from harness.gate.stats import CaseInput, Outcome, Policy, Verdict, threshold_verdict, verdict, verdicts
from harness.gate.values import process_value

__all__ = ["CaseInput", "Outcome", "Policy", "Verdict", "threshold_verdict", "verdict", "verdicts", "process_value"]
