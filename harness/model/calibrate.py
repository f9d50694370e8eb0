"""Fit alpha and beta from a measured allreduce size sweep (a critpath run directory).

Each measured algorithm has a model of the form time = A(p) * alpha + B(p) * n * beta (ring:
A = 2(p-1), B = 2(p-1)/p; binomial tree: A = B = 2 ceil(log2 p)). Given the records of family
``allreduce`` (params algo, size_bytes, world; the p50 or mean of the samples), the fit is a
least squares on relative error (each row divided by the measured time, so the 8-byte points
weigh as much as the megabyte points) with alpha, beta >= 0. The default loss is scipy's robust
``soft_l1``: on a shared machine a few sizes catch a scheduler time slice (p50 of milliseconds
where neighbours take 200 us), and a plain square would let them drag the fit; ``loss="linear"``
is the ordinary least squares. Residuals are reported per point, outliers included.

Validation: the sizes of each world are split into fitting and held-out points (every
``holdout_every``-th size is held out); the fit sees only the former, and the prediction error at
the latter is the model's own validation on this machine. A fit across several worlds at once
also tests how the model scales with p, not only with n.

A record judged contended (``harness.core.contention``: its loop waited for a core) is withheld
from the fit and counted (``Fit.n_withheld_contended``, ``Points.withheld``), as the ring/tree
crossover withholds it: its time is the machine's load as much as the algorithm's, and a robust
loss does not undo a sweep whose every size was slowed. Where every record to fit is contended
there is no fit (``CalibrationError``): measure on a quiet machine.

beta absorbs the local reduction (gamma) here: at a fixed p the two are both proportional to n
and a size sweep cannot tell them apart.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np
import scipy  # scipy.optimize loads when a fit runs (scipy's lazy loading), not at import

from harness.core.store import distinct_run_ids, distinct_runs, load_records, load_whole

STATISTICS = ("p50", "mean")


def ring_coefficients(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return 2 * (p - 1), 2 * (p - 1) / p


def tree_coefficients(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    levels = np.ceil(np.log2(np.maximum(p, 1)))
    return 2 * levels, 2 * levels


def p2p_coefficients(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    one = np.ones_like(np.asarray(p, dtype=np.float64))
    return one, one


# p2p_<tier>: one-way time (half the p50 round trip) of the p2p_tiers family, alpha + n beta:
# the per-tier fit, from a run across nodes.
COEFFICIENTS = {"ring": ring_coefficients, "tree": tree_coefficients,
                "p2p_intra": p2p_coefficients, "p2p_inter": p2p_coefficients}
TIER_ALGOS = {"p2p_intra": "intra", "p2p_inter": "inter"}


class CalibrationError(ValueError):
    """Not enough or unusable data; the message names the run directory."""


@dataclass(frozen=True)
class Point:
    algo: str
    world: int
    size_bytes: int
    measured_s: float
    heldout: bool


@dataclass(frozen=True)
class Residual:
    world: int
    size_bytes: int
    heldout: bool
    measured_us: float
    modelled_us: float

    @property
    def rel_error(self) -> float:
        return (self.modelled_us - self.measured_us) / self.measured_us


@dataclass(frozen=True)
class Fit:
    algo: str
    worlds: tuple[int, ...]
    statistic: str
    alpha_us: float
    beta_ns_per_byte: float  # includes the reduction cost, see the module note
    n_fit: int
    n_heldout: int
    rms_rel_error_fit: float
    rms_rel_error_heldout: float  # nan when nothing was held out
    max_abs_rel_error_heldout: float
    median_abs_rel_error_heldout: float
    residuals: tuple[Residual, ...] = field(repr=False, default=())
    n_withheld_contended: int = 0  # records of this algo and these worlds judged contended, not fitted

    @property
    def bandwidth_gbytes_s(self) -> float:
        return 1.0 / self.beta_ns_per_byte if self.beta_ns_per_byte > 0 else math.inf

    def predict_s(self, p, n_bytes) -> np.ndarray:
        a, b = COEFFICIENTS[self.algo](np.asarray(p, dtype=np.float64))
        return a * self.alpha_us * 1e-6 + b * np.asarray(n_bytes, dtype=np.float64) * self.beta_ns_per_byte * 1e-9

    def to_dict(self) -> dict:
        out = asdict(self)
        out["residuals"] = [dict(asdict(r), rel_error=r.rel_error) for r in self.residuals]
        out["bandwidth_gbytes_s"] = self.bandwidth_gbytes_s
        out["source"] = "fit of measured records"
        return out


@dataclass(frozen=True)
class Points:
    """The points of one or more runs to fit, and what was withheld from them."""
    points: list[Point]
    withheld: dict = field(default_factory=dict)  # (algo, world) -> contended records left out

    def withheld_of(self, algo: str, worlds: Iterable[int]) -> int:
        return sum(self.withheld.get((algo, w), 0) for w in worlds)


def points_from_run(run_dir: Path, statistic: str = "p50", holdout_every: int = 3,
                    backend: Optional[str] = None) -> list[Point]:
    """The usable allreduce points of a run directory (ok, uncontended records of a modelled algorithm)."""
    return points_of(load_records(Path(run_dir)), statistic, holdout_every, backend).points


def _points_of_runs(run_dir, statistic: str, holdout_every: int) -> tuple[list[Path], Points]:
    """The directories ``run_dir`` names (one, or a list) and their points pooled: each run whole,
    and each once (given twice, or copied into a second directory, it would weigh its points twice
    in the fit)."""
    dirs = distinct_runs([run_dir] if isinstance(run_dir, (str, Path)) else list(run_dir))
    runs = distinct_run_ids([load_whole(d) for d in dirs])  # a killed run's sweep is no run's fit
    each = [points_of(run.records, statistic, holdout_every) for run in runs]
    withheld: Counter = Counter()
    for one in each:
        withheld.update(one.withheld)
    return dirs, Points([pt for one in each for pt in one.points], dict(withheld))


def points_of(records, statistic: str = "p50", holdout_every: int = 3, backend: Optional[str] = None) -> Points:
    """The usable allreduce points of one run's records, and the contended ones withheld."""
    if statistic not in STATISTICS:
        raise CalibrationError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    points = []
    by_group: dict[tuple[str, int], list] = {}
    withheld: Counter = Counter()
    for r in records:
        if not r.ok or (backend is not None and r.backend != backend):
            continue
        if r.family == "allreduce" and r.params.get("algo") in COEFFICIENTS:
            group = (r.params["algo"], int(r.params["world"]))
        elif r.family == "p2p_tiers" and r.params["tier"] in ("intra", "inter"):  # pairs: a round sweep
            group = ("p2p_" + r.params["tier"], 2)  # a pair of ranks
        else:
            continue
        if r.contention_verdict.contended:
            withheld[group] += 1
        else:
            by_group.setdefault(group, []).append(r)
    for (algo, world), group in sorted(by_group.items()):
        group.sort(key=lambda r: r.params["size_bytes"])
        for i, r in enumerate(group):
            value_ns = getattr(r.summary, f"{statistic}_ns")
            if algo in TIER_ALGOS:
                value_ns /= 2  # a ping-pong iteration is a round trip
            # Hold out interior points only, so the fit spans the whole size range.
            held = holdout_every > 0 and 0 < i < len(group) - 1 and i % holdout_every == 1
            points.append(Point(algo, world, int(r.params["size_bytes"]), value_ns * 1e-9, held))
    return Points(points, dict(withheld))


