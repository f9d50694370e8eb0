"""``critpath diagnose RUN_DIR...``: which nodes to drain and which links to check, with the evidence.

Exit codes: 0 every node healthy and no link flagged; 1 a node is suspect or failed, or a link is
slow; 2 nothing is flagged but a node has no evidence (no valid record measured it: a run without
records, or a rule had only contended records of it), or the diagnosis could not run (a bad rule
file, an unreadable run, a run that names no node, one node given twice).
"""
from __future__ import annotations


from rich.table import Table
from rich.text import Text

from harness.core import atomic
from harness.core.inputfile import declare_inputs
from harness.core.store import run_inputs
from harness.core.options import path_option, print_error
from harness.diagnose.evaluate import HEALTHY, NO_EVIDENCE, Diagnosis, contended_why, diagnose
from harness.diagnose.observe import DiagnoseInputError, Fleet, read_fleet
from harness.diagnose.rules import Rule, RuleFileError, load
from harness.run.fingerprint import PROJECT_ROOT
from harness.tables.terminal import wide_console

EXIT_HEALTHY, EXIT_FLAGGED, EXIT_CANNOT = 0, 1, 2
DEFAULT_RULES = PROJECT_ROOT / "baselines" / "diagnose" / "default.yaml"


def register(sub) -> None:
    p = sub.add_parser("diagnose", help="per-node and per-pair verdicts over runs from many nodes: what to drain")
    p.add_argument("run_dirs", nargs="+", type=path_option, metavar="RUN_DIR",
                   help="runs of critpath run (one per node, or one across nodes) or nccl-tests imports")
    p.add_argument("--rules", type=path_option, default=DEFAULT_RULES, metavar="RULES.yaml",
                   help=f"rule file (default {DEFAULT_RULES.relative_to(PROJECT_ROOT)})")
    p.add_argument("--json", type=path_option, metavar="FILE", help="also write the diagnosis as JSON")
    p.set_defaults(func=cmd_diagnose)


def _node_table(result: Diagnosis):
    table = Table(title="nodes", title_justify="left")
    for header in ("node", "host", "verdict", "findings", "rules", "contended"):
        table.add_column(header)
    for node, host in result.nodes.items():
        found = result.node_findings(node)
        verdict = result.verdict(node)
        colour = {"healthy": "green", "suspect": "yellow", "failed": "red", NO_EVIDENCE: "magenta"}[verdict]
        table.add_row(node, host, Text(verdict, style=colour), str(len(found)),
                      ", ".join(sorted({f.rule.name for f in found})) or "-",
                      str(len(result.withheld_of(node))))
    return table


def _pair_table(fleet: Fleet, result: Diagnosis, rules: list[Rule]):
    """Every measured pair, with the figures an acting rule reads and who it flagged."""
    pairs = [f for f in fleet.figures if f.kind == "pair"]
    if not pairs:
        return None
    table = Table(title="pairs (tier=pairs)", title_justify="left")
    for header in ("case", "pair", "rail", "figure", "value", "flagged"):
        table.add_column(header, justify="right" if header == "value" else "left")
    acting = [r for r in rules if not r.store and r.metrics and r.function != "failure_check"]
    for f in pairs:
        for name in sorted(n for n in f.values if any(r.matches(f"{f.family}/{n}") for r in acting)):
            figure = f"{f.family}/{name}"
            hits = [x for x in result.acting() if x.figure == figure and x.case_id == f.case_id and
                    ((x.scope == "link" and x.subject == f.subject and x.rail == f.rail) or
                     (x.scope == "node" and x.subject[0] in f.subject and x.rail == f.rail))]
            flagged = ", ".join(f"{x.rule.name}: {'link' if x.scope == 'link' else 'node ' + x.subject[0]}"
                                for x in hits) or "-"
            table.add_row(f.case_id.split("/", 1)[1], " <-> ".join(f.subject),
                          "-" if f.rail is None else str(f.rail), name, f"{f.values[name]:.4g}", flagged)
    return table


