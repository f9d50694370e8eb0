"""What a set of run directories says about each node: the figures of every record, attached to
the nodes it measured, the pairs of ``tier=pairs`` records, and the failures.

Which node a record belongs to comes from its run's fingerprint: the layout's node keys
(``harness.run.fingerprint.node_key``: host, and the launcher's node rank when there is one), or for
an nccl-tests import the hosts of its devices. A record of a run on several nodes belongs to all
of them (a pair of nodes for a two-node run), except a ``tier=pairs`` record, whose pairs each
name their own two nodes. A run that names no node, or two runs that give one node two values of
one figure, are refused (``DiagnoseInputError``): which one is meant is not guessed.

A valid record whose timed loop was contended (``Record.contention_verdict``: other processes took
its CPUs) is withheld (``Withheld``): its figures say what a neighbour did to the node, not what the
node's hardware does, so they neither flag its nodes nor enter a median the other nodes are judged
against. A record the rule cannot decide (None: no evidence, an import) is kept, as before the rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from harness.collectives import pairs
from harness.core import registry
from harness.core.declarations import better
from harness.core.figures import FigureUnavailable, is_mean_only, sample_value, supports
from harness.core.records import Record
from harness.core.store import LoadedRun, ResultsFileError, distinct_run_ids, distinct_runs, load_run
from harness.diagnose.rules import Rule

# The sample statistics every record offers a rule beside its declared figures; a percentile only
# where the samples support it (harness.core.figures.supports: p99 from 100, p999 from 1,000).
SAMPLE_STATISTICS = ("mean_us", "min_us", "max_us", "p10_us", "p50_us", "p90_us", "p99_us", "p999_us")


class DiagnoseInputError(ValueError):
    """Input that cannot be diagnosed as given (exit 2); the message says what to add or remove."""


@dataclass(frozen=True)
class Figures:
    """One subject's figures of one case: a node (or the nodes of a run), or one pair of nodes."""

    kind: str  # run: every node of the run; pair: one measured pair of a tier=pairs record
    subject: tuple[str, ...]  # node keys
    case_id: str
    family: str
    values: dict  # FIGURE -> value
    source: str  # where: run directory (and the pair)
    group: str = ""  # pairs of one record share it: they are compared with each other
    rail: Optional[int] = None


@dataclass(frozen=True)
class Failure:
    subject: tuple[str, ...]
    case_id: str  # "(run)" for a run cut short
    why: str
    source: str


@dataclass(frozen=True)
class Withheld:
    """A valid record left out of the diagnosis because its timed loop was contended."""

    subject: tuple[str, ...]  # the nodes it measured
    case_id: str
    figures: tuple[str, ...]  # the FAMILY/FIGURE names it would have offered a rule
    evidence: str  # the contention verdict's
    source: str  # run directory

    def matches(self, rule: Rule) -> bool:
        """Whether ``rule`` would have read a figure of it."""
        return any(rule.matches(name) for name in self.figures)


@dataclass
class Fleet:
    nodes: dict = field(default_factory=dict)  # node key -> host
    figures: list = field(default_factory=list)  # Figures
    failures: list = field(default_factory=list)  # Failure
    withheld: list = field(default_factory=list)  # Withheld: contended records, judged by no rule


def withheld_of(withheld: Sequence[Withheld], node: str) -> list[Withheld]:
    """The withheld records that measured ``node``."""
    return [w for w in withheld if node in w.subject]


def run_nodes(run: LoadedRun) -> tuple[list[str], dict[str, str]]:
    """The node keys of a run, in layout order, and each one's host. The fingerprint's types were
    checked where the run was loaded (harness.core.fingerprintfile)."""
    fp = run.fingerprint
    layout = fp.get("layout") or {}
    if layout.get("node_keys"):
        keys = list(layout["node_keys"])
        hosts = layout.get("hosts") or keys
        # A node left out of the mapping would never be judged: each key names one node, with its host.
        if len(set(keys)) != len(keys):
            raise DiagnoseInputError(f"{run.path}: fingerprint.json field layout.node_keys: a node key given "
                                     f"twice in {keys}")
        if len(hosts) != len(keys):
            raise DiagnoseInputError(f"{run.path}: fingerprint.json field layout.hosts: {len(hosts)} hosts for "
                                     f"the {len(keys)} nodes of layout.node_keys")
        return keys, dict(zip(keys, hosts, strict=True))
    devices = (fp.get("gpus") or {}).get("devices") or []
    hosts = sorted({d["host"] for d in devices if d.get("host")})
    if not hosts and fp.get("host"):
        hosts = [h for h in fp["host"].split(",") if h]
    if not hosts:
        raise DiagnoseInputError(f"{run.path}: fingerprint.json names no node (no layout.node_keys, no host): "
                                 "diagnose needs to know which node each run measured; add a fingerprint with "
                                 "its host, or use runs written by critpath run or import-nccl-tests")
    return hosts, {h: h for h in hosts}


def _is_pairs(record: Record) -> bool:
    return record.params.get("tier") == "pairs" and registry.get(record.family).pair_metrics is not None


