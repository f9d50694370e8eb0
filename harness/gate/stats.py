"""The gate's statistics: effect size with a bootstrap interval, a rank test, Holm across cases.

Unit of replication. The gate's samples are *one value per process*: each repeat is a fresh
``critpath run`` process, and its value is that process's statistic (p50 of its per-iteration
samples by default). Iterations inside one process share the process's memory layout, CPU
placement, frequency state and neighbours, so they are not independent draws of what a fresh run
would give; treating thousands of them as independent makes every 0.5 % layout accident
"significant". Between-process variance is what a new CI job sees, so repeats are the unit.
(``critpath compare`` of two single stored runs has no repeats; it falls back to per-iteration
samples and says so, see ``Unit``.)

The rule (asv's, made explicit): a case *regressed* when the change is statistically significant
after multiple-comparison control *and* its point estimate is at least the minimum effect.

- effect: ratio candidate/base of the medians of the per-unit values (lower is better for
  latencies; ``direction="higher"`` for throughputs flips what counts as worse);
- interval: percentile bootstrap of that ratio (``scipy.stats.bootstrap``, the two sides
  resampled independently), at ``Policy.confidence``;
- significance: two-sided Mann-Whitney U (``scipy.stats.mannwhitneyu``), p-values adjusted with
  Holm's step-down method across the cases of one gate run. Holm controls the family-wise error
  rate: the gate answers "did anything regress?", and one false alarm fails the build, so the
  probability of *any* false alarm is the quantity to bound (Benjamini-Hochberg bounds the
  expected share of false alarms among alarms, which lets a large run fail on noise).

Verdicts (``Outcome``): regressed / improved when significant and beyond the minimum effect;
unchanged when the interval lies inside the minimum-effect band (a change that matters is ruled
out); inconclusive otherwise, with an estimate of how many repeats per side would decide it;
could_not_run when a side has no usable values (failed, unknown or missing case).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np
import scipy  # scipy.stats loads on first use (scipy's lazy loading), not at import


class Outcome:
    REGRESSED = "regressed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"
    COULD_NOT_RUN = "could_not_run"
    ALL = (REGRESSED, IMPROVED, UNCHANGED, INCONCLUSIVE, COULD_NOT_RUN)


class Unit:
    PROCESS = "process"  # one value per fresh process (the gate's A/B)
    ITERATION = "iteration"  # raw per-iteration samples (compare of single runs; not independent)


DIRECTIONS = ("lower", "higher")  # which way is better
MIN_VALUES_FOR_TEST = 2
# Cap on the "more repeats would decide it" estimate; beyond it we say the effect sits on the
# minimum-effect boundary and repeats alone will not settle it.
MAX_REPEATS_ADVICE = 1000
# The least confidence and number of resamples a bootstrap interval is drawn with: Policy refuses
# less, and the gate config's ranges start here.
MIN_CONFIDENCE = 0.5
MIN_N_RESAMPLES = 100


@dataclass(frozen=True)
class Policy:
    """How a gate decides. ``min_effect`` is relative (0.05 = 5 %), the default for every case
    that the config does not give its own."""

    alpha: float = 0.01  # family-wise error rate across the cases of one run (Holm)
    min_effect: float = 0.05
    confidence: float = 0.95  # of the bootstrap interval on the ratio
    n_resamples: int = 2000
    seed: int = 0  # the bootstrap is seeded so a verdict is reproducible from the same values

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if not 0 <= self.min_effect < 10:
            raise ValueError(f"min_effect must be a relative change in [0, 10), got {self.min_effect}")
        if not MIN_CONFIDENCE <= self.confidence < 1:
            raise ValueError(f"confidence must be in [{MIN_CONFIDENCE}, 1), got {self.confidence}")
        if self.n_resamples < MIN_N_RESAMPLES:
            raise ValueError(f"n_resamples must be >= {MIN_N_RESAMPLES}, got {self.n_resamples}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """Effect and test of one case, before multiple-comparison control."""

    n_base: int
    n_cand: int
    base_center: float  # median of the base values (the statistic's unit, e.g. ns)
    cand_center: float
    ratio: float  # cand_center / base_center
    ci_low: float
    ci_high: float
    confidence: float
    p_value: float  # two-sided Mann-Whitney U (or Wilcoxon signed-rank against a fixed value)
    test: str
    log_sd: float = 0.0  # pooled standard deviation of log(values): the relative noise per unit

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    outcome: str
    reason: str
    min_effect: float
    alpha: float
    direction: str = "lower"
    comparison: Optional[Comparison] = None
    p_adjusted: Optional[float] = None
    # Repeats per side estimated to decide an inconclusive case (total, not additional), or None.
    repeats_to_decide: Optional[int] = None
    # Inconclusive at the budget with an estimate that is a worsening of at least the minimum
    # effect: a likely regression, which fails the build unless the gate allows inconclusive cases.
    likely_regression: bool = False
    # What a sequential gate adds: pairs, looks, boundary, minimum detectable effect... (JSON-able).
    detail: Mapping[str, object] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.outcome == Outcome.REGRESSED

    def to_dict(self) -> dict:
        data = asdict(self)
        data["comparison"] = self.comparison.to_dict() if self.comparison else None
        data["detail"] = dict(self.detail)
        return data


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (monotone, capped at 1), in the input order."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    scaled = (m - np.arange(m)) * p[order]
    adjusted_sorted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    out = np.empty(m)
    out[order] = adjusted_sorted
    return out


def _ratio_of_medians(base: np.ndarray, cand: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(cand, axis=axis) / np.median(base, axis=axis)


def compare(base_values: Sequence[float], cand_values: Sequence[float], policy: Policy = Policy()) -> Comparison:
    """Ratio of medians with its bootstrap interval, and a two-sided Mann-Whitney U test."""
    base = np.asarray(base_values, dtype=np.float64)
    cand = np.asarray(cand_values, dtype=np.float64)
    for name, values in (("base", base), ("candidate", cand)):
        if values.size < MIN_VALUES_FOR_TEST:
            raise ValueError(f"{name}: need at least {MIN_VALUES_FOR_TEST} values, got {values.size}")
        if not np.all(np.isfinite(values)) or np.any(values <= 0):
            raise ValueError(f"{name}: values must be finite and > 0")
    ratio = float(_ratio_of_medians(base, cand))
    ci_low, ci_high = _bootstrap_ratio(base, cand, policy)
    p_value = _mann_whitney(base, cand)
    return Comparison(
        n_base=int(base.size), n_cand=int(cand.size), base_center=float(np.median(base)),
        cand_center=float(np.median(cand)), ratio=ratio, ci_low=ci_low, ci_high=ci_high,
        confidence=policy.confidence, p_value=p_value, test="mann-whitney-u two-sided",
        log_sd=_pooled_log_sd(base, cand),
    )


def _pooled_log_sd(*groups: np.ndarray) -> float:
    logs = [np.log(g) for g in groups if g.size >= 2]
    dof = sum(g.size - 1 for g in logs)
    if dof <= 0:
        return 0.0
    return float(math.sqrt(sum(((g - g.mean()) ** 2).sum() for g in logs) / dof))


def _bootstrap_ratio(base: np.ndarray, cand: np.ndarray, policy: Policy) -> tuple[float, float]:
    if np.ptp(base) == 0 and np.ptp(cand) == 0:
        ratio = float(_ratio_of_medians(base, cand))
        return ratio, ratio  # no spread at all: every resample gives the same ratio
    with warnings.catch_warnings():
        # Few distinct values make the bootstrap distribution lumpy; scipy warns, the interval
        # is still the honest percentile interval of what was measured.
        warnings.simplefilter("ignore")
        result = scipy.stats.bootstrap(
            (base, cand), _ratio_of_medians, vectorized=True, paired=False, method="percentile",
            confidence_level=policy.confidence, n_resamples=policy.n_resamples,
            rng=np.random.default_rng(policy.seed), batch=max(1, 4_000_000 // (base.size + cand.size)),
        )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        ratio = float(_ratio_of_medians(base, cand))
        return ratio, ratio
    return low, high


def _mann_whitney(base: np.ndarray, cand: np.ndarray) -> float:
    if np.ptp(np.concatenate([base, cand])) == 0:
        return 1.0  # all values equal: no evidence of any difference
    return float(scipy.stats.mannwhitneyu(cand, base, alternative="two-sided").pvalue)


def compare_to_value(values: Sequence[float], reference: float, policy: Policy = Policy()) -> Comparison:
    """The candidate's values against a fixed reference (a baseline table): ratio of their median
    to the reference, bootstrap interval, and a two-sided Wilcoxon signed-rank test of
    log(value / reference) against 0."""
    cand = np.asarray(values, dtype=np.float64)
    if cand.size < MIN_VALUES_FOR_TEST:
        raise ValueError(f"need at least {MIN_VALUES_FOR_TEST} values, got {cand.size}")
    if not reference > 0:
        raise ValueError(f"reference value must be > 0, got {reference}")
    if not np.all(np.isfinite(cand)) or np.any(cand <= 0):
        raise ValueError("values must be finite and > 0")
    ratio = float(np.median(cand) / reference)
    if np.ptp(cand) == 0:
        low = high = ratio
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = scipy.stats.bootstrap(
                (cand,), lambda x, axis=-1: np.median(x, axis=axis) / reference, vectorized=True,
                method="percentile", confidence_level=policy.confidence, n_resamples=policy.n_resamples,
                rng=np.random.default_rng(policy.seed),
            )
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    logs = np.log(cand / reference)
    p_value = 1.0 if np.all(logs == 0) else float(scipy.stats.wilcoxon(logs, alternative="two-sided").pvalue)
    return Comparison(
        n_base=0, n_cand=int(cand.size), base_center=float(reference), cand_center=float(np.median(cand)),
        ratio=ratio, ci_low=low, ci_high=high, confidence=policy.confidence, p_value=p_value,
        test="wilcoxon signed-rank two-sided (against a fixed value)", log_sd=_pooled_log_sd(cand),
    )


def decide(comparison: Comparison, p_adjusted: float, min_effect: float, alpha: float,
           direction: str = "lower") -> Verdict:
    """Turn one comparison (with its multiplicity-adjusted p) into a verdict."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    up, down = 1.0 + min_effect, 1.0 / (1.0 + min_effect)  # symmetric on a log scale
    ratio, low, high = comparison.ratio, comparison.ci_low, comparison.ci_high
    worse, better = (ratio >= up, ratio <= down) if direction == "lower" else (ratio <= down, ratio >= up)
    significant = p_adjusted < alpha
    common = dict(min_effect=min_effect, alpha=alpha, direction=direction, comparison=comparison,
                  p_adjusted=float(p_adjusted))
    change = f"{(ratio - 1) * 100:+.1f} % [{(low - 1) * 100:+.1f}, {(high - 1) * 100:+.1f}]"
    if significant and worse:
        return Verdict(Outcome.REGRESSED, f"{change}, p_adj={p_adjusted:.2g} < {alpha:g}, beyond the "
                       f"{min_effect * 100:g} % minimum effect", **common)
    if significant and better:
        return Verdict(Outcome.IMPROVED, f"{change}, p_adj={p_adjusted:.2g} < {alpha:g}, beyond the "
                       f"{min_effect * 100:g} % minimum effect", **common)
    if down < low and high < up:
        why = "significant but smaller than" if significant else "interval inside"
        return Verdict(Outcome.UNCHANGED, f"{change}: {why} the +/-{min_effect * 100:g} % minimum effect", **common)
    return Verdict(
        Outcome.INCONCLUSIVE,
        f"{change}, p_adj={p_adjusted:.2g}: the interval reaches past the {min_effect * 100:g} % minimum "
        f"effect but the change is not significant or not that large",
        repeats_to_decide=repeats_to_decide(comparison, min_effect, significant, alpha), **common,
    )


