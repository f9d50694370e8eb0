"""Group-sequential, paired statistics for the gate: decide each case as soon as its pairs allow,
and keep the family-wise false-alarm rate at ``alpha`` over every look and every case.

Data. For one case the gate collects one value per *pair* (a "generation": one fresh base process
and one fresh candidate process, measured interleaved): ``d = log(candidate / base)``. Positive d
means the candidate's value is larger: worse for a lower-is-better statistic (latency), better for
``direction="higher"`` (throughput). Pairing removes what both processes of one generation share
(the machine's state at that moment), which is why d is tested against 0 rather than comparing the
two sides as independent samples.

Looks. The gate looks at the data several times as pairs accumulate, within a wall-time budget.
Each look has a calendar fraction ``tau = elapsed_s / budget_s`` in (0, 1] (1 at the budget) and an
information level, the number of pairs n. Looking repeatedly at a test at level alpha would raise
the false-alarm rate far above alpha; the error-spending approach (Lan & DeMets 1983) fixes how
much of alpha may have been used by each calendar fraction, and the boundaries are computed so
that the chance of a first crossing at each look, under "no change", is exactly that increment.
Spending by *calendar* fraction (not by pairs) is what lets the number of looks and the pairs per
look be whatever the machine delivers, without fixing them in advance.

Statistics. The test is the Wilcoxon signed-rank test of "median d = 0", as a signed z; its
standardised statistics at successive looks behave, to first order, like a Brownian motion observed
at the pair counts (the signed-rank statistic is asymptotically a sum of one term per pair), which
is the joint distribution the boundaries assume. The effect is the Hodges-Lehmann estimate (median
of the Walsh averages), and its interval is the signed-rank test inverted (Walsh-average order
statistics) at a group-sequential boundary of level ``1 - confidence``: a repeated confidence
interval (Jennison & Turnbull ch. 9), which covers the true effect at *all* looks at once with
probability >= confidence, so it may be used to stop as soon as it fits inside the minimum effect.

Multiplicity. Holm's procedure across cases, in its group-sequential graphical form (Maurer &
Bretz 2013): every case starts at level alpha/m; a case whose "no change" is rejected passes its
level on, in equal shares, to the cases not yet rejected, which then test at the higher level from
the current look on.

Decision per case (see ``SequentialGate``): regressed / improved when rejected *and* the estimate
is at least the minimum effect; unchanged when the repeated interval fits inside the minimum-effect
band; otherwise it stays open, and at the budget it ends inconclusive, flagged ``likely_regression``
when its estimate is a worsening of at least the minimum effect that a one-sided test at the
case's level also finds (the rule's own false alarms stay at or below alpha).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Mapping, Optional, Sequence

import numpy as np
import scipy  # submodules load on first use (scipy's lazy loading): none is paid at import

from harness.gate.stats import DIRECTIONS, Outcome, min_repeats_signed_rank

SPENDING_KINDS = ("obf", "pocock")

# An increment of cumulative alpha below this is "nothing to spend": its boundary is +inf. Solving
# for a boundary that crosses with probability 1e-16 would only chase rounding noise.
NOTHING_TO_SPEND = 1e-15
# The sub-density of S at a look is below the N(0, info) density, so beyond this many standard
# deviations it holds < 1e-16 of the mass: the continuation region of an infinite boundary is
# truncated there.
TRUNCATION_SD = 8.5
# Grid spacing = (smallest increment sd next to the look) / POINTS_PER_SD. The integrands are
# Gaussian-smooth on the scale of an increment, where Simpson's rule on this spacing is accurate to
# far better than the third decimal of a boundary.
POINTS_PER_SD = 4.0
MAX_GRID_POINTS = 4001  # only reached for pathological spacing (a look with almost no new pairs)
Z_SEARCH_MAX = 40.0  # the bracket's upper end: no boundary that spends > 1e-15 lies beyond it

EXACT_MAX_N = 50  # exact signed-rank null distribution up to this many values, as scipy's "auto"

# Planning: looks assumed equally spaced, this many, when a formula needs the final boundary.
PLANNING_LOOKS = 10
# Asymptotic efficiency of the signed-rank test / Hodges-Lehmann estimate relative to the t-test /
# mean under normal noise is 3/pi (0.955): their standard error is sqrt(pi/3) = 1.023 times the
# mean's. The gate pays this on normal noise to be robust to the heavy tails of real timings.
RANK_SE_FACTOR = math.sqrt(math.pi / 3.0)


# --------------------------------------------------------------------------- alpha spending


def spent(alpha: float, tau: float, kind: str = "obf") -> float:
    """Cumulative two-sided alpha spent by calendar fraction ``tau`` (Lan-DeMets).

    ``"obf"``: O'Brien-Fleming-type, ``2 (1 - Phi(z_{1-a/2} / sqrt(tau)))`` spent on *each side*
    with a = alpha/2, the convention of the published tables and of ldbounds, gsDesign and rpact
    for two-sided tests (it gives the 4.877, 3.357, 2.680, 2.290, 2.031 of five looks at 0.05).
    The total is ``4 (1 - Phi(z_{1-alpha/4} / sqrt(tau)))``; applying the one-side formula to the
    whole two-sided alpha instead would spend more early (first of five boundaries 4.38) and
    leave a higher final boundary (2.06). Almost nothing is spent early, so an early stop needs
    overwhelming evidence and the final look keeps nearly the fixed-sample boundary.

    ``"pocock"``: ``alpha log(1 + (e - 1) tau)``, nearly even spending, for earlier stops at the
    price of a higher final boundary (linear in alpha, so per side or in total is the same).

    ``tau`` is clipped to [0, 1]; ``spent(alpha, 1) == alpha`` exactly, so the last look always
    has all of alpha."""
    if kind not in SPENDING_KINDS:
        raise ValueError(f"spending must be one of {SPENDING_KINDS}, got {kind!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    tau = min(max(float(tau), 0.0), 1.0)
    if tau >= 1.0:
        return float(alpha)  # exactly, not the formula's rounding of it
    if tau <= 0.0:
        return 0.0
    if kind == "obf":
        per_side = alpha / 2.0
        z = -scipy.special.ndtri(per_side / 2.0)  # z_{1-a/2} for the side's a, from the small tail for precision
        return float(2.0 * (2.0 * scipy.special.ndtr(-z / math.sqrt(tau))))
    return float(alpha * math.log1p((math.e - 1.0) * tau))


# --------------------------------------------------------------------------- boundaries


def boundaries(info: Sequence[float], cumulative_alpha: Sequence[float]) -> np.ndarray:
    """Two-sided z boundaries c_k for looks at information levels ``info`` (strictly increasing,
    any positive scale such as pair counts) with cumulative alpha ``cumulative_alpha``.

    Under "no change", with Z_k = S(info_k) / sqrt(info_k) for a standard Brownian motion S, the
    boundaries satisfy P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = A_k - A_{k-1}.
    Computed by the recursive numerical integration of the sub-density of S on the continuation
    region (Armitage, McPherson & Rowe 1969; Jennison & Turnbull 2000, ch. 19): Simpson's rule on
    a grid over the continuation interval, each c_k solved with Brent's method. A look with
    (almost) nothing new to spend gets +inf: it cannot stop anything."""
    t, cumulative = _validated_design(info, cumulative_alpha)
    increments = np.diff(cumulative, prepend=0.0)
    # sd of S(t_k) - S(t_{k-1}); the first is measured from S(0) = 0.
    increment_sd = np.sqrt(np.diff(t, prepend=0.0))
    c = np.empty(t.size)
    grid = mass = None  # where S may be at the previous look without having stopped, and how likely
    for k in range(t.size):
        if k == 0:
            c[0] = math.inf if increments[0] <= NOTHING_TO_SPEND else float(-scipy.special.ndtri(increments[0] / 2.0))
        else:
            c[k] = _solve_boundary(grid, mass, math.sqrt(t[k]), increment_sd[k], increments[k])
        if k + 1 == t.size:
            break
        # The grid only has to resolve the kernels on either side of this look.
        spacing = min(increment_sd[k], increment_sd[k + 1]) / POINTS_PER_SD
        half_width = min(c[k], TRUNCATION_SD) * math.sqrt(t[k])
        new_grid, weights = _simpson_grid(half_width, spacing)
        if k == 0:
            density = _normal_pdf(new_grid, increment_sd[0])
        else:
            density = _propagate(grid, mass, new_grid, increment_sd[k])
        grid, mass = new_grid, weights * density
    return c


def _validated_design(info: Sequence[float], cumulative_alpha: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(info, dtype=np.float64).ravel()
    cumulative = np.asarray(cumulative_alpha, dtype=np.float64).ravel()
    if t.size == 0 or t.size != cumulative.size:
        raise ValueError(f"need one cumulative alpha per look, got {t.size} looks and {cumulative.size} levels")
    if not (np.all(np.isfinite(t)) and t[0] > 0 and np.all(np.diff(t) > 0)):
        raise ValueError(f"information levels must be positive and strictly increasing, got {t.tolist()}")
    if not (np.all(np.isfinite(cumulative)) and cumulative[0] >= 0 and cumulative[-1] < 1):
        raise ValueError(f"cumulative alpha must lie in [0, 1), got {cumulative.tolist()}")
    if np.any(np.diff(cumulative) < -NOTHING_TO_SPEND):
        raise ValueError(f"cumulative alpha must not decrease, got {cumulative.tolist()}")
    return t, cumulative


def _normal_pdf(x: np.ndarray, sd: float) -> np.ndarray:
    return np.exp(-0.5 * (x / sd) ** 2) / (sd * math.sqrt(2.0 * math.pi))


def _simpson_grid(half_width: float, spacing: float) -> tuple[np.ndarray, np.ndarray]:
    """An odd number of equally spaced points over [-half_width, half_width] and Simpson weights."""
    intervals = int(math.ceil(2.0 * half_width / spacing / 2.0)) * 2
    intervals = min(max(intervals, 2), MAX_GRID_POINTS - 1)
    grid = np.linspace(-half_width, half_width, intervals + 1)
    h = grid[1] - grid[0]
    weights = np.full(intervals + 1, 2.0)
    weights[1::2] = 4.0
    weights[0] = weights[-1] = 1.0
    return grid, weights * h / 3.0


def _propagate(grid: np.ndarray, mass: np.ndarray, new_grid: np.ndarray, increment_sd: float) -> np.ndarray:
    """Sub-density of S at the next look: the surviving mass convolved with the increment's normal."""
    kernel = _normal_pdf(new_grid[:, None] - grid[None, :], increment_sd)
    return kernel @ mass


