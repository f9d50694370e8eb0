"""Rules applied to a fleet: findings, a verdict per node, and the slow links.

A relative rule compares each subject's figure with the median of the same figure of the same
case over the fleet. Records of runs compare run with run (each run's nodes are its subject). The
pairs of a ``tier=pairs`` record are localised in two steps, per rule and figure:

1. each node (each rail of it) is judged by its best pair, the fastest of its partners: a node
   slow with all of its partners is slow at its best, and is named as the node;
2. the pairs of nodes not named in step 1 are judged one by one against their own median: a pair
   slow while both of its nodes are fast with their other partners is named as the link, and
   neither node is drained for it.

So one slow node does not drag the median it is compared with (it is one of N nodes, not half of
the pairs), and a slow link does not get two good nodes drained.

Contended records are withheld by ``harness.diagnose.observe`` before any rule sees them. A node
whose only records a rule would read were withheld is not called healthy: it has no evidence for
that rule, and the diagnosis says which records were contended and why.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from harness.diagnose.observe import Figures, Fleet, Withheld, figure_better, withheld_of
from harness.diagnose.rules import RELATIVE, Rule

HEALTHY, SUSPECT, FAILED = "healthy", "suspect", "failed"
# A node that no valid record measured and no failure names, or one that a rule could judge by
# contended records only: nothing says it is healthy.
NO_EVIDENCE = "no evidence"
# The rules that judge figures, which a contended record would have fed.
FIGURE_FUNCTIONS = (*RELATIVE, "value")


def contended_why(withheld: list[Withheld]) -> str:
    """How many records were withheld as contended, and the evidence of the first."""
    first = withheld[0]
    return f"{len(withheld)} record(s) contended ({first.case_id}: {first.evidence})"


@dataclass(frozen=True)
class Finding:
    rule: Rule
    scope: str  # node (the subject's nodes are implicated) or link (the pair, not its nodes)
    subject: tuple[str, ...]
    case_id: str
    figure: str = ""  # FAMILY/FIGURE; "" for a failure or a multi_rules finding
    value: Optional[float] = None
    median: Optional[float] = None  # the fleet median it was compared with (relative rules)
    judged: Optional[float] = None  # what the criteria judged: variance, ratio or the value
    detail: str = ""
    source: str = ""
    rail: Optional[int] = None

    def evidence(self) -> str:
        """One line: which figure, its value, the fleet median, the rule and where it was read."""
        head = f"{self.rule.name} ({self.rule.categories}, {self.rule.source})"
        where = f" [{self.source}]" if self.source else ""
        if self.value is None:
            return f"{head}: {self.case_id}: {self.detail}{where}"
        parts = [f"{self.figure} = {self.value:.4g}"]
        if self.median is not None:
            parts.append(f"fleet median {self.median:.4g}")
        if self.rule.function == "variance":
            parts.append(f"variance {self.judged:+.3f}")
        elif self.rule.function == "ratio":
            parts.append(f"ratio {self.judged:.3g}")
        parts.append(f"rule {self.rule.describe()}")
        detail = f" ({self.detail})" if self.detail else ""
        return f"{head}: {self.case_id}: {', '.join(parts)}{detail}{where}"


@dataclass(frozen=True)
class Item:
    """One subject's value of one figure, as a rule judges it."""

    subject: tuple[str, ...]
    value: float
    detail: str = ""
    source: str = ""
    rail: Optional[int] = None


class Notes:
    """What was read but not judged: each reason once, with the cases it applies to."""

    def __init__(self) -> None:
        self._cases: dict[str, list[str]] = {}

    def add(self, text: str, case_id: str = "") -> None:
        cases = self._cases.setdefault(text, [])
        if case_id and case_id not in cases:
            cases.append(case_id)

    def lines(self) -> list[str]:
        out = []
        for text, cases in self._cases.items():
            if len(cases) == 1:
                text += f" ({cases[0]})"
            elif cases:
                text += f" ({len(cases)} cases: {cases[0]} ...)"
            out.append(text)
        return out