def withheld_text(withheld: dict) -> str:
    """How many contended records were withheld from a fit, and of what; "" when none were."""
    total = sum(withheld.values())
    if not total:
        return ""
    parts = ", ".join(f"{algo} world {world}: {n}" for (algo, world), n in sorted(withheld.items()))
    return (f"{total} contended record{'' if total == 1 else 's'} withheld from the fit ({parts}): a contended "
            "record's time is the machine's load as much as the algorithm's; measure on a quiet machine to fit them")


LOSSES = ("soft_l1", "linear", "huber", "cauchy")


def fit(points: Sequence[Point], algo: str, worlds: Optional[Iterable[int]] = None, statistic: str = "p50",
        loss: str = "soft_l1") -> Fit:
    wanted = set(worlds) if worlds is not None else None
    chosen = [pt for pt in points if pt.algo == algo and (wanted is None or pt.world in wanted)]
    train = [pt for pt in chosen if not pt.heldout]
    if len(train) < 2:
        raise CalibrationError(f"fit of {algo}: need at least 2 measured sizes, got {len(train)}")
    p = np.array([pt.world for pt in train], dtype=np.float64)
    n = np.array([pt.size_bytes for pt in train], dtype=np.float64)
    y = np.array([pt.measured_s for pt in train])
    if np.all(p == 1):
        raise CalibrationError(f"fit of {algo}: world 1 moves no data; need world >= 2")
    a, b = COEFFICIENTS[algo](p)
    # Units scaled so both unknowns are O(1): alpha in us, beta in ns/byte.
    design = np.column_stack([a * 1e-6, b * n * 1e-9]) / y[:, None]
    if loss not in LOSSES:
        raise CalibrationError(f"loss must be one of {LOSSES}, got {loss!r}")
    start, *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    start = np.clip(start, 1e-9, None)
    solution = scipy.optimize.least_squares(lambda x: design @ x - 1.0, start, bounds=(0.0, np.inf), loss=loss, f_scale=0.1)
    alpha_us, beta_ns = solution.x
    result = Fit(algo, tuple(sorted({pt.world for pt in chosen})), statistic, float(alpha_us), float(beta_ns),
                 len(train), 0, math.nan, math.nan, math.nan, math.nan)
    residuals = []
    for pt in chosen:
        model_s = float(result.predict_s(pt.world, pt.size_bytes))
        residuals.append(Residual(pt.world, pt.size_bytes, pt.heldout, pt.measured_s * 1e6, model_s * 1e6))
    fit_err = np.array([r.rel_error for r in residuals if not r.heldout])
    held_err = np.array([r.rel_error for r in residuals if r.heldout])
    return Fit(
        algo, result.worlds, statistic, result.alpha_us, result.beta_ns_per_byte, len(train), len(held_err),
        float(np.sqrt(np.mean(fit_err ** 2))),
        float(np.sqrt(np.mean(held_err ** 2))) if held_err.size else math.nan,
        float(np.max(np.abs(held_err))) if held_err.size else math.nan,
        float(np.median(np.abs(held_err))) if held_err.size else math.nan,
        tuple(residuals),
    )