def _solve_boundary(grid: np.ndarray, mass: np.ndarray, sqrt_info: float, increment_sd: float,
                    target: float) -> float:
    if target <= NOTHING_TO_SPEND:
        return math.inf

    def excess_crossing(c: float) -> float:
        edge = c * sqrt_info
        # P(S_k leaves (-edge, edge) | S_{k-1} = u), weighted by where S_{k-1} survived.
        leave = scipy.special.ndtr((-edge - grid) / increment_sd) + scipy.special.ndtr((grid - edge) / increment_sd)
        return float(mass @ leave) - target

    if excess_crossing(0.0) <= 0.0:
        return 0.0  # asks for more than the surviving mass: stop at this look whatever is seen
    return float(scipy.optimize.brentq(excess_crossing, 0.0, Z_SEARCH_MAX, xtol=1e-10))


@lru_cache(maxsize=8192)
def _boundaries_cached(info: tuple[float, ...], cumulative_alpha: tuple[float, ...]) -> tuple[float, ...]:
    # The gate recomputes every case's sequence at every look (and again when Holm raises a level);
    # the same histories recur, across cases of one gate and across simulated gates.
    return tuple(boundaries(info, cumulative_alpha).tolist())


def forget_boundaries() -> None:
    """Empty the boundaries' cache: a running gate looks at a new calendar fraction each time, so a
    benchmark of one look (harness.microbench) must pay for computing them, as the gate does."""
    _boundaries_cached.cache_clear()


