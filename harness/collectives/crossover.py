"""The ring/tree crossover of allreduce: the message size at which the faster of the two changes,
decided from independent runs, so neither noise between neighbouring sizes nor the quirks of one
process pool is read as a crossover.

The unit of evidence is the run. Every record of a run is timed on one pool of processes, so the
iterations of one record, or the records of one run, are not independent evidence of which
algorithm is faster: what decides varies between runs (between processes). The records of a run
give, per size both algorithms measured in it, one paired log ratio ``d = ln(ring) - ln(tree)``
(p50s; means for imported records, which have nothing else). Runs are pooled per machine, dtype,
world and backend, never across machines; a contended record (harness.core.contention) is withheld
and counted, and a copy of another run given (``store.run_copies``) counts once and is named. At a size measured in ``MIN_RUNS`` runs or more, a Student-t interval of the mean d
over runs says which algorithm, if either, is significantly faster; a crossover is where that
changes, and its interval comes from resampling whole runs (``RESAMPLES`` times, a fixed seed so a
report is the same every time it is built). The rule is ``RULE``, stated once here and quoted by
the report and the docs; ``ring_tree_finding`` is what the allreduce family concludes from it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

import numpy as np

from harness.core.family import Concluded
from harness.core.figures import is_mean_only
from harness.core.plotting import human_bytes
from harness.core.records import Record
from harness.core.store import run_copies

RESAMPLES = 1000
SEED = 20260117  # fixed: the same runs give the same interval in every report
LEVEL = 0.95  # two-sided, for the lead at a size and for the crossover's interval
# The fewest runs whose spread is taken as evidence: from two, a t interval has one degree of
# freedom (its 95 % factor is 12.7), and a bootstrap of two runs has three distinct resamples.
MIN_RUNS = 3
RING, TREE, NEITHER, NOT_ESTABLISHED = "ring", "tree", "neither", "not established"
ADD_RUNS = (f"measure the sweep in {MIN_RUNS} runs and report them together: critpath report "
            + " ".join(f"RUN{i + 1}" for i in range(MIN_RUNS)))

RULE = ("The unit of evidence is the run (one pool of processes): the iterations of one record share one "
        "process, so they are not independent evidence. Runs are pooled per machine (the host in the run's "
        "fingerprint), dtype, world and backend, never across machines. Each run gives, per size both "
        "algorithms measured in it, d = ln(ring p50) - ln(tree p50) of its records (means for imported "
        "records); records judged contended are withheld and counted, and never decide. At a size with d from "
        f"at least {MIN_RUNS} runs, ring is significantly faster when the two-sided {LEVEL:.0%} Student-t "
        "interval of the mean d over runs lies below 0, tree when it lies above; with fewer runs the lead is "
        "not established. A crossover is significant where the significantly faster algorithm changes between "
        "two measured sizes (sizes with no significant leader between them are skipped over); it is given as "
        "that bracket of measured sizes, the log-log interpolation of the mean d inside it, the number of runs, "
        f"and the {LEVEL:.0%} interval (percentiles) of that interpolation over {RESAMPLES} bootstrap resamples "
        "of whole runs (fixed seed). Nothing was measured inside the bracket: the interval is the "
        "interpolation's spread between runs, not where the curves cross between the sizes. Where no size has "
        f"{MIN_RUNS} runs the crossover is \"not established here\", and where the measured p50s cross is "
        "quoted as descriptive only; otherwise \"no significant crossover\".")


def log_ratio_crossings(sizes: Sequence[int], log_ratios: Sequence[float]) -> list[float]:
    """Sizes where ln(ring) - ln(tree) changes sign, interpolated on log-log axes between neighbours."""
    out = []
    for i in range(1, len(sizes)):
        d0, d1 = log_ratios[i - 1], log_ratios[i]
        if d0 == 0:
            out.append(float(sizes[i - 1]))
        elif d0 * d1 < 0:
            frac = d0 / (d0 - d1)
            out.append(float(math.exp(math.log(sizes[i - 1]) + frac * (math.log(sizes[i]) - math.log(sizes[i - 1])))))
    return out


def crossover_bytes(sizes: Sequence[int], ring_us: Sequence[float], tree_us: Sequence[float]) -> list[float]:
    """Sizes where ring and tree swap places, interpolated on log-log axes between neighbours."""
    return log_ratio_crossings(sizes, [math.log(r) - math.log(t) for r, t in zip(ring_us, tree_us)])


@dataclass(frozen=True, order=True)
class Group:
    """Runs whose ratios are replicates of one another: one machine, dtype, world and backend."""
    machine: str  # the run's host (fingerprint), or the run itself where no host is recorded
    dtype: str
    world: int
    backend: str


@dataclass(frozen=True)
class Change:
    """One significant change of the faster algorithm, between two measured sizes."""
    below_bytes: int  # the last size, going up, where the earlier leader is significantly faster
    above_bytes: int  # the first size where the other one is
    faster_below: str  # RING or TREE
    point_bytes: Optional[float]  # the mean d's interpolated crossing inside the bracket
    low_bytes: Optional[float]  # of the run resamples' crossings inside the bracket
    high_bytes: Optional[float]
    crossing_share: float  # of the resamples whose mean d crosses inside the bracket at all


@dataclass(frozen=True)
class Crossover:
    group: Group
    runs: tuple  # the run IDs that gave a ratio at some size
    sizes: tuple  # the sizes at which some run measured both algorithms, ascending
    runs_at: tuple  # per size: how many runs gave a ratio there
    mean_log_ratio: tuple  # per size: the mean d over those runs
    leads: tuple  # per size: RING, TREE, NEITHER or NOT_ESTABLISHED
    changes: tuple  # the significant crossovers (Change), ascending
    withheld: int = 0  # contended records left out
    imported: bool = False  # some ratio is of means (imported records have no samples)
    copies: tuple = ()  # labels of the runs given that were copies of another, counted once

    @property
    def significant(self) -> bool:
        return bool(self.changes)

    @property
    def established(self) -> bool:
        """Whether any size had enough runs to decide its lead."""
        return any(lead != NOT_ESTABLISHED for lead in self.leads)

    @property
    def point_bytes(self) -> tuple:
        """Where the mean d crosses 0 between measured sizes: descriptive, whatever the runs."""
        return tuple(log_ratio_crossings(self.sizes, self.mean_log_ratio))


def mean_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The two-sided Student-t interval of the mean of independent values (two or more)."""
    from scipy import stats  # a second of start-up: paid by a report, not by every command that registers allreduce

    n = values.size
    half = stats.t.ppf((1 + level) / 2, n - 1) * values.std(ddof=1) / math.sqrt(n)
    mean = float(values.mean())
    return mean - half, mean + half