def _to_json(result: Diagnosis) -> dict:
    def finding(f):
        return {"rule": f.rule.name, "rule_source": f.rule.source, "categories": f.rule.categories,
                "verdict": f.rule.verdict, "scope": f.scope, "subject": list(f.subject), "case_id": f.case_id,
                "figure": f.figure or None, "value": f.value, "fleet_median": f.median, "judged": f.judged,
                "criteria": str(f.rule.criteria) if f.rule.criteria else None, "detail": f.detail,
                "source": f.source, "evidence": f.evidence()}

    return {
        "schema": "critpath.diagnosis/1",
        "exit_code": result.exit_code,
        "nodes": [{"node": n, "host": h, "verdict": result.verdict(n),
                   "evidence": [finding(f) for f in result.node_findings(n)],
                   "no_evidence": result.no_evidence_why(n) if result.verdict(n) == NO_EVIDENCE else None,
                   "contended_withheld": len(result.withheld_of(n)),
                   "contended": [{"case_id": w.case_id, "evidence": w.evidence, "source": w.source}
                                 for w in result.withheld_of(n)]} for n, h in result.nodes.items()],
        "drain": result.to_drain(),
        "links": [{"pair": list(k), "evidence": [finding(f) for f in v]} for k, v in result.links().items()],
        "notes": result.notes.lines(),
    }


def cmd_diagnose(args) -> int:
    # Known before they are read: --json may not replace a run's file or the rules.
    declare_inputs([*run_inputs(args.run_dirs), args.rules])
    try:
        rules = load(args.rules)
        fleet = read_fleet(args.run_dirs)
    except (RuleFileError, DiagnoseInputError) as exc:
        print_error("diagnose", exc)
        return EXIT_CANNOT
    result = diagnose(fleet, rules)
    console = wide_console()
    console.print(f"diagnosis of {len(args.run_dirs)} run(s), {len(result.nodes)} node(s), rules {args.rules}",
                  markup=False, highlight=False)
    console.print(_node_table(result))
    table = _pair_table(fleet, result, rules)
    if table is not None:
        console.print(table)
    drain = result.to_drain()
    print(f"drain {len(drain)} node(s){':' if drain else ''}")
    for node in drain:
        print(f"  {node} ({result.nodes[node]}): {result.verdict(node)}")
        for f in result.node_findings(node):
            print(f"    - {f.evidence()}")
    links = result.links()
    print(f"check {len(links)} link(s){':' if links else ''}")
    for pair, found in links.items():
        print(f"  {' <-> '.join(pair)}: slow with this partner only")
        for f in found:
            print(f"    - {f.evidence()}")
    for node in result.unmeasured():
        print(f"{NO_EVIDENCE}: {node} ({result.nodes[node]}): {result.no_evidence_why(node)}, so it is not called healthy")
    for node in result.nodes:
        withheld = result.withheld_of(node)
        if withheld and result.verdict(node) != NO_EVIDENCE:  # a node without evidence said why above
            print(f"contended: {node} ({result.nodes[node]}): {contended_why(withheld)}: withheld, "
                  "judged by no rule and in no fleet median")
    for note in result.notes.lines():
        print(f"note: {note}")
    healthy = sum(result.verdict(n) == HEALTHY for n in result.nodes)
    unmeasured = f", {len(result.unmeasured())} with no evidence" if result.unmeasured() else ""
    withheld = f", {len(result.withheld)} contended record(s) withheld" if result.withheld else ""
    if args.json:  # before the verdict line, so a file that cannot be written never follows "-> exit 0"
        atomic.write_json(args.json, _to_json(result), sort_keys=False)
    print(f"{healthy} healthy, {len(drain)} to drain{unmeasured}, {len(links)} link(s) to check{withheld} "
          f"-> exit {result.exit_code}")
    return result.exit_code
