"""Diagnosis of records timed while other processes took their CPUs: a contended record is evidence
of the neighbour, not of the node's hardware, so it flags no node and enters no fleet median; a
node with nothing else for a rule has no evidence for it, and the output says which records were
withheld and why. Diagnose called a node slow for its neighbour's load."""
from __future__ import annotations

import copy
import dataclasses
import json

from test_diagnose import DEFAULT, GOOD_RULE, SHARED_CPU, _node_run, _pairs_run
from harness.cli import main
from harness.core.contention import Verdict
from harness.core.records import ErrorInfo
from harness.core.store import load_run
from harness.diagnose import rules as rules_mod
from harness.diagnose.evaluate import diagnose
from harness.diagnose.observe import Fleet, add_run

SIZES = (65536, 1048576)  # those of _node_run
EVIDENCE = "tick-stall share 40.0% >= 5.0%; foreign CPU 50.0% >= 10.0%"


def _judged(run, verdict):
    """``run`` with every record's contention verdict replaced by ``verdict``."""
    records = []
    for record in run.records:
        record = copy.copy(record)
        record.__dict__["contention_verdict"] = verdict
        records.append(record)
    return dataclasses.replace(run, records=tuple(records))


def _fleet(tmp_path, means_us, verdicts):
    """One node's run per mean; node i's records judged ``verdicts[i]`` (None: as read)."""
    fleet = Fleet()
    for i, mean_us in enumerate(means_us):
        _node_run(tmp_path / f"n{i}", f"node{i}", mean_us)
        run = load_run(tmp_path / f"n{i}")
        add_run(fleet, run if verdicts.get(i) is None else _judged(run, verdicts[i]))
    return fleet


def test_a_slow_node_whose_records_were_contended_has_no_evidence_not_a_suspect_verdict(tmp_path):
    means_us = (100, 101, 99, 100, 125)
    quiet = diagnose(_fleet(tmp_path / "quiet", means_us, {}), rules_mod.load(DEFAULT))
    assert quiet.verdict("node4") == "suspect"
    result = diagnose(_fleet(tmp_path / "loaded", means_us, {4: Verdict(True, EVIDENCE)}), rules_mod.load(DEFAULT))
    assert result.verdict("node4") == "no evidence" and result.to_drain() == []
    assert result.exit_code == 2
    why = result.no_evidence_why("node4")
    assert f"2 record(s) contended (allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=65536,world=2: " \
           f"{EVIDENCE})" in why
    assert [len(result.withheld_of(f"node{i}")) for i in range(5)] == [0, 0, 0, 0, 2]


def test_contended_records_do_not_enter_the_fleet_median_the_others_are_judged_against(tmp_path):
    # With the two contended runs in it the median would be node2's own, and node2 would look typical.
    fleet = _fleet(tmp_path, (100, 100, 130, 300, 300), {3: Verdict(True, EVIDENCE), 4: Verdict(True, EVIDENCE)})
    result = diagnose(fleet, rules_mod.load(DEFAULT))
    assert result.to_drain() == ["node2"]
    quiet_busbw = {f.case_id: f.values["busbw_gbps"] for f in fleet.figures if f.subject == ("node0",)}
    busbw = [f for f in result.node_findings("node2") if f.figure == "allreduce/busbw_gbps"]
    assert busbw and all(f.median == quiet_busbw[f.case_id] for f in busbw)
    assert {result.verdict("node3"), result.verdict("node4")} == {"no evidence"}


def test_an_undecided_record_is_used_as_before(tmp_path):
    undecided = {4: Verdict(None, "undecided: no pressure evidence on any rank")}
    result = diagnose(_fleet(tmp_path, (100, 101, 99, 100, 125), undecided), rules_mod.load(DEFAULT))
    assert result.verdict("node4") == "suspect" and result.withheld == ()