# --------------------------------------------------------------------------- paired rank statistics


@dataclass(frozen=True)
class SignedRank:
    """The Wilcoxon signed-rank test of "median d = 0" as a signed z: |z| = Phi^-1(1 - p/2) of the
    two-sided p, positive when the positive differences outrank the negative ones."""

    z: float
    p_value: float
    n: int


def _log_ratios(d: Sequence[float]) -> np.ndarray:
    values = np.asarray(d, dtype=np.float64).ravel()
    if not np.all(np.isfinite(values)):
        raise ValueError("log ratios must be finite (a value <= 0 or a failed measurement upstream?)")
    return values


def _abs_z_from_p(p_value: float, fallback_abs_z: float) -> float:
    # p underflows to 0 only for |z| > 37 (hundreds of pairs all one way); the normal statistic
    # itself is the honest figure there.
    return float(-scipy.special.ndtri(p_value / 2.0)) if p_value > 0.0 else fallback_abs_z


def signed_rank_z(d: Sequence[float]) -> SignedRank:
    """Signed-rank test of the pairs' log ratios against 0, as a signed z.

    scipy's ``wilcoxon``, exact null distribution when n <= 50 with no ties and no zeros, else the
    normal approximation with tie correction and continuity correction (the correction keeps the
    approximate p close to the exact one just past n = 50, so z does not jump there).

    Zeros (a pair whose two values are identical, as quantised statistics give) are handled with
    ``zero_method="zsplit"``: their ranks count half for each sign. Dropping them ("wilcox") would
    test the remaining pairs as if the zeros had not been measured, while the boundaries are set
    at the information of all n pairs; splitting keeps n and lets identical pairs pull z toward 0,
    which is what they are evidence of. (The exact distribution assumes no zeros, hence the
    approximation whenever one is present.)"""
    values = _log_ratios(d)
    n = int(values.size)
    if n < 2 or np.all(values == 0.0):
        return SignedRank(z=0.0, p_value=1.0, n=n)
    magnitudes = np.abs(values)
    nonzero = magnitudes[magnitudes > 0]
    has_zeros = nonzero.size < n
    has_ties = np.unique(nonzero).size < nonzero.size
    exact = n <= EXACT_MAX_N and not has_zeros and not has_ties
    result = scipy.stats.wilcoxon(values, zero_method="zsplit", correction=True, alternative="two-sided",
                           method="exact" if exact else "asymptotic")
    p_value = float(min(max(result.pvalue, 0.0), 1.0))
    if p_value >= 1.0:
        return SignedRank(z=0.0, p_value=1.0, n=n)
    ranks = scipy.stats.rankdata(magnitudes)
    rank_plus = float(ranks[values > 0].sum() + ranks[values == 0].sum() / 2.0)
    rank_minus = float(ranks.sum()) - rank_plus
    sign = float(np.sign(rank_plus - rank_minus))
    mean, sd = n * (n + 1) / 4.0, math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    abs_z = _abs_z_from_p(p_value, max(abs(rank_plus - mean) - 0.5, 0.0) / sd)
    return SignedRank(z=sign * abs_z, p_value=p_value, n=n)


@lru_cache(maxsize=EXACT_MAX_N + 1)
def _signed_rank_null_cdf(n: int) -> np.ndarray:
    """P(T+ <= t) for t = 0 .. n(n+1)/2 under "no change", no ties: the coefficients of
    prod_i (1 + x^i) / 2^n (exact in float64: every count is below 2^50)."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for i in range(1, n + 1):
        counts[i:] = counts[i:] + counts[:-i].copy()
    return np.cumsum(counts) / 2.0 ** n


def signed_rank_z_rows(d: np.ndarray) -> np.ndarray:
    """``signed_rank_z(row).z`` for every row of a 2-D array (rows = independent samples of the
    same size): the same numbers, vectorised, for simulating and planning the gate. Rows with
    ties or zeros go through ``signed_rank_z`` one by one."""
    values = np.asarray(d, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"need a 2-D array (rows x pairs), got shape {values.shape}")
    rows, n = values.shape
    z = np.zeros(rows)
    if n < 2 or rows == 0:
        return z
    magnitudes = np.abs(values)
    order = np.argsort(magnitudes, axis=1)
    sorted_magnitudes = np.take_along_axis(magnitudes, order, axis=1)
    irregular = (sorted_magnitudes[:, 0] == 0.0) | np.any(np.diff(sorted_magnitudes, axis=1) == 0.0, axis=1)
    regular = ~irregular
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, n + 1)[None, :].repeat(rows, axis=0), axis=1)
    rank_plus = np.where(values > 0, ranks, 0).sum(axis=1).astype(np.float64)
    total = n * (n + 1) / 2.0
    sign = np.sign(2.0 * rank_plus - total)
    if n <= EXACT_MAX_N:
        cdf = _signed_rank_null_cdf(n)
        # Symmetric null: P(T+ >= t) = P(T+ <= total - t); two-sided p doubles the smaller tail.
        smaller = np.minimum(rank_plus, total - rank_plus).astype(np.int64)
        p_value = np.minimum(2.0 * cdf[smaller], 1.0)
        fallback = np.zeros(rows)
    else:
        mean, sd = total / 2.0, math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
        abs_z_corrected = np.abs(np.abs(rank_plus - mean) - np.where(rank_plus != mean, 0.5, 0.0)) / sd
        p_value = np.minimum(2.0 * scipy.special.ndtr(-abs_z_corrected), 1.0)
        fallback = abs_z_corrected
    with np.errstate(divide="ignore"):
        abs_z = np.where(p_value > 0.0, -scipy.special.ndtri(p_value / 2.0), fallback)
    z[regular] = np.where(p_value[regular] >= 1.0, 0.0, sign[regular] * abs_z[regular])
    for row in np.flatnonzero(irregular):
        z[row] = signed_rank_z(values[row]).z
    return z


def walsh_averages(d: Sequence[float]) -> np.ndarray:
    """All (d_i + d_j) / 2 for i <= j, sorted: the n(n+1)/2 Walsh averages."""
    values = _log_ratios(d)
    i, j = np.triu_indices(values.size)
    return np.sort((values[i] + values[j]) / 2.0)


def hodges_lehmann(d: Sequence[float]) -> float:
    """The Hodges-Lehmann estimate of the pseudo-median: median of the Walsh averages. The
    estimate that belongs to the signed-rank test (it is the value that, subtracted from d, makes
    the test statistic balanced), robust to the occasional wild pair."""
    values = _log_ratios(d)
    if values.size == 0:
        raise ValueError("need at least one value")
    return float(np.median(walsh_averages(values)))


def _walsh_rank_offset(n: int, z_crit: float) -> int:
    """k of Hollander & Wolfe's large-sample interval: floor(n(n+1)/4 - z sqrt(n(n+1)(2n+1)/24))."""
    return int(math.floor(n * (n + 1) / 4.0 - z_crit * math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)))


