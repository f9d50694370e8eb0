"""The between-gate component: an offset fixed for the length of one gate, estimated from stored
A/A gates (base and candidate one commit) and added to the gate's interval.

Pairs inside one gate cancel what drifts between its generations, but not what stays fixed for
the whole gate: on this project's two-core runner the allreduce A/A estimates spread more than
their own intervals allow (docs/gate.md). A gate whose interval has no term for that level
calls its own offset a change. Each stored A/A gate gives one estimate per case and its
within-gate standard error; Cochran's Q asks whether they spread more than those errors allow,
and the DerSimonian-Laird moment estimate gives the between-gate SD. The estimate is used as it
is, zero included: zero is what the stored gates measure when they spread no more than their
errors, and the Q test's p says how sure that is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import scipy  # scipy.stats loads on first use

from harness.core.store import ResultsFileError, read_json
from harness.core.walk import WalkError, walk_bounded
from harness.gate.outputs import output_paths
from harness.gate.recheck import whole_gate
from harness.gate.schedule import SIDES
from harness.gate.sequential import estimate_se, hodges_lehmann, noise_per_pair
from harness.gate.stats import Verdict

# Fewer A/A gates than this give a Q test with almost no power and a between-gate SD that is
# mostly noise: such a case gets no term, and the gate says it was not estimated.
MIN_GATES = 3
# At most this many stored gates are read: a canary directory kept for years stays bounded.
MAX_GATES = 1000
# A gate.json lies at most this many levels below a directory given (a level or two for grouping,
# as aa/2026-12/g3), and the walk lists at most this many directories: each gate holds its two
# sides and their repeats, which the walk passes through on its way.
GATE_DEPTH = 3
MAX_WALKED_DIRS = 64 * MAX_GATES


@dataclass(frozen=True)
class Heterogeneity:
    """Cochran's Q of per-gate estimates against their standard errors, and the DerSimonian-Laird
    between-gate SD, all on the log scale."""

    gates: int
    q: float
    p: float
    between_sd_log: float
    within_se_median: float
    spread: tuple[float, float]  # lowest and highest estimate

    def to_dict(self) -> dict:
        return {"gates": self.gates, "q": self.q, "p": self.p, "between_sd_log": self.between_sd_log,
                "within_se_median": self.within_se_median, "spread": list(self.spread)}


def heterogeneity(estimates_log: Sequence[float], se_log: Sequence[float]) -> Heterogeneity:
    """Q, its chi-square p on k - 1 degrees of freedom, and tau (DerSimonian-Laird), from k >= 2
    estimates with positive standard errors."""
    x, se = np.asarray(estimates_log, dtype=float), np.asarray(se_log, dtype=float)
    if x.size < 2 or x.size != se.size or not np.all(se > 0):
        raise ValueError(f"need at least 2 estimates with positive standard errors, got {x.size}")
    w = 1.0 / np.square(se)
    centre = float(np.sum(w * x) / np.sum(w))
    q = float(np.sum(w * np.square(x - centre)))
    df = x.size - 1
    tau2 = max(0.0, (q - df) / float(np.sum(w) - np.sum(np.square(w)) / np.sum(w)))
    return Heterogeneity(int(x.size), q, float(scipy.stats.chi2.sf(q, df)), math.sqrt(tau2), float(np.median(se)),
                         (float(np.min(x)), float(np.max(x))))


def log_pct(log_ratio: float) -> str:
    """A log ratio as the signed percentage change it stands for."""
    return f"{math.expm1(log_ratio) * 100:+.1f} %"


def pooled(estimates_log: Sequence[float], se_log: Sequence[float]) -> tuple[float, float, float]:
    """The random-effects mean of k >= 2 gates' estimates (each weighted by 1 / (SE^2 + tau^2)),
    its standard error and tau: the centre the gates share, with what stays fixed per gate in its
    uncertainty."""
    tau = heterogeneity(estimates_log, se_log).between_sd_log
    weights = 1.0 / (np.square(np.asarray(se_log, dtype=float)) + tau ** 2)
    centre = float(np.sum(weights * np.asarray(estimates_log, dtype=float)) / np.sum(weights))
    return centre, math.sqrt(1.0 / float(np.sum(weights))), tau


def gate_dirs(roots: Sequence[Path]) -> list[Path]:
    """Every gate directory at or within GATE_DEPTH levels under ``roots`` (one holding gate.json
    beside base/ and candidate/), sorted, at most MAX_GATES."""
    found = set()
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            raise ResultsFileError(f"{root}: not a directory of stored gates")
        try:
            for d, names in walk_bounded(root, "--between-gates", GATE_DEPTH, MAX_WALKED_DIRS, prune=True):
                json_name = output_paths(d)["json"].name
                parts = [json_name in names, *((d / side).is_dir() for side in SIDES)]
                if all(parts):
                    found.add(d.resolve())
                elif any(parts) or (d / json_name).exists():
                    # a killed gate (its sides, no gate.json) left out would leave its place unsaid
                    missing = [name for name, there in zip((json_name, *(f"{s}/" for s in SIDES)), parts) if not there]
                    raise ResultsFileError(f"{d}: not a whole gate ({', '.join(missing)} missing or not what a gate "
                                           "writes): a gate killed or edited; remove it from the stored gates")
                if len(found) > MAX_GATES:
                    raise ResultsFileError(f"{root}: more than {MAX_GATES} stored gates; give fewer directories")
        except WalkError as exc:
            raise ResultsFileError(str(exc)) from None
    return sorted(found)


def _refuse_unless_a_a(gate_dir: Path) -> str:
    """The gate's ID; ResultsFileError unless it has one and measured one clean commit on both sides."""
    path = output_paths(gate_dir)["json"]
    said = read_json(path)
    sides = [said.get(label) if isinstance(said, dict) else None for label in SIDES]
    commits = [s.get("commit") if isinstance(s, dict) else None for s in sides]
    if not all(isinstance(c, str) and c for c in commits):
        raise ResultsFileError(f"{path}: field base.commit / candidate.commit: not recorded; an A/A gate's "
                               "sides must name their commits")
    if commits[0] != commits[1] or any(isinstance(s, dict) and s.get("dirty") for s in sides):
        raise ResultsFileError(f"{path}: not an A/A gate (base {commits[0][:12]}, candidate {commits[1][:12]}"
                               f"{', a dirty side' if any(s.get('dirty') for s in sides) else ''}): only gates of "
                               "one commit against itself measure the between-gate offset")
    extra = said.get("extra")
    gate_id = extra.get("gate_id") if isinstance(extra, dict) else None
    if not (isinstance(gate_id, str) and gate_id):
        raise ResultsFileError(f"{path}: field extra.gate_id: not recorded; a stored gate names itself, so that a "
                               "copy is not counted twice and gates are ordered by their start")
    return gate_id