@dataclass
class Diagnosis:
    nodes: dict  # node key -> host
    findings: list = field(default_factory=list)
    notes: Notes = field(default_factory=Notes)
    measured: frozenset = frozenset()  # the nodes some record or failure speaks of
    withheld: tuple = ()  # Withheld: the contended records no rule judged
    # node -> why a rule could not judge it: every record the rule would read was contended
    unjudged: dict = field(default_factory=dict)

    def acting(self) -> list[Finding]:
        """Findings that decide something (a stored rule only feeds multi_rules)."""
        return [f for f in self.findings if not f.rule.store]

    def node_findings(self, node: str) -> list[Finding]:
        return [f for f in self.acting() if f.scope == "node" and node in f.subject]

    def verdict(self, node: str) -> str:
        verdicts = {f.rule.verdict for f in self.node_findings(node)}
        if verdicts:
            return FAILED if FAILED in verdicts else SUSPECT
        return HEALTHY if node in self.measured and node not in self.unjudged else NO_EVIDENCE

    def withheld_of(self, node: str) -> list[Withheld]:
        return withheld_of(self.withheld, node)

    def no_evidence_why(self, node: str) -> str:
        """Why a node of verdict NO_EVIDENCE is not called healthy."""
        if node in self.measured:
            return "; ".join(self.unjudged[node])
        withheld = self.withheld_of(node)
        if withheld:
            return f"its only valid records were contended: {contended_why(withheld)}"
        return "no valid record measured it"

    def links(self) -> dict[tuple[str, ...], list[Finding]]:
        out: dict[tuple[str, ...], list[Finding]] = defaultdict(list)
        for f in self.acting():
            if f.scope == "link":
                out[f.subject].append(f)
        return dict(out)

    def to_drain(self) -> list[str]:
        return [n for n in self.nodes if self.verdict(n) in (FAILED, SUSPECT)]

    def unmeasured(self) -> list[str]:
        return [n for n in self.nodes if self.verdict(n) == NO_EVIDENCE]

    @property
    def exit_code(self) -> int:
        """1 something is flagged; 2 nothing is, but a node has no evidence; 0 every node healthy."""
        return 1 if self.acting() else 2 if self.unmeasured() else 0


def _judge(rule: Rule, items: list[Item], case_id: str, figure: str, scope: str, what: str,
           notes: Notes) -> list[Finding]:
    """The findings of ``rule`` among ``items`` (one figure of one case)."""
    median = None
    if rule.function in RELATIVE:
        if len(items) < rule.min_fleet:
            notes.add(f"{rule.name}: {figure}: {len(items)} {what} to compare, fewer than min_fleet {rule.min_fleet}; "
                      "not judged", case_id)
            return []
        median = float(np.median([item.value for item in items]))
        if median == 0:
            notes.add(f"{rule.name}: {figure}: the fleet median is 0; nothing to compare with", case_id)
            return []
    out = []
    for item in items:
        value = item.value
        judged = (value - median) / median if rule.function == "variance" else \
            value / median if rule.function == "ratio" else value
        if rule.criteria.holds(judged):
            out.append(Finding(rule, scope, item.subject, case_id, figure, value, median, judged, item.detail,
                               item.source, item.rail))
    return out


def _run_findings(rule: Rule, figures: list[Figures], notes: Notes) -> list[Finding]:
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for f in figures:
        for name, value in f.values.items():
            if rule.matches(f"{f.family}/{name}"):
                groups[(f.case_id, f"{f.family}/{name}")].append(Item(f.subject, value, source=f.source))
    out = []
    for (case_id, figure), items in sorted(groups.items()):
        out += _judge(rule, items, case_id, figure, "node", "runs", notes)
    return out


def _pair_findings(rule: Rule, figures: list[Figures], notes: Notes) -> list[Finding]:
    by_group: dict[str, list[Figures]] = defaultdict(list)
    for f in figures:
        by_group[f.group].append(f)
    out = []
    for group in by_group.values():
        names = sorted({n for f in group for n in f.values if rule.matches(f"{f.family}/{n}")})
        for name in names:
            out += _localise(rule, group, name, notes)
    return out