def _lead(column: np.ndarray) -> str:
    ratios = column[~np.isnan(column)]
    if ratios.size < MIN_RUNS:
        return NOT_ESTABLISHED
    low, high = mean_interval(ratios)
    return RING if high < 0 else TREE if low > 0 else NEITHER


def _middle(found: Sequence[float]) -> Optional[float]:
    # Where noise makes the lead flip more than once inside a bracket, its middle crossing.
    return found[len(found) // 2] if found else None


def _column_means(ratios: np.ndarray) -> np.ndarray:
    """Per size, the mean over the runs that measured it; NaN where none did (a resample may miss them)."""
    measured = ~np.isnan(ratios)
    counts = measured.sum(axis=-2)
    sums = np.where(measured, ratios, 0.0).sum(axis=-2)
    return np.divide(sums, counts, out=np.full(sums.shape, np.nan), where=counts > 0)


def _change(sizes: tuple, means: np.ndarray, resampled: np.ndarray, i: int, j: int, faster_below: str) -> Change:
    span = slice(i, j + 1)
    inside = []
    for row in resampled[:, span]:
        kept = ~np.isnan(row)
        found = _middle(log_ratio_crossings(np.asarray(sizes[span])[kept], row[kept]))
        if found is not None:
            inside.append(found)
    low = high = None
    if inside:
        low, high = (float(2 ** q) for q in np.quantile(np.log2(inside), [(1 - LEVEL) / 2, (1 + LEVEL) / 2]))
    return Change(sizes[i], sizes[j], faster_below, _middle(log_ratio_crossings(sizes[span], means[span])),
                  low, high, len(inside) / len(resampled))


def crossover_of_runs(group: Group, run_ids: Sequence[str], sizes: Sequence[int], log_ratios: np.ndarray,
                      withheld: int = 0, imported: bool = False, resamples: int = RESAMPLES,
                      seed: int = SEED) -> Crossover:
    """The crossovers per ``RULE`` from ``log_ratios``: one row per run, one column per size, d of
    that run at that size, NaN where the run did not measure both algorithms."""
    sizes = tuple(sizes)
    ratios = np.asarray(log_ratios, dtype=np.float64).reshape(len(run_ids), len(sizes))
    means = _column_means(ratios)
    leads = tuple(_lead(ratios[:, k]) for k in range(len(sizes)))
    led = [k for k, lead in enumerate(leads) if lead in (RING, TREE)]
    brackets = [(i, j) for i, j in zip(led, led[1:]) if leads[i] != leads[j]]
    changes: tuple = ()
    if brackets:  # a lead needs MIN_RUNS runs, so there are runs to resample
        picks = np.random.default_rng(seed).integers(0, len(run_ids), size=(resamples, len(run_ids)))
        resampled = _column_means(ratios[picks])
        changes = tuple(_change(sizes, means, resampled, i, j, leads[i]) for i, j in brackets)
    runs_at = tuple(int(n) for n in (~np.isnan(ratios)).sum(axis=0))
    return Crossover(group, tuple(run_ids), sizes, runs_at, tuple(float(m) for m in means), leads, changes,
                     withheld, imported)


def allreduce_series(records: Sequence[Record]) -> dict[tuple, list[Record]]:
    """Passing records by (algo, dtype, world, backend), each sorted by size."""
    series: dict[tuple, list[Record]] = {}
    for r in records:
        if r.ok:
            series.setdefault((r.params["algo"], r.params.get("dtype", ""), r.world, r.backend), []).append(r)
    return {k: sorted(v, key=lambda r: r.params["size_bytes"]) for k, v in sorted(series.items())}


def machine_of(run: Any) -> str:
    """The machine a run measured: the host in its fingerprint. A run that records none is a
    machine of its own, so that runs of unknown machines are never pooled."""
    return (getattr(run, "fingerprint", None) or {}).get("host") or f"unknown host (run {run.label})"


def _log_latency(record: Record) -> float:
    # p50 from raw samples; an imported record has only its mean.
    return math.log(record.summary.mean_ns if is_mean_only(record) else record.summary.p50_ns)


@dataclass
class _Pool:
    """What the runs of one group gave while they are read: d per run and size, and what was left out."""
    ratios: dict  # run ID -> {size: d}
    withheld: int = 0
    imported: bool = False
    copies: list = field(default_factory=list)  # labels of the runs counted once as copies of another


def _pooled(record: Record) -> bool:
    """Whether ``record`` is one a pool reads: a passing ring or tree record with its summary."""
    return record.ok and record.params.get("algo") in (RING, TREE) and record.summary is not None


def _group(run: Any, record: Record) -> Group:
    return Group(machine_of(run), record.params.get("dtype", ""), record.world, record.backend)


def _groups(run: Any) -> list[Group]:
    """The groups whose pools ``run``'s records would go to."""
    return list(dict.fromkeys(_group(run, r) for r in run.records if _pooled(r)))


def _add_run(pools: dict, run: Any) -> None:
    """One run's paired ratios into its groups' pools. A size measured more than once in the run
    gives one d, from the mean log latency of each algorithm: the records share its processes."""
    logs: dict[tuple, list[float]] = {}
    for r in run.records:
        if not _pooled(r):
            continue
        group = _group(run, r)
        pool = pools.setdefault(group, _Pool({}))
        if r.contention_verdict.contended:
            pool.withheld += 1
            continue
        pool.imported |= is_mean_only(r)
        logs.setdefault((group, r.params["size_bytes"], r.params["algo"]), []).append(_log_latency(r))
    for (group, size, algo), ring in logs.items():
        tree = logs.get((group, size, TREE))
        if algo == RING and tree:
            pools[group].ratios.setdefault(run.run_id, {})[size] = float(np.mean(ring) - np.mean(tree))


def ring_tree_crossovers(runs: Sequence[Any]) -> list[Crossover]:
    """One Crossover per group (machine, dtype, world, backend) whose runs measured both ring and
    tree at two sizes or more, or that had records withheld. A copy of another of ``runs`` (its run
    ID, or its measurements under another run ID: ``store.run_copies``) counts once, and is named
    in its groups' ``copies``: pooled as a second run it would be a replicate that agrees by
    construction. (The commands refuse a copy before this: ``store.distinct_run_ids``.)"""
    pools: dict[Group, _Pool] = {}
    copies = {id(copy): copy for copy, _original, _how in run_copies(runs)}
    for run in runs:
        if id(run) in copies:
            for group in _groups(run):
                pools.setdefault(group, _Pool({})).copies.append(run.label)
        else:
            _add_run(pools, run)
    out = []
    for group, pool in sorted(pools.items(), key=lambda gp: gp[0]):
        sizes = sorted({s for per_size in pool.ratios.values() for s in per_size})
        if len(sizes) < 2 and not pool.withheld and not pool.copies:
            continue
        run_ids = sorted(pool.ratios)
        ratios = np.array([[pool.ratios[run].get(s, np.nan) for s in sizes] for run in run_ids]).reshape(
            len(run_ids), len(sizes))
        out.append(replace(crossover_of_runs(group, run_ids, sizes, ratios, pool.withheld, pool.imported),
                           copies=tuple(pool.copies)))
    return out


def _count(n: int, what: str) -> str:
    return f"{'one' if n == 1 else n} {what}{'' if n == 1 else 's'}"


def _measured(c: Crossover) -> str:
    how = (["means, for imported records"] if c.imported else []) + \
        (["their ratio's geometric mean over runs"] if len(c.runs) > 1 else [])
    return "the measured p50s" + (f" ({'; '.join(how)})" if how else "")


def _left_out_text(c: Crossover) -> str:
    """What the pool left out: contended records withheld, and copies of a run counted once."""
    copies = (f"; {'one run' if len(c.copies) == 1 else f'{len(c.copies)} runs'} given that "
              f"{'is a copy' if len(c.copies) == 1 else 'are copies'} of another counted once "
              f"({', '.join(c.copies)})") if c.copies else ""
    return (f"; {_count(c.withheld, 'contended record')} withheld" if c.withheld else "") + copies


def why_not_established(c: Crossover) -> str:
    """Why no size had enough runs to decide, in a short phrase."""
    if not c.runs:
        return "every record withheld as contended" if c.withheld else "every run given a copy of another"
    if len(c.runs) == 1:
        return "one run: one record per size, whose iterations share one process"
    return f"{_count(len(c.runs), 'run')}, fewer than {MIN_RUNS} at every size both algorithms measured"


def _what_to_add(c: Crossover) -> str:
    # Runs given but withheld as contended need a quieter machine, not more of the same runs.
    if c.withheld:
        return (f"measure the sweep again on a quiet machine (contended records never decide) and report "
                f"{MIN_RUNS} or more runs together")
    return ADD_RUNS


def _descriptive(c: Crossover) -> str:
    crossings = ", ".join(f"~{human_bytes(x)}" for x in c.point_bytes)
    where = f"cross at {crossings}" if crossings else "do not cross in the measured sizes"
    return f"descriptive only: {_measured(c)} {where}"


def _change_text(ch: Change) -> str:
    share = "" if ch.crossing_share == 1 else f" (of the {ch.crossing_share:.0%} of resamples that cross inside)"
    return (f"between {human_bytes(ch.below_bytes)} and {human_bytes(ch.above_bytes)} ({ch.faster_below} faster "
            f"below): interpolated ~{_bytes_or_dash(ch.point_bytes)}, {LEVEL:.0%} interval "
            f"{_bytes_or_dash(ch.low_bytes)} - {_bytes_or_dash(ch.high_bytes)}{share}")


def _cell(c: Crossover) -> str:
    if c.significant:
        return "; ".join(_change_text(ch) for ch in c.changes) + f"; from {_count(len(c.runs), 'run')}" + \
            _left_out_text(c)
    if not c.established:
        descriptive = f"; {_descriptive(c)}" if c.runs else ""
        return f"not established here ({why_not_established(c)}); {_what_to_add(c)}{descriptive}{_left_out_text(c)}"
    crossings = ", ".join(f"~{human_bytes(x)}" for x in c.point_bytes)
    counts = ", ".join(f"{name} at {n}" for name in (RING, TREE, NEITHER, NOT_ESTABLISHED)
                       if (n := c.leads.count(name)))
    return (f"no significant crossover ({_count(len(c.runs), 'run')}; "
            + (f"{_measured(c)} cross at {crossings}; " if crossings else "")
            + f"which is significantly faster, of {len(c.sizes)} sizes: {counts}){_left_out_text(c)}")


def _bytes_or_dash(x) -> str:
    return "-" if x is None else human_bytes(x)


def ring_tree_finding(runs: Sequence[Any]) -> Concluded:
    """The ring/tree crossovers of the runs pooled per ``RULE`` (``ring_tree_crossovers``), one table
    row per machine, dtype, world and backend, under the rule they follow."""
    found = ring_tree_crossovers(runs)
    if not found:
        return Concluded("Ring/tree crossover: not measured (no run has both ring and tree at two sizes or more).")
    rows = [[c.group.backend, c.group.dtype, str(c.group.world), c.group.machine, str(len(c.runs)), _cell(c)]
            for c in found]
    return Concluded("Ring/tree crossover: the size at which the faster of ring and tree (p50 latency, log-log "
                     "interpolation between measured sizes) changes. " + RULE,
                     ["backend", "dtype", "world", "machine", "runs", "crossover"], rows)