def repeats_to_decide(comparison: Comparison, min_effect: float, significant: bool,
                      alpha: float = 0.01, power: float = 0.8) -> Optional[int]:
    """Repeats per side that would decide an inconclusive case with probability ``power``, if the
    measured point estimate and noise are the truth (so: an estimate, optimistic when the point
    estimate was lucky). Normal-theory sample size on log values, inflated by pi/3 for the rank
    test's efficiency against a t-test, and never below what the exact test needs to reach alpha.

    The distance to cover is from the estimate to 'no change' when the estimate is beyond the
    minimum effect (significance is missing), or to the nearer edge of the minimum-effect band
    when it is inside (the interval must fit in the band). None when the estimate sits on that
    edge or the noise is unknown: repeats alone will not settle it."""
    sigma = comparison.log_sd
    r = math.log(comparison.ratio)
    bound = math.log(1.0 + min_effect)
    if abs(r) >= bound:
        distance, z_decide = abs(r), scipy.stats.norm.ppf(1 - alpha / 2)
    else:
        distance, z_decide = bound - abs(r), scipy.stats.norm.ppf((1 + comparison.confidence) / 2)
    if distance <= 1e-9 or sigma <= 0:
        return None
    sides = 1 if comparison.n_base == 0 else 2  # against a fixed value only one side is noisy
    needed = math.ceil(sides * (z_decide + scipy.stats.norm.ppf(power)) ** 2 * sigma ** 2 / distance ** 2 * math.pi / 3)
    floor = min_repeats_for_alpha(alpha) if sides == 2 else min_repeats_signed_rank(alpha)
    needed = max(needed, floor, comparison.n_cand + 1)
    return needed if needed <= MAX_REPEATS_ADVICE else None