def test_a_node_whose_only_records_for_a_rule_were_contended_has_no_evidence_for_that_rule(tmp_path):
    fleet = _fleet(tmp_path, (100, 101, 99, 100), {})
    # node4's small size failed, which measures the node; its large size, all a busbw rule reads, was contended
    _node_run(tmp_path / "n4", "node4", 125, failed=ErrorInfo("RuntimeError", "gloo: connection reset", rank=1))
    add_run(fleet, _judged(load_run(tmp_path / "n4"), Verdict(True, EVIDENCE)))
    rule_file = tmp_path / "busbw.yaml"
    rule_file.write_text(GOOD_RULE)  # no failure_check: the busbw rule alone judges
    result = diagnose(fleet, rules_mod.load(rule_file))
    assert result.verdict("node4") == "no evidence" and result.exit_code == 2
    assert result.no_evidence_why("node4") == (
        "busbw_low: only contended records to judge it by: 1 record(s) contended "
        f"(allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=1048576,world=2: {EVIDENCE})")
    # the failure still fails the node under the default rules: contention excuses no failure
    assert diagnose(fleet, rules_mod.load(DEFAULT)).verdict("node4") == "failed"


def test_a_contended_pairs_record_is_withheld_from_every_node_it_paired(tmp_path):
    keys = _pairs_run(tmp_path / "run", lambda a, b, rail: 1500.0 if 2 in (a, b) else 100.0)
    fleet = Fleet()
    add_run(fleet, _judged(load_run(tmp_path / "run"), Verdict(True, EVIDENCE)))
    result = diagnose(fleet, rules_mod.load(SHARED_CPU))
    assert result.to_drain() == [] and result.links() == {}
    assert {k: result.verdict(k) for k in keys} == {k: "no evidence" for k in keys}
    assert all(len(result.withheld_of(k)) == 2 for k in keys)  # one record per size


def test_the_command_withholds_contended_records_says_why_and_exits_2(tmp_path, capsys):
    for i, mean_us in enumerate((100, 101, 99, 100)):
        _node_run(tmp_path / f"n{i}", f"node{i}", mean_us)
    _node_run(tmp_path / "n4", "node4", 100, contended=SIZES)  # the neighbour's stalls make it look slow
    runs = [str(tmp_path / f"n{i}") for i in range(5)]
    code = main(["diagnose", *runs, "--rules", str(DEFAULT), "--json", str(tmp_path / "d.json")])
    out = capsys.readouterr().out
    assert code == 2, out
    assert "drain 0 node(s)" in out
    assert "no evidence: node4 (node4): its only valid records were contended: 2 record(s) contended (" in out
    assert "tick-stall share 10.0% >= 5.0%; psi some 50.0% >= " in out
    assert "4 healthy, 0 to drain, 1 with no evidence, 0 link(s) to check, 2 contended record(s) withheld -> exit 2" \
        in out
    saved = json.loads((tmp_path / "d.json").read_text())
    nodes = {n["node"]: n for n in saved["nodes"]}
    assert nodes["node4"]["verdict"] == "no evidence" and nodes["node4"]["contended_withheld"] == 2
    assert "2 record(s) contended" in nodes["node4"]["no_evidence"]
    assert nodes["node0"]["contended_withheld"] == 0 and nodes["node0"]["verdict"] == "healthy"
    assert saved["exit_code"] == 2


def test_the_command_counts_the_withheld_records_of_a_node_judged_by_its_others(tmp_path, capsys):
    for i, mean_us in enumerate((100, 101, 99, 100)):
        _node_run(tmp_path / f"n{i}", f"node{i}", mean_us)
    _node_run(tmp_path / "n4", "node4", 125, contended=(1048576,))  # slow at the size that was quiet
    assert {r.case_id.split("size_bytes=")[1]: r.contention_verdict.contended
            for r in load_run(tmp_path / "n4").records} == {"65536,world=2": None, "1048576,world=2": True}
    runs = [str(tmp_path / f"n{i}") for i in range(5)]
    code = main(["diagnose", *runs, "--rules", str(DEFAULT), "--json", str(tmp_path / "d.json")])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "drain 1 node(s):\n  node4 (node4): suspect" in out
    assert "contended: node4 (node4): 1 record(s) contended (allreduce/algo=ring,backend=gloo,dtype=float32," \
           "size_bytes=1048576,world=2: tick-stall share 10.0% >= 5.0%" in out
    (node4,) = [n for n in json.loads((tmp_path / "d.json").read_text())["nodes"] if n["node"] == "node4"]
    assert node4["contended_withheld"] == 1 and node4["no_evidence"] is None
    assert {e["case_id"].split("size_bytes=")[1] for e in node4["evidence"]} == {"65536,world=2"}