def fit_run(run_dir, statistic: str = "p50", holdout_every: int = 3, loss: str = "soft_l1") -> list[Fit]:
    """One fit per measured algorithm over every world in the run(s), plus one per (algo, world).
    ``run_dir`` is one run directory or a list of them (e.g. one per world)."""
    return _fits(*_points_of_runs(run_dir, statistic, holdout_every), statistic, loss)


def _fits(dirs: Sequence[Path], found: Points, statistic: str, loss: str) -> list[Fit]:
    points = found.points
    if not points and found.withheld:
        total = sum(found.withheld.values())
        raise CalibrationError(
            f"{', '.join(map(str, dirs))}: every one of the {total} record{'' if total == 1 else 's'} to fit is "
            "contended (its timed loop waited for a core: harness.core.contention), and contended records are not "
            "fitted; measure on a quiet machine (nothing else running) and calibrate from that run")
    if not points:
        raise CalibrationError(
            f"{', '.join(map(str, dirs))}: no ok allreduce records with algo ring or tree, nor p2p_tiers records, to fit "
            "(run e.g. `critpath run --families allreduce --world 2 --sizes 8:4M:x2`)")
    fits = []
    for algo in sorted({pt.algo for pt in points}):
        worlds = sorted({pt.world for pt in points if pt.algo == algo})
        for chosen in [worlds] + ([[w] for w in worlds] if len(worlds) > 1 else []):
            fits.append(replace(fit(points, algo, chosen, statistic, loss),
                                n_withheld_contended=found.withheld_of(algo, chosen)))
    return fits


@dataclass(frozen=True)
class Extrapolation:
    """A fit on some worlds predicting every size of a world it never saw: the model's test in p."""

    algo: str
    train_worlds: tuple[int, ...]
    test_world: int
    n: int
    median_abs_rel_error: float
    rms_rel_error: float


def extrapolations(run_dir, statistic: str = "p50", loss: str = "soft_l1") -> list[Extrapolation]:
    """For each algorithm measured at 2+ worlds: fit on all but the largest world, predict it."""
    return _extrapolations(_points_of_runs(run_dir, statistic, holdout_every=0)[1].points, statistic, loss)


@dataclass(frozen=True)
class Calibration:
    """What ``critpath model --calibrate`` fits from its runs, read once."""
    fits: list[Fit]
    extrapolated: list[Extrapolation]
    withheld: dict  # (algo, world) -> contended records left out of every fit

    @property
    def withheld_text(self) -> str:
        return withheld_text(self.withheld)


def calibrate(run_dir, statistic: str = "p50", loss: str = "soft_l1", holdout_every: int = 3) -> Calibration:
    """``fit_run`` and ``extrapolations`` of the run(s), and the contended records both withheld."""
    dirs, found = _points_of_runs(run_dir, statistic, holdout_every)
    fits = _fits(dirs, found, statistic, loss)
    whole = [replace(pt, heldout=False) for pt in found.points]  # an extrapolation holds out a world, not sizes
    return Calibration(fits, _extrapolations(whole, statistic, loss), found.withheld)


def _extrapolations(points: Sequence[Point], statistic: str, loss: str) -> list[Extrapolation]:
    out = []
    for algo in sorted({pt.algo for pt in points}):
        worlds = sorted({pt.world for pt in points if pt.algo == algo})
        if len(worlds) < 2:
            continue
        train, test = worlds[:-1], worlds[-1]
        f = fit(points, algo, train, statistic, loss)
        target = [pt for pt in points if pt.algo == algo and pt.world == test]
        err = np.array([(float(f.predict_s(pt.world, pt.size_bytes)) - pt.measured_s) / pt.measured_s for pt in target])
        out.append(Extrapolation(algo, tuple(train), test, len(err), float(np.median(np.abs(err))),
                                 float(np.sqrt(np.mean(err ** 2)))))
    return out