def min_repeats_signed_rank(alpha: float) -> int:
    """Fewest values at which a two-sided Wilcoxon signed-rank test can reach p < alpha
    (all signs alike gives p = 2 / 2**n)."""
    n = 1
    while 2.0 / 2 ** n >= alpha:
        n += 1
    return n


def min_repeats_for_alpha(alpha: float) -> int:
    """Fewest repeats per side at which a two-sided Mann-Whitney U can reach p < alpha at all
    (complete separation gives p = 2 / C(2n, n)); with several cases Holm asks for more."""
    n = 1
    while 2.0 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


@dataclass(frozen=True)
class CaseInput:
    """What the gate knows about one case before deciding: its values on each side (or why
    there are none) and its own minimum effect and direction."""

    case_id: str
    base_values: Sequence[float] = ()
    cand_values: Sequence[float] = ()
    min_effect: Optional[float] = None  # None: the policy's default
    direction: str = "lower"
    problem: str = ""  # non-empty: not measured on both sides, with this reason
    problem_outcome: str = Outcome.COULD_NOT_RUN  # or INCONCLUSIVE (a case new in one side's grid)
    reference: Optional[float] = None  # set: compare cand_values to this fixed value instead
    extra: Mapping[str, object] = field(default_factory=dict)


def verdict(base_samples: Sequence[float], cand_samples: Sequence[float], policy: Policy = Policy(),
            min_effect: Optional[float] = None, direction: str = "lower") -> Verdict:
    """One case on its own (no multiplicity control): the function other tools reuse."""
    return verdicts([CaseInput("case", base_samples, cand_samples, min_effect, direction)], policy)["case"]