def walsh_interval(d: Sequence[float], z_crit: float) -> tuple[float, float]:
    """Distribution-free interval for the pseudo-median: the signed-rank test inverted at the
    normal critical value ``z_crit`` (Hollander & Wolfe): with the N = n(n+1)/2 sorted Walsh
    averages W and k = floor(n(n+1)/4 - z_crit sqrt(n(n+1)(2n+1)/24)), [W_(k+1), W_(N-k)]
    (1-based). (-inf, inf) when k < 0 (too few pairs for that level) or z_crit is infinite."""
    values = _log_ratios(d)
    if not z_crit >= 0:
        raise ValueError(f"z_crit must be >= 0, got {z_crit}")
    n = values.size
    if n == 0 or math.isinf(z_crit):
        return -math.inf, math.inf
    k = _walsh_rank_offset(n, z_crit)
    if k < 0:
        return -math.inf, math.inf
    walsh = walsh_averages(values)
    k = min(k, (walsh.size - 1) // 2)  # z_crit near 0: the interval shrinks to the middle, not past it
    return float(walsh[k]), float(walsh[walsh.size - 1 - k])


@dataclass(frozen=True)
class WalshSummary:
    """Per-row Hodges-Lehmann estimate and Walsh interval ends (arrays of one value per row)."""

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray


def walsh_summary_rows(d: np.ndarray, z_crit: float, rows_per_chunk: Optional[int] = None) -> WalshSummary:
    """``hodges_lehmann`` and ``walsh_interval`` for every row of a 2-D array, vectorised (order
    statistics by partial sort, in chunks so that memory stays bounded)."""
    values = np.asarray(d, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] == 0:
        raise ValueError(f"need a 2-D array with at least one pair per row, got shape {values.shape}")
    if not z_crit >= 0:
        raise ValueError(f"z_crit must be >= 0, got {z_crit}")
    rows, n = values.shape
    i, j = np.triu_indices(n)
    total = i.size
    middle = [(total - 1) // 2, total // 2]  # equal when the count is odd
    k = -1 if math.isinf(z_crit) else _walsh_rank_offset(n, z_crit)
    k = min(k, (total - 1) // 2)
    wanted = sorted(set(middle + ([k, total - 1 - k] if k >= 0 else [])))
    estimate, low, high = np.empty(rows), np.full(rows, -math.inf), np.full(rows, math.inf)
    chunk = rows_per_chunk or max(1, 2_000_000 // total)
    for start in range(0, rows, chunk):
        block = values[start:start + chunk]
        walsh = np.partition((block[:, i] + block[:, j]) / 2.0, wanted, axis=1)
        estimate[start:start + chunk] = (walsh[:, middle[0]] + walsh[:, middle[1]]) / 2.0
        if k >= 0:
            low[start:start + chunk] = walsh[:, k]
            high[start:start + chunk] = walsh[:, total - 1 - k]
    return WalshSummary(estimate=estimate, low=low, high=high)


# --------------------------------------------------------------------------- the sequential gate


@dataclass(frozen=True)
class CaseSpec:
    """One case of a sequential gate: its minimum effect (relative, 0.05 = 5 %) and which way is
    better ("lower" for latencies, "higher" for throughputs)."""

    case_id: str
    min_effect: float = 0.05
    direction: str = "lower"
    # The standard deviation, on the log scale, of an offset fixed for the length of one gate
    # (between-gate variance, estimated from stored A/A gates: ``harness.gate.between``). No
    # number of pairs inside one gate averages it away, so it is added to the variance of the
    # estimate at every look; 0 leaves the within-gate test exactly as it was.
    between_sd_log: float = 0.0

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"{self.case_id}: direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if not 0.0 <= self.min_effect < 10.0:
            raise ValueError(f"{self.case_id}: min_effect must be a relative change in [0, 10), got {self.min_effect}")
        if not 0.0 <= self.between_sd_log < 1.0:
            raise ValueError(f"{self.case_id}: between_sd_log must be a log-scale SD in [0, 1), got {self.between_sd_log}")

    @property
    def band_log(self) -> float:
        """The minimum effect on the log scale: symmetric, so +5 % and 1/1.05 are the same size."""
        return math.log1p(self.min_effect)

    @property
    def worse_sign(self) -> int:
        return 1 if self.direction == "lower" else -1


@dataclass(frozen=True)
class CaseState:
    """Where one case stands after a look. Ratios are candidate / base; the interval is the
    repeated confidence interval (valid at every look at once), as ratios."""

    case_id: str
    outcome: Optional[str]  # None while the case is open
    n_pairs: int
    estimate_log: float  # Hodges-Lehmann estimate of log(candidate / base)
    ratio: float  # exp(estimate_log)
    interval_low: float
    interval_high: float
    z: float  # signed-rank z (positive: candidate larger)
    test_boundary: float  # |z| at or beyond this rejects "no change" at this look (inf: nothing to spend)
    interval_boundary: float  # the critical z of the repeated confidence interval
    p_nominal: float  # two-sided nominal p of z (not adjusted for looks or cases)
    local_alpha: float  # this case's current share of alpha under Holm
    rejected: bool  # "no change" rejected at some look
    likely_regression: bool  # inconclusive at the budget with a worsening estimate >= the minimum effect
    looks: int
    reason: str

    @property
    def decided(self) -> bool:
        return self.outcome is not None

    def to_dict(self) -> dict:
        """JSON-ready: non-finite numbers (an infinite boundary or interval end: nothing spent yet,
        or too few pairs for a bounded interval) become None."""
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, float) and not math.isfinite(value):
                data[key] = None
        return data


@dataclass(frozen=True)
class _Measurement:
    """What one look measured for one case, before the decision."""

    n_pairs: int
    rank: SignedRank
    estimate_log: float
    interval_log: tuple[float, float]
    interval_boundary: float


@dataclass
class _Track:
    """A case's running record: its look history (what its boundaries are computed from) and its
    share of alpha."""

    spec: CaseSpec
    local_alpha: float
    state: CaseState
    pairs_at_look: list[int] = field(default_factory=list)
    tau_at_look: list[float] = field(default_factory=list)
    rejected_sign: int = 0  # sign of z when "no change" was rejected; 0 while not rejected
    sd_per_pair: float = math.nan  # the latest look's noise per pair (what the between-gate term weighs against)

    @property
    def rejected(self) -> bool:
        return self.rejected_sign != 0

    def check_pairs(self, n_pairs: int) -> None:
        if self.pairs_at_look and n_pairs < self.pairs_at_look[-1]:
            raise ValueError(f"{self.spec.case_id}: {n_pairs} pairs after {self.pairs_at_look[-1]}: "
                             f"pass all pairs so far at every look")

    def record_look(self, n_pairs: int, tau: float) -> None:
        self.check_pairs(n_pairs)
        if self.pairs_at_look and n_pairs == self.pairs_at_look[-1]:
            # No new pairs: the same statistic seen again, later. Treating it as one look at the
            # later tau is exact: rejecting at either sighting is rejecting at the lower (later)
            # boundary, and the boundaries before this information level are untouched.
            self.tau_at_look[-1] = tau
            return
        self.pairs_at_look.append(n_pairs)
        self.tau_at_look.append(tau)


class SequentialGate:
    """The multi-case group-sequential decision, with Holm across cases.

    Call ``look(tau, pairs)`` each time the driver wants a decision, with every d value so far of
    every case still open (decided cases need not be passed; they are returned unchanged). At each
    look and for each case:

    - its *test* boundary: the group-sequential boundary from the case's own look history (pairs
      and tau at each of its looks) at its current Holm level; its *interval* boundary: the same at
      level 1 - confidence, for the repeated confidence interval (RCI) on the effect;
    - looks with fewer than ``min_pairs`` pairs are recorded but spend nothing (boundary inf); when
      spending starts, the cumulative amount at the current tau is spent, so nothing is lost;
    - "no change" is rejected when |z| reaches the test boundary (either direction); its level is
      then shared among the cases not yet rejected and they are tested again at this look, until
      no new rejection (Holm's cascade);
    - rejected, estimate at least the minimum effect, same sign as the rejection: regressed or
      improved (stop); RCI inside (-band, band): unchanged (stop); else open. At the final look an
      open case is inconclusive, ``likely_regression`` when its estimate is a worsening >= band and
      a one-sided test at its level finds it worse.
    """

    def __init__(self, cases: Sequence[CaseSpec], alpha: float = 0.01, confidence: float = 0.95,
                 spending: str = "obf", min_pairs: Optional[int] = None) -> None:
        if not cases:
            raise ValueError("need at least one case")
        ids = [c.case_id for c in cases]
        if len(set(ids)) != len(ids):
            raise ValueError("case ids must be unique")
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        if not 0.5 <= confidence < 1.0:
            raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
        if spending not in SPENDING_KINDS:
            raise ValueError(f"spending must be one of {SPENDING_KINDS}, got {spending!r}")
        self.alpha = float(alpha)
        self.confidence = float(confidence)
        self.spending = spending
        # Below this many pairs the exact two-sided signed-rank test cannot reach p < alpha at all
        # (all signs alike gives p = 2 / 2^n), so alpha spent there would be spent for nothing.
        self.min_pairs = int(min_pairs) if min_pairs is not None else min_repeats_signed_rank(alpha)
        if self.min_pairs < 2:
            raise ValueError(f"min_pairs must be >= 2, got {self.min_pairs}")
        share = self.alpha / len(cases)
        self._tracks = {c.case_id: _Track(c, share, _initial_state(c.case_id, share)) for c in cases}
        self._last_tau = 0.0

    @property
    def states(self) -> dict[str, CaseState]:
        return {case_id: track.state for case_id, track in self._tracks.items()}

    @property
    def open_cases(self) -> list[str]:
        return [case_id for case_id, track in self._tracks.items() if not track.state.decided]

    def look(self, tau: float, pairs: Mapping[str, Sequence[float]], final: bool = False) -> dict[str, CaseState]:
        """One look at calendar fraction ``tau`` with all pairs so far of the open cases.

        ``final=True`` is the last look: it spends all of alpha whatever ``tau`` says (the budget is
        over, nothing is kept for later), and every open case gets an outcome."""
        unknown = sorted(set(pairs) - set(self._tracks))
        if unknown:
            # Every caller (the schedule, compare's recheck, the microbenchmark) builds its pairs
            # from the specs it built this gate with; user input never names a case here.
            raise AssertionError(f"internal invariant broken: pairs of {', '.join(unknown)}, which this gate was not "
                                 "built with; the pairs looked at and the gate's specs must come from one list of cases")
        if not final and not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
        for case_id, values in pairs.items():  # check every case before changing any
            self._tracks[case_id].check_pairs(len(values))
        # Calendar time only moves forward; a clock step backwards must not un-spend alpha.
        tau = 1.0 if final else max(float(tau), self._last_tau)
        self._last_tau = tau
        measured = {case_id: self._measure(self._tracks[case_id], values, tau)
                    for case_id, values in pairs.items() if not self._tracks[case_id].state.decided}
        boundary = self._reject_with_recycling(measured)
        for case_id, measurement in measured.items():
            track = self._tracks[case_id]
            track.state = self._decide(track, measurement, boundary[case_id], final)
        if final:
            for track in self._tracks.values():
                if not track.state.decided:  # open, but no pairs at the final look
                    track.state = _inconclusive_without_pairs(track)
        return self.states

    # ---- one look

    def _measure(self, track: _Track, values: Sequence[float], tau: float) -> _Measurement:
        d = _log_ratios(values)
        track.record_look(int(d.size), tau)
        track.sd_per_pair = noise_per_pair(d) if track.spec.between_sd_log > 0 else math.nan
        interval_boundary = self._boundary(track, 1.0 - self.confidence)
        estimate = hodges_lehmann(d) if d.size else math.nan
        interval = walsh_interval(d, interval_boundary) if d.size else (-math.inf, math.inf)
        rank = signed_rank_z(d)
        shrink = _between_shrink(track)
        if shrink < 1.0:
            # The offset is one draw for the whole gate, so it widens the interval by its own
            # quantile at the same boundary, in quadrature with what the pairs leave.
            spread = interval_boundary * track.spec.between_sd_log
            interval = (estimate - math.hypot(estimate - interval[0], spread),
                        estimate + math.hypot(interval[1] - estimate, spread))
            z = rank.z * shrink
            rank = SignedRank(z, float(2.0 * scipy.special.ndtr(-abs(z))), rank.n)
        return _Measurement(int(d.size), rank, estimate, interval, interval_boundary)

    def _boundary(self, track: _Track, level: float) -> float:
        """The current look's boundary at ``level`` from the case's look history."""
        if track.pairs_at_look[-1] < self.min_pairs:
            return math.inf
        # Looks before min_pairs had infinite boundaries, which constrain nothing: leaving them out
        # gives the same later boundaries for less work.
        spending_looks = [k for k, n in enumerate(track.pairs_at_look) if n >= self.min_pairs]
        info = tuple(_information(track, track.pairs_at_look[k]) for k in spending_looks)
        cumulative = tuple(spent(level, track.tau_at_look[k], self.spending) for k in spending_looks)
        return _boundaries_cached(info, cumulative)[-1]

    def _reject_with_recycling(self, measured: Mapping[str, _Measurement]) -> dict[str, float]:
        """Holm as a graphical procedure: test at current levels, pass each rejected case's level on
        in equal shares to the cases not yet rejected, and test again until nothing new is rejected.
        Returns each measured case's test boundary at its final level for this look."""
        while True:
            boundary = {case_id: self._boundary(self._tracks[case_id], self._tracks[case_id].local_alpha)
                        for case_id in measured}
            newly = [case_id for case_id, m in measured.items()
                     if not self._tracks[case_id].rejected and _crosses(m.rank.z, boundary[case_id])]
            if not newly:
                return boundary
            for case_id in newly:
                # A boundary of 0 (more asked than the surviving mass) can reject z = 0: call it +.
                self._recycle(case_id, 1 if measured[case_id].rank.z >= 0 else -1)

    def _recycle(self, case_id: str, sign: int) -> None:
        rejected = self._tracks[case_id]
        rejected.rejected_sign = sign
        # Every case not yet rejected gets an equal share, including cases already stopped as
        # unchanged: Holm's graph does not know why a case stopped, and a stopped case is never
        # tested again, so its share is wasted. That keeps the procedure exactly Holm (and valid);
        # handing stopped cases' shares to the open ones would need a different argument.
        receivers = [t for t in self._tracks.values() if not t.rejected]
        for track in receivers:
            track.local_alpha += rejected.local_alpha / len(receivers)

    def _decide(self, track: _Track, m: _Measurement, test_boundary: float, final: bool) -> CaseState:
        spec = track.spec
        band = spec.band_log
        estimate = m.estimate_log
        low, high = m.interval_log
        estimate_sign = int(np.sign(estimate)) if math.isfinite(estimate) else 0
        beyond = math.isfinite(estimate) and estimate_sign != 0 and abs(estimate) >= band
        worse = estimate_sign == spec.worse_sign
        outcome, likely = None, False
        # The estimate must agree in sign with the rejection: a test rejected for "slower" does
        # not license calling the case faster.
        if track.rejected and beyond and estimate_sign == track.rejected_sign:
            outcome = Outcome.REGRESSED if worse else Outcome.IMPROVED
        elif -band < low and high < band:
            outcome = Outcome.UNCHANGED
        elif final:
            outcome = Outcome.INCONCLUSIVE
            likely = bool(worse and beyond and _worse_at_level(m.rank.z, spec, track.local_alpha))
        looks = track.state.looks + 1
        z = m.rank.z
        return CaseState(
            case_id=spec.case_id, outcome=outcome, n_pairs=m.n_pairs, estimate_log=estimate,
            ratio=math.exp(estimate) if math.isfinite(estimate) else math.nan,
            interval_low=math.exp(low), interval_high=math.exp(high), z=z, test_boundary=test_boundary,
            interval_boundary=m.interval_boundary, p_nominal=m.rank.p_value if m.n_pairs >= 2 else 1.0,
            local_alpha=track.local_alpha, rejected=track.rejected, likely_regression=likely, looks=looks,
            reason=_reason(outcome, likely, spec, m, test_boundary, track.rejected, self.confidence,
                           self.min_pairs),
        )


def _information(track: _Track, n_pairs: int) -> float:
    """The statistical information at ``n_pairs`` pairs, up to a constant (only ratios of it shape
    the boundaries). Within one gate it grows with the pairs; with an offset fixed per gate of SD
    tau it is 1 / (sd^2 / n + tau^2), which stops growing once tau dominates. Its z statistics
    still have the canonical joint distribution: the offset is common to every look, so
    Corr(Z_j, Z_k) = sqrt(I_j / I_k) as with independent increments."""
    sd, between = track.sd_per_pair, track.spec.between_sd_log
    if not (between > 0 and sd > 0):
        return float(n_pairs)
    se = estimate_se(sd, n_pairs)
    return 1.0 / (se * se + between * between)


def _between_shrink(track: _Track) -> float:
    """How much the between-gate term shrinks the within-gate z: sqrt(se^2 / (se^2 + tau^2)) at
    the latest look (1: no term, or no noise measured yet to weigh it against)."""
    sd, between, n = track.sd_per_pair, track.spec.between_sd_log, track.pairs_at_look[-1]
    if not (between > 0 and sd > 0 and n > 0):
        return 1.0
    se = estimate_se(sd, n)
    return se / math.hypot(se, between)


def noise_per_pair(pairs: Sequence[float]) -> float:
    """The relative noise one pair carries, as the rank test sees it: the width of the
    distribution-free 95 % interval of the pairs' pseudo-median, turned back into a per-pair
    standard deviation (what ``estimate_se`` expects). On a shared runner a few pairs hit by a
    neighbour's burst inflate the plain standard deviation several-fold while the signed-rank
    test hardly notices them, so planning with it would understate what the gate can detect.
    With too few pairs for a bounded interval, the plain standard deviation."""
    d = np.asarray(pairs, dtype=float)
    if d.size < 2:
        return math.nan
    z = float(scipy.special.ndtri(0.975))
    low, high = walsh_interval(d, z)
    if not (math.isfinite(low) and math.isfinite(high)):
        return float(np.std(d, ddof=1))
    return float((high - low) / (2 * z) * math.sqrt(d.size) / RANK_SE_FACTOR)


def _crosses(z: float, boundary: float) -> bool:
    # An infinite boundary rejects nothing, not even an infinite z.
    return math.isfinite(boundary) and abs(z) >= boundary


def _initial_state(case_id: str, local_alpha: float) -> CaseState:
    return CaseState(
        case_id=case_id, outcome=None, n_pairs=0, estimate_log=math.nan, ratio=math.nan, interval_low=0.0,
        interval_high=math.inf, z=0.0, test_boundary=math.inf, interval_boundary=math.inf, p_nominal=1.0,
        local_alpha=local_alpha, rejected=False, likely_regression=False, looks=0, reason="no pairs yet",
    )


def _inconclusive_without_pairs(track: _Track) -> CaseState:
    state = track.state
    spec = track.spec
    estimate = state.estimate_log
    likely = bool(math.isfinite(estimate) and np.sign(estimate) == spec.worse_sign and abs(estimate) >= spec.band_log
                  and estimate != 0.0 and _worse_at_level(state.z, spec, track.local_alpha))
    return replace(state, outcome=Outcome.INCONCLUSIVE, likely_regression=likely, local_alpha=track.local_alpha,
                   reason=f"{state.reason}; no pairs at the final look")


def _worse_at_level(z: float, spec: CaseSpec, level: float) -> bool:
    """A one-sided test of "no worse" at ``level`` (the case's share of alpha) on the final
    look's z, with the between-gate term in it. What keeps the likely-regression rule's own false
    alarms at or below alpha: an estimate beyond the minimum effect alone is what an unchanged
    case shows whenever its noise (or its gate's offset) is large against the minimum effect."""
    return math.isfinite(z) and float(scipy.special.ndtr(-spec.worse_sign * z)) <= level


def _percent(log_ratio: float) -> str:
    return f"{math.expm1(log_ratio) * 100:+.1f}"


def _effect_text(m: _Measurement, confidence: float, min_pairs: int) -> str:
    low, high = m.interval_log
    conf = f"{confidence * 100:g} %"
    if not (math.isfinite(low) and math.isfinite(high)):
        why = f"{m.n_pairs} pairs < {min_pairs}" if m.n_pairs < min_pairs else "too few pairs for its level"
        return f"{_percent(m.estimate_log)} % (no {conf} repeated CI yet: {why})" if m.n_pairs else "no pairs"
    return f"{_percent(m.estimate_log)} % [{_percent(low)}, {_percent(high)}] ({conf} repeated CI)"


def _reason(outcome: Optional[str], likely: bool, spec: CaseSpec, m: _Measurement, test_boundary: float,
            rejected: bool, confidence: float, min_pairs: int) -> str:
    effect = _effect_text(m, confidence, min_pairs)
    me = f"{spec.min_effect * 100:g} %"
    if math.isfinite(test_boundary):
        test = f"z={m.rank.z:.1f} {'beyond' if abs(m.rank.z) >= test_boundary else 'within'} {test_boundary:.1f}"
    else:
        test = f"z={m.rank.z:.1f}, no alpha to spend yet"
    if outcome in (Outcome.REGRESSED, Outcome.IMPROVED):
        return f"{effect}, {test}, ≥ the {me} minimum effect"
    if outcome == Outcome.UNCHANGED:
        return f"{effect} inside the ±{me} minimum effect"
    if rejected:
        state = "at the budget" if outcome else "open"
        return f"{effect}, no change rejected ({test}) but the estimate is below the {me} minimum effect: {state}"
    if outcome == Outcome.INCONCLUSIVE and likely:
        return f"{effect}, {test} at the budget: estimate ≥ the {me} minimum effect, likely a regression"
    if outcome == Outcome.INCONCLUSIVE:
        return f"{effect}, {test} at the budget: neither a change ≥ the {me} minimum effect nor its absence shown"
    return f"{effect}, {test}: open after {m.n_pairs} pairs"


# --------------------------------------------------------------------------- planning


def estimate_se(log_sd_per_pair: float, n_pairs: float) -> float:
    """Standard error of the Hodges-Lehmann estimate of a log ratio under normal noise of sd
    ``log_sd_per_pair`` per pair (the sd of d, which carries both processes' noise)."""
    if not log_sd_per_pair >= 0 or not n_pairs > 0:
        raise ValueError(f"need log_sd >= 0 and n_pairs > 0, got {log_sd_per_pair}, {n_pairs}")
    return log_sd_per_pair * RANK_SE_FACTOR / math.sqrt(n_pairs)


def final_boundary(alpha: float, looks: int = PLANNING_LOOKS, spending: str = "obf") -> float:
    """The final-look boundary of ``looks`` equally spaced looks (in pairs and in tau): what a
    case at level ``alpha`` must reach at the budget."""
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}")
    fractions = [(k + 1) / looks for k in range(looks)]
    return _boundaries_cached(tuple(float(k + 1) for k in range(looks)),
                              tuple(spent(alpha, tau, spending) for tau in fractions))[-1]


def min_detectable_effect(log_sd_per_pair: float, n_pairs_at_budget: int, alpha: float, min_effect: float,
                          power: float = 0.95, spending: str = "obf", looks: int = PLANNING_LOOKS,
                          significant: bool = False) -> float:
    """Relative worsening (0.07 = 7 %) that the gate catches with probability ``power`` by the
    budget, under a normal approximation: estimate ~ N(effect, se^2) with se from
    ``estimate_se``, z = estimate / se, and the final boundary of ``looks`` equally spaced looks
    (early stops ignored; they only add detections of large effects).

    Both outcomes that fail the build need the estimate at least the minimum effect: "regressed"
    (rejected and estimate >= band) and "inconclusive, likely regression" (estimate >= band at the
    budget and z beyond the one-sided z_(1-alpha)). Since z and the estimate move together, the
    union is governed by the lower of the two thresholds, so by default the answer is the effect
    at which P(estimate >= max(band, z_(1-alpha) se)) = power:
    ``exp(max(band, z_(1-alpha) se) + z_power se) - 1``. ``significant=True`` asks for "regressed"
    itself, which needs z beyond the final boundary c instead: ``exp(max(band, c se) + z_power se) - 1``.

    ``alpha`` is the case's own level: alpha / m for m cases under Holm, before any recycling."""
    if not 0.5 < power < 1.0:
        raise ValueError(f"power must be in (0.5, 1), got {power}")
    se = estimate_se(log_sd_per_pair, n_pairs_at_budget)
    band = math.log1p(min_effect)
    z_power = float(scipy.special.ndtri(power))
    critical = final_boundary(alpha, looks, spending) if significant else -float(scipy.special.ndtri(alpha))
    threshold = max(band, critical * se)
    return math.expm1(threshold + z_power * se)


def false_alarm_at_budget(log_sd_per_pair: float, n_pairs: int, min_effect: float, alpha: float) -> float:
    """P(estimate >= band and z >= z_(1-alpha) | no change) at the budget, normal approximation:
    the chance that an A/A run ends "inconclusive, likely regression" and fails the build on that
    rule, at most ``alpha`` by its one-sided test (an upper estimate: an A/A that stopped earlier
    as unchanged never reaches the budget)."""
    se = estimate_se(log_sd_per_pair, n_pairs)
    z_alpha = -float(scipy.special.ndtri(alpha))
    if se == 0.0:
        return 0.0 if min_effect > 0 else alpha
    return float(scipy.special.ndtr(-max(math.log1p(min_effect) / se, z_alpha)))


def pairs_needed(log_sd_per_pair: float, effect: float, alpha: float, power: float = 0.95,
                 min_effect: float = 0.0, spending: str = "obf", looks: int = PLANNING_LOOKS) -> Optional[int]:
    """Pairs at the budget for a relative ``effect`` (0.1 = +10 %, -0.1 = -10 %) to be rejected
    with probability ``power`` at the final boundary of ``looks`` equally spaced looks (``looks=1``:
    a single test at the end), and with ``min_effect`` > 0 also to have its estimate beyond that
    minimum effect with the same probability (what "regressed" needs). Never fewer than the
    exact test needs to reach alpha at all. None when |effect| is within the minimum effect: no
    number of pairs makes it "regressed"."""
    if not 0.5 < power < 1.0:
        raise ValueError(f"power must be in (0.5, 1), got {power}")
    if not log_sd_per_pair > 0:
        raise ValueError(f"log_sd_per_pair must be > 0, got {log_sd_per_pair}")
    size = abs(math.log1p(effect))
    band = math.log1p(min_effect)
    if size <= band or size == 0.0:
        return None
    z_power = float(scipy.special.ndtri(power))
    sd = log_sd_per_pair * RANK_SE_FACTOR
    for_test = ((final_boundary(alpha, looks, spending) + z_power) * sd / size) ** 2
    for_band = (z_power * sd / (size - band)) ** 2 if band > 0 else 0.0
    return max(math.ceil(max(for_test, for_band)), min_repeats_signed_rank(alpha))