def sample_figures(samples_ns: Sequence[int], mean_only: bool = False) -> dict[str, float]:
    """The sample statistics of SAMPLE_STATISTICS that samples support (a mean-only import: its mean)."""
    return {name: sample_value(samples_ns, name) for name in SAMPLE_STATISTICS
            if supports(name, len(samples_ns)) and (not mean_only or name == "mean_us")}


def record_figures(record: Record) -> dict[str, float]:
    """A record's declared figures and the sample statistics its samples support (a declared
    percentile too, rtt_p999_us, only where the record's samples support it). A figure that could not
    be recomputed when the record was read (``Record.unverifiable``) is no evidence of a node's health."""
    n = len(record.samples_ns)
    out = {name: float(v) for name, v in record.metrics.items()
           if (not n or supports(name, n)) and name not in record.unverifiable}
    if record.samples_ns:
        out.update(sample_figures(record.samples_ns, is_mean_only(record)))
    return out


def _failure_of(record: Record, run: LoadedRun, keys: list[str]) -> Failure:
    subject = tuple(keys)
    layout = run.fingerprint.get("layout") or {}
    rank = record.error.rank if record.error else None
    node_of_rank = layout.get("node_of_rank")
    if rank is not None and node_of_rank and 0 <= rank < len(node_of_rank) and node_of_rank[rank] < len(keys):
        subject = (keys[node_of_rank[rank]],)  # the failing rank's node alone
    if record.error is not None:
        first = record.error.message.splitlines()[0] if record.error.message else ""
        why = f"{record.status}: {record.error.kind}: {first}".rstrip(": ")
    else:
        check = record.check
        why = f"{record.status}: {check.wrong} of {check.checked} wrong" if check else record.status
    if rank is not None:
        why += f" (rank {rank})"
    return Failure(subject, record.case_id, why, str(run.path))


def _figures_of(record: Record, run: LoadedRun, keys: list[str]) -> list[Figures]:
    """The figures of one valid record: one set for its run's nodes, or one per measured pair."""
    if not _is_pairs(record):
        return [Figures("run", tuple(keys), record.case_id, record.family, record_figures(record), str(run.path))]
    family = registry.get(record.family)
    case = registry.parse(record.case_id)
    group = f"{run.path}::{record.case_id}"
    out = []
    for m in pairs.measurements(record.extra.get("rank_reports") or []):
        values = {**dict(family.pair_metrics(case, m)), **sample_figures(m.samples_ns)}
        out.append(Figures("pair", m.nodes, record.case_id, record.family, values, f"{run.path}: {m.label}", group,
                           m.rail))
    return out


def _withheld(record: Record, figures: list[Figures], run: LoadedRun) -> Withheld:
    subject = tuple(dict.fromkeys(n for f in figures for n in f.subject))
    names = tuple(sorted({f"{f.family}/{name}" for f in figures for name in f.values}))
    return Withheld(subject, record.case_id, names, record.contention_verdict.evidence, str(run.path))


def add_run(fleet: Fleet, run: LoadedRun) -> None:
    keys, hosts = run_nodes(run)
    fleet.nodes.update(hosts)
    cut_short = run.incomplete
    if cut_short:
        fleet.failures.append(Failure(tuple(keys), "(run)", cut_short, str(run.path)))
    for record in run.records:
        if not record.ok:
            fleet.failures.append(_failure_of(record, run, keys))
            continue
        figures = _figures_of(record, run, keys)
        for f in figures:
            for key in f.subject:
                fleet.nodes.setdefault(key, key)
        # True only: an undecided record (no evidence, an import) is used as it always was
        if record.contention_verdict.contended is True:
            fleet.withheld.append(_withheld(record, figures, run))
        else:
            fleet.figures += figures


def read_fleet(paths: Sequence[Path]) -> Fleet:
    """Every run directory of ``paths``; DiagnoseInputError for one that cannot be read or placed."""
    fleet = Fleet()
    try:
        runs = [load_run(path) for path in distinct_runs(paths)]
        distinct_run_ids(runs)
    except ResultsFileError as exc:
        raise DiagnoseInputError(str(exc)) from None
    for path, run in zip(paths, runs):
        if not run.records and not run.meta:
            raise DiagnoseInputError(f"{path}: no records and no run.json: not a run directory")
        add_run(fleet, run)
    _refuse_duplicates(fleet)
    return fleet


def _refuse_duplicates(fleet: Fleet) -> None:
    seen: dict[tuple, str] = {}
    for f in fleet.figures:
        if f.kind != "run":
            continue
        key = (f.subject, f.case_id)
        if key in seen and seen[key] != f.source:
            raise DiagnoseInputError(f"{' + '.join(f.subject)}: {f.case_id} is in both {seen[key]} and {f.source}; "
                                     "which one stands for the node is not guessed: pass one of them")
        seen[key] = f.source


def figure_better(family: str, name: str) -> Optional[str]:
    """lower / higher for a figure a rule may compare, None for context (a count, a setting)."""
    try:
        return better(family, name)
    except FigureUnavailable:
        return None