@dataclass(frozen=True)
class GateEstimate:
    """One case's estimate in one stored A/A gate, on the log scale."""

    gate_dir: Path
    gate_id: str  # extra.gate_id: its start time first, so the IDs sort by time
    estimate_log: float
    se_log: float


def per_gate(roots: Sequence[Path], statistic: str) -> tuple[dict[str, list[GateEstimate]], list[Path]]:
    """Per case, its estimate in every stored A/A gate under ``roots`` that measured it, each gate
    read back whole (``recheck.whole_gate``): a gate that did not finish, or whose directories
    were edited, is refused naming what disagrees. Also the gate directories read."""
    dirs = gate_dirs(roots)
    if not dirs:
        raise ResultsFileError(f"{', '.join(map(str, roots))}: no stored gate (a directory with gate.json, "
                               f"{SIDES[0]}/ and {SIDES[1]}/)")
    per_case: dict[str, list[GateEstimate]] = {}
    seen: dict[str, Path] = {}
    for d in dirs:  # every gate named before any is read: a refusal costs no reading
        gate_id = _refuse_unless_a_a(d)
        if gate_id in seen:  # a copy would count one gate's estimate as two agreeing gates
            raise ResultsFileError(f"{d}: the same gate as {seen[gate_id]} (extra.gate_id {gate_id}); "
                                   "a copy counts one gate twice: keep one")
        seen[gate_id] = d
    for gate_id, d in seen.items():
        tracks, _rounds = whole_gate(d / SIDES[0], d / SIDES[1], statistic)
        for case_id, track in tracks.items():
            sd = noise_per_pair(track.pairs) if not track.problem else math.nan
            if sd > 0 and len(track.pairs) >= 2:
                per_case.setdefault(case_id, []).append(
                    GateEstimate(d, gate_id, hodges_lehmann(track.pairs), estimate_se(sd, len(track.pairs))))
    return per_case, dirs