def threshold_verdict(cand_samples: Sequence[float], reference: float, policy: Policy = Policy(),
                      min_effect: Optional[float] = None, direction: str = "lower") -> Verdict:
    """One case against a fixed reference value (a baseline table or an acceptance threshold)."""
    return verdicts([CaseInput("case", (), cand_samples, min_effect, direction, reference=reference)],
                    policy)["case"]


def verdicts(cases: Sequence[CaseInput], policy: Policy = Policy()) -> dict[str, Verdict]:
    """Every case of one gate run, with Holm's adjustment across the cases that could be tested."""
    out: dict[str, Verdict] = {}
    tested: list[tuple[CaseInput, Comparison, float]] = []
    for case in cases:
        min_effect = policy.min_effect if case.min_effect is None else case.min_effect
        if case.problem:
            out[case.case_id] = Verdict(case.problem_outcome, case.problem, min_effect, policy.alpha, case.direction)
            continue
        try:
            if case.reference is not None:
                comparison = compare_to_value(case.cand_values, case.reference, policy)
            else:
                comparison = compare(case.base_values, case.cand_values, policy)
        except ValueError as exc:
            out[case.case_id] = Verdict(Outcome.COULD_NOT_RUN, str(exc), min_effect, policy.alpha, case.direction)
            continue
        tested.append((case, comparison, min_effect))
    adjusted = holm([c.p_value for _, c, _ in tested])
    for (case, comparison, min_effect), p_adj in zip(tested, adjusted):
        out[case.case_id] = decide(comparison, float(p_adj), min_effect, policy.alpha, case.direction)
    return {case.case_id: out[case.case_id] for case in cases}