def _localise(rule: Rule, group: list[Figures], name: str, notes: Notes) -> list[Finding]:
    first = group[0]
    figure, case_id = f"{first.family}/{name}", first.case_id
    better = figure_better(first.family, name)
    if better is None:
        notes.add(f"{rule.name}: {figure} is context, not better or worse; pairs are not judged by it")
        return []
    pick = min if better == "lower" else max
    # Step 1: each node (rail) at its best partner.
    partners: dict[tuple[str, Optional[int]], list[Figures]] = defaultdict(list)
    for f in group:
        for node in f.subject:
            partners[(node, f.rail)].append(f)
    items = []
    for (node, rail), seen in sorted(partners.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        best = pick(seen, key=lambda f: f.values[name])
        others = sorted({n for f in seen for n in f.subject if n != node})
        where = f"rail {rail}: " if rail is not None else ""
        detail = (f"{where}best of {len(others)} partner(s) ({', '.join(others)}): {best.values[name]:.4g} with "
                  f"{next(n for n in best.subject if n != node)}")
        items.append(Item((node,), best.values[name], detail, best.source.split(": ")[0], rail))
    nodes_found = _judge(rule, items, case_id, figure, "node", "nodes", notes)
    named = {(f.subject[0], f.rail) for f in nodes_found}
    # Step 2: the pairs whose nodes were not named, each against the median of those pairs.
    rest = [f for f in group if not any((n, f.rail) in named for n in f.subject)]
    links = _judge(rule, [Item(f.subject, f.values[name], f"rail {f.rail}" if f.rail is not None else "", f.source,
                               f.rail) for f in rest], case_id, figure, "link", "pairs", notes)
    return nodes_found + links


def _failure_findings(rule: Rule, fleet: Fleet) -> list[Finding]:
    return [Finding(rule, "node", f.subject, f.case_id, detail=f.why, source=f.source)
            for f in fleet.failures if f.case_id == "(run)" or rule.matches(f.case_id)]


def _multi_findings(rule: Rule, findings: list[Finding]) -> list[Finding]:
    flagged: dict[tuple[str, tuple[str, ...]], set[str]] = defaultdict(set)
    for f in findings:
        if f.rule.name in rule.rules:
            flagged[(f.scope, f.subject)].add(f.rule.name)
    return [Finding(rule, scope, subject, "(rules)", detail=f"flagged by {len(names)} of {', '.join(rule.rules)}: "
                    f"{', '.join(sorted(names))}")
            for (scope, subject), names in sorted(flagged.items()) if len(names) >= rule.at_least]


def _in_enough_cases(rule: Rule, found: list[Finding], notes: Notes) -> list[Finding]:
    """The findings of subjects that ``rule.min_cases`` cases flagged, for one figure."""
    if rule.min_cases <= 1:
        return found
    cases: dict[tuple, set[str]] = defaultdict(set)
    for f in found:
        cases[(f.scope, f.subject, f.rail, f.figure)].add(f.case_id)
    kept = [f for f in found if len(cases[(f.scope, f.subject, f.rail, f.figure)]) >= rule.min_cases]
    for (scope, subject, rail, figure), ids in sorted(cases.items(), key=str):
        if len(ids) < rule.min_cases:
            notes.add(f"{rule.name}: {scope} {' <-> '.join(subject)}{'' if rail is None else f' rail {rail}'}: "
                         f"{figure} flagged in {len(ids)} case(s), fewer than min_cases {rule.min_cases}; not counted")
    return kept


def _unjudged(rules: list[Rule], fleet: Fleet) -> dict[str, list[str]]:
    """Node -> why, for each figure rule whose every record of the node was withheld as contended."""
    out: dict[str, list[str]] = defaultdict(list)
    for rule in rules:
        if rule.function not in FIGURE_FUNCTIONS:
            continue
        judged = {n for f in fleet.figures for n in f.subject
                  if any(rule.matches(f"{f.family}/{name}") for name in f.values)}
        for node in fleet.nodes:
            withheld = [w for w in withheld_of(fleet.withheld, node) if w.matches(rule)]
            if withheld and node not in judged:
                out[node].append(f"{rule.name}: only contended records to judge it by: {contended_why(withheld)}")
    return dict(out)


def diagnose(fleet: Fleet, rules: list[Rule]) -> Diagnosis:
    measured = {n for f in fleet.figures for n in f.subject} | {n for f in fleet.failures for n in f.subject}
    result = Diagnosis(dict(fleet.nodes), measured=frozenset(measured), withheld=tuple(fleet.withheld),
                       unjudged=_unjudged(rules, fleet))
    run_figures = [f for f in fleet.figures if f.kind == "run"]
    pair_figures = [f for f in fleet.figures if f.kind == "pair"]
    for rule in rules:
        if rule.function == "failure_check":
            found = _failure_findings(rule, fleet)
        elif rule.function == "multi_rules":
            found = _multi_findings(rule, result.findings)
        else:
            found = _in_enough_cases(rule, _run_findings(rule, run_figures, result.notes)
                                     + _pair_findings(rule, pair_figures, result.notes), result.notes)
            if not any(rule.matches(f"{f.family}/{n}") for f in fleet.figures for n in f.values):
                result.notes.add(f"{rule.name}: no figure of these runs matches {[p.pattern for p in rule.metrics]}")
        result.findings += found
    return result