def from_aa_gates(roots: Sequence[Path], statistic: str) -> tuple[dict[str, Heterogeneity], list[Path]]:
    """Per case, the heterogeneity of the stored A/A gates under ``roots`` (``per_gate``), and the
    gate directories read. Cases in fewer than MIN_GATES gates are left out."""
    per_case, dirs = per_gate(roots, statistic)
    return ({case_id: heterogeneity([g.estimate_log for g in found], [g.se_log for g in found])
             for case_id, found in sorted(per_case.items()) if len(found) >= MIN_GATES}, dirs)


def sd_of(found: Mapping[str, Heterogeneity], case_id: str) -> float:
    """The between-gate SD a case is gated with: the stored A/A gates' estimate, 0 without one."""
    return found[case_id].between_sd_log if case_id in found else 0.0


def lines(found: Mapping[str, Heterogeneity], case_ids: Sequence[str]) -> list[str]:
    """What the gate says of the term, per case, when stored gates were given."""
    out = []
    for case_id in case_ids:
        h = found.get(case_id)
        if h is None:
            out.append(f"{case_id}: no between-gate term: fewer than {MIN_GATES} stored A/A gates of it")
        else:
            out.append(f"{case_id}: between-gate SD {math.expm1(h.between_sd_log) * 100:.1f} % from {h.gates} stored "
                       f"A/A gates (Cochran's Q {h.q:.1f}, p = {h.p:.3f}), in its interval and test")
    return out


def to_dict(found: Mapping[str, Heterogeneity], case_ids: Sequence[str]) -> dict:
    """gate.json's record of the term: per case the heterogeneity it came from (or null)."""
    return {case_id: found[case_id].to_dict() if case_id in found else None for case_id in case_ids}


def stored(side: Path) -> dict[str, float]:
    """The between-gate SD per case that the gate whose side ``side`` is used, from its gate.json
    (read whole already by ``recheck.whole_gate``); {} for a gate that used none. A case's entry
    is null (no term) or its heterogeneity; anything else is refused naming the field, since a
    term read as absent would test the recheck narrower than the gate did."""
    path = output_paths(Path(side).absolute().parent)["json"]
    said = read_json(path)
    extra = said.get("extra") if isinstance(said, dict) else None
    term = extra.get("between_gate") if isinstance(extra, dict) else None
    if term is None:
        return {}
    if not isinstance(term, dict):
        raise ResultsFileError(f"{path}: field extra.between_gate: expected a mapping of case IDs, got "
                               f"{type(term).__name__}")
    out = {}
    for case_id, h in term.items():
        if h is None:
            continue
        field = f"extra.between_gate.{case_id}.between_sd_log"
        sd = h.get("between_sd_log") if isinstance(h, dict) else None
        if not isinstance(sd, (int, float)) or isinstance(sd, bool):
            raise ResultsFileError(f"{path}: field {field}: expected a number, got {sd!r}")
        if not 0.0 <= sd < 1.0:
            raise ResultsFileError(f"{path}: field {field}: {sd!r} is not in [0, 1)")
        out[case_id] = float(sd)
    return out


def refuse_unless_term_agrees(side: Path, statistic: str, rechecked: Mapping[str, Verdict]) -> None:
    """ResultsFileError unless each case's z tested again with the term ``stored`` read is the z
    the gate recorded, where the two tests are of one statistic and direction: the term is only
    the gate's if it gives the gate's own test back. A term written into gate.json afterwards (or
    one taken out) turned a regressed gate's recheck into a pass, while the gate's z, beyond its
    boundary, had no term in it."""
    path = output_paths(Path(side).absolute().parent)["json"]
    said = read_json(path)
    cases = said.get("cases") if isinstance(said, dict) and said.get("statistic") == statistic else None
    for index, case in enumerate(cases if isinstance(cases, list) else []):
        detail = case.get("detail") if isinstance(case, dict) else None
        recorded = detail.get("z") if isinstance(detail, dict) else None
        verdict = rechecked.get(case.get("case_id")) if isinstance(case, dict) else None
        again = (verdict.detail.get("z") if verdict is not None and isinstance(verdict.detail, dict)
                 and verdict.direction == case.get("direction") else None)
        if not all(isinstance(z, float) and math.isfinite(z) for z in (recorded, again)):
            continue  # a case without a test on either side (could not run) has no z to hold
        if not math.isclose(recorded, again, rel_tol=1e-9, abs_tol=1e-12):
            raise ResultsFileError(f"{path}: field extra.between_gate: not the term the gate tested with: case "
                                   f"{case['case_id']} (cases.{index}) recorded z {recorded:.6g}, its pairs with "
                                   f"this term give {again:.6g}")
