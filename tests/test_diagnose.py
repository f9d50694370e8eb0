"""critpath diagnose: rule files refused with file, line and field; per-node and per-pair verdicts
on record sets built through the families' own report and metrics code (a slow node, a slow link,
a slow rail, failures); and the pairing schedule it relies on."""
from __future__ import annotations

import datetime as dt
import itertools
import json
import math

import numpy as np
import pytest

from conftest import ROOT, derived_record
from harness.collectives import pairs
from harness.collectives.layout import NodeLayout, pairing_rounds
from harness.diagnose import rules as rules_mod
from harness.diagnose.evaluate import diagnose
from harness.diagnose.observe import DiagnoseInputError, read_fleet
from harness.core.records import ErrorInfo, Record
from harness.core.store import RunDir

SHARED_CPU = ROOT / "baselines" / "diagnose" / "shared-cpu.yaml"
DEFAULT = ROOT / "baselines" / "diagnose" / "default.yaml"
ITERS = 120


# -- the schedule -------------------------------------------------------------------------------

def test_every_node_meets_two_partners_or_more_in_at_most_ceil_log2_n_plus_one_rounds():
    for n in range(1, 65):
        rounds = pairing_rounds(n)
        met = [set() for _ in range(n)]
        for pairs_of_round in rounds:
            busy = [node for pair in pairs_of_round for node in pair]
            assert len(busy) == len(set(busy)), (n, pairs_of_round)  # a node is in one pair per round
            for a, b in pairs_of_round:
                met[a].add(b)
                met[b].add(a)
        assert len(rounds) <= (math.ceil(math.log2(n)) + 1 if n > 1 else 0), n
        if n >= 3:
            assert min(len(m) for m in met) >= 2, (n, met)
    assert pairing_rounds(4) == [[(0, 1), (2, 3)], [(0, 2), (1, 3)], [(0, 3), (1, 2)]]
    assert pairing_rounds(2) == [[(0, 1)]]


def test_at_once_pair_times_the_node_pairs_of_a_round_one_after_another():
    layout = NodeLayout((0, 0, 1, 1, 2, 2, 3, 3), ("a", "b", "c", "d"))
    by_round = pairs.PairRounds.plan(layout, 0, "rails")
    one_by_one = pairs.PairRounds.plan(layout, 0, "rails", "pair")
    assert [groups for _, groups in by_round.slots][0] == [[0, 2], [1, 3], [4, 6], [5, 7]]  # both rails at once
    assert [groups for _, groups in one_by_one.slots][:2] == [[[0, 2], [1, 3]], [[4, 6], [5, 7]]]
    assert [r for r, _ in one_by_one.slots] == [0, 0, 1, 1, 2, 2]
    assert one_by_one.mine == [[0, 2], None, [0, 4], None, [0, 6], None]


# -- record sets --------------------------------------------------------------------------------

def _pairs_run(path, rtt_us, nodes=4, ranks_per_node=1, sizes=(8, 4096), family="p2p_tiers", seed=0):
    """A finished tier=pairs run whose reports are what each rank of the real PairRounds reports,
    with samples around ``rtt_us(node_a, node_b, rail)`` microseconds."""
    rng = np.random.default_rng(seed)
    keys = tuple(f"host{n}#GROUP_RANK={n}" for n in range(nodes))
    node_of_rank = tuple(n for n in range(nodes) for _ in range(ranks_per_node))
    layout = NodeLayout(node_of_rank, keys)
    world = len(node_of_rank)
    run = RunDir(path, "diag-test")
    for size in sizes:
        per_rank = [pairs.PairRounds.plan(layout, r, "rails" if family == "p2p_tiers" else "nodes")
                    for r in range(world)]
        wanted = {}
        for rounds in per_rank:
            for slot, group in enumerate(rounds.mine):
                if group is None:
                    continue
                a, b = rounds.nodes_of(group)
                key = (slot, tuple(group))
                if key not in wanted:
                    rail = layout.local_index(group[0]) if family == "p2p_tiers" else None
                    wanted[key] = rtt_us(a, b, rail) * 1e3 * rng.uniform(0.97, 1.03, ITERS)
                rounds.samples[slot] = wanted[key].astype(np.int64)
        reports = [pairs.report(rounds) for rounds in per_rank]
        sweep = np.max([sum(r.samples.values()) for r in per_rank], axis=0)
        case_id = f"{family}/backend=gloo,size_bytes={size},tier=pairs,world={world}"
        run.append(derived_record(case_id, sweep, run_id="diag-test", reports=reports))
    hosts = [f"host{n}" for n in range(nodes)]
    run.write_fingerprint({"launch": "joined", "world": world, "layout": {"nodes": nodes, "node_keys": list(keys), "hosts": hosts,
                                      "node_of_rank": list(node_of_rank)}})
    run.write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": len(sizes)})
    return keys


def _diagnose(paths, rule_file=SHARED_CPU):
    return diagnose(read_fleet(paths), rules_mod.load(rule_file))


def test_a_node_slow_with_all_its_partners_is_named_and_no_link_is(tmp_path):
    keys = _pairs_run(tmp_path / "run", lambda a, b, rail: 1500.0 if 2 in (a, b) else 100.0)
    result = _diagnose([tmp_path / "run"])
    assert result.to_drain() == [keys[2]]
    assert result.links() == {}
    assert result.exit_code == 1
    evidence = [f.evidence() for f in result.node_findings(keys[2])]
    assert len(evidence) == 2  # one per size: min_cases 2 is met
    assert all("p2p_tiers/p10_us" in e and "fleet median" in e and "best of 3 partner(s)" in e for e in evidence)
    assert all(result.verdict(k) == "healthy" for k in keys if k != keys[2])


def test_a_link_slow_for_one_pair_is_named_as_the_link_not_its_nodes(tmp_path):
    keys = _pairs_run(tmp_path / "run", lambda a, b, rail: 1500.0 if {a, b} == {1, 2} else 100.0)
    result = _diagnose([tmp_path / "run"])
    assert result.to_drain() == []
    assert list(result.links()) == [(keys[1], keys[2])]
    assert result.exit_code == 1
    assert all(result.verdict(k) == "healthy" for k in keys)


def test_a_clean_fleet_flags_nothing_and_exits_0(tmp_path):
    _pairs_run(tmp_path / "run", lambda a, b, rail: 100.0 + 10 * (a + b))  # within 3 x of each other
    result = _diagnose([tmp_path / "run"])
    assert result.findings == [] and result.exit_code == 0


def test_a_slow_rail_names_its_node_with_the_rail(tmp_path):
    keys = _pairs_run(tmp_path / "run", lambda a, b, rail: 1500.0 if 5 in (a, b) and rail == 1 else 100.0,
                      nodes=8, ranks_per_node=2)
    result = _diagnose([tmp_path / "run"])
    assert result.to_drain() == [keys[5]] and result.links() == {}
    assert {f.rail for f in result.node_findings(keys[5])} == {1}


def test_allreduce_pairs_are_judged_by_busbw_under_the_default_rules(tmp_path):
    keys = _pairs_run(tmp_path / "run", lambda a, b, rail: 150.0 if 0 in (a, b) else 100.0,
                      ranks_per_node=2, family="allreduce_tiers")
    result = _diagnose([tmp_path / "run"], DEFAULT)
    assert result.to_drain() == [keys[0]] and result.links() == {}
    assert {f.figure for f in result.node_findings(keys[0])} == {"allreduce_tiers/busbw_gbps"}


def test_one_case_flagging_a_subject_is_not_enough_under_min_cases(tmp_path):
    _pairs_run(tmp_path / "run", lambda a, b, rail: 100.0, sizes=(8,))
    _pairs_run(tmp_path / "slow", lambda a, b, rail: 1500.0 if 3 in (a, b) else 100.0, sizes=(4096,))
    (tmp_path / "slow" / "results.jsonl").open("a").write((tmp_path / "run" / "results.jsonl").read_text())
    # one run of both cases: its run.json plans both
    RunDir(tmp_path / "slow", "diag-test").write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": 2})
    result = _diagnose([tmp_path / "slow"])
    assert result.findings == []
    assert any("flagged in 1 case(s), fewer than min_cases 2" in n for n in result.notes.lines())


_STARTS = itertools.count()  # each node's run starts at a time of its own, as runs measured apart do


def _stalled(samples):
    """``samples`` as a neighbour leaves them, with the evidence that judges them contended: every
    10th iteration waits a scheduler tick, while PSI says runnable tasks waited half the window."""
    from harness.core import contention as cn

    samples = samples.copy()
    samples[::10] = cn.tick_ns(cn.ASSUMED_TICK_HZ)
    rank = cn.RankEvidence(window_ns=int(samples.sum()), pressure_source=cn.PSI, pressure_share=0.5, nivcsw=40,
                           cpus_allowed="0-1", cpu_last=0, tick_hz=cn.ASSUMED_TICK_HZ, tick_source=cn.TICK_ASSUMED)
    return samples, {"contention": cn.Contention((rank, rank))}


def _node_run(path, host, mean_us, failed=None, run_id=None, contended=()):
    """One node's own run: two ranks of allreduce on ``host`` (``contended``: the sizes whose timed
    loops a neighbour stalled, their records carrying the evidence that says so)."""
    run_id = run_id or f"run-{host}"
    run = RunDir(path, run_id)
    started_at = (dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=next(_STARTS))).isoformat()
    for size in (65536, 1048576):
        case_id = f"allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes={size},world=2"
        if failed is not None and size == 65536:
            from harness.core import registry

            run.append(Record.failure(registry.parse(case_id), run_id, failed, "gloo", started_at))
            continue
        samples = np.full(200, mean_us * 1e3 * size / 65536, dtype=np.int64)
        samples, evidence = _stalled(samples) if size in contended else (samples, {})
        run.append(derived_record(case_id, samples, run_id=run_id, reports=[{}, {}], started_at=started_at,
                                  **evidence))
    run.write_fingerprint({"host": host, "launch": "joined", "world": 2, "layout": {"nodes": 1, "node_keys": [host], "hosts": [host],
                                                    "node_of_rank": [0, 0]}})
    run.write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": 2})


def test_runs_of_single_nodes_low_busbw_is_suspect_and_a_failed_record_fails_its_node(tmp_path):
    for i, mean in enumerate((100, 101, 99, 100, 125)):
        _node_run(tmp_path / f"n{i}", f"node{i}", mean)
    _node_run(tmp_path / "n5", "node5", 100, failed=ErrorInfo("RuntimeError", "gloo: connection reset", rank=1))
    result = _diagnose(sorted(tmp_path.iterdir()), DEFAULT)
    assert {n: result.verdict(n) for n in result.nodes} == {
        "node0": "healthy", "node1": "healthy", "node2": "healthy", "node3": "healthy",
        "node4": "suspect", "node5": "failed"}
    (busbw,) = {f for f in result.node_findings("node4") if f.figure == "allreduce/busbw_gbps"
                and f.case_id.endswith("size_bytes=1048576,world=2")}
    assert busbw.value == pytest.approx(busbw.median * 100 / 125, rel=0.02)
    assert "variance -0.2" in busbw.evidence() and "default.yaml" in busbw.evidence()
    (failure,) = result.node_findings("node5")
    assert "connection reset (rank 1)" in failure.evidence()


def test_a_record_of_a_two_node_run_implicates_both_nodes(tmp_path):
    for i, mean in enumerate((100, 100, 300)):
        _node_run(tmp_path / f"r{i}", f"a{i}", mean)
    fp = json.loads((tmp_path / "r2" / "fingerprint.json").read_text())
    fp["layout"].update(nodes=2, node_keys=["a2", "b2"], hosts=["a2", "b2"], node_of_rank=[0, 1])
    (tmp_path / "r2" / "fingerprint.json").write_text(json.dumps(fp))
    result = _diagnose(sorted(tmp_path.iterdir()), DEFAULT)
    assert result.to_drain() == ["a2", "b2"]


def test_bad_input_is_refused_naming_what_to_add(tmp_path):
    _node_run(tmp_path / "a", "node0", 100)
    _node_run(tmp_path / "b", "node0", 100, run_id="run-node0-again")  # two runs of one node
    with pytest.raises(DiagnoseInputError, match="node0: allreduce/.* is in both .* pass one of them"):
        read_fleet([tmp_path / "a", tmp_path / "b"])
    (tmp_path / "a" / "fingerprint.json").write_text("{}")
    with pytest.raises(DiagnoseInputError, match="given twice"):
        read_fleet([tmp_path / "b", tmp_path / "b"])
    with pytest.raises(DiagnoseInputError, match="names no node"):
        read_fleet([tmp_path / "a"])


def test_multi_rules_count_the_stored_rules_that_flagged_a_subject(tmp_path):
    for i, mean in enumerate((100, 100, 100, 130)):
        _node_run(tmp_path / f"n{i}", f"node{i}", mean)
    rule_file = tmp_path / "multi.yaml"
    rule_file.write_text("""schema: critpath.diagnose/1
rules:
  slow_mean:
    function: ratio
    criteria: "> 1.2"
    store: true
    categories: latency
    metrics: ['allreduce/mean_us']
  slow_p50:
    function: ratio
    criteria: "> 1.2"
    store: true
    categories: latency
    metrics: ['allreduce/p50_us']
  both:
    function: multi_rules
    rules: [slow_mean, slow_p50]
    at_least: 2
    verdict: suspect
    categories: latency
""")
    result = _diagnose(sorted(p for p in tmp_path.iterdir() if p.is_dir()), rule_file)
    assert result.to_drain() == ["node3"]
    assert [f.rule.name for f in result.node_findings("node3")] == ["both"]  # stored rules do not act alone


# -- rule files ---------------------------------------------------------------------------------

def test_the_shipped_rule_files_load():
    for path in sorted((ROOT / "baselines" / "diagnose").glob("*.yaml")):
        assert rules_mod.load(path), path


GOOD_RULE = """schema: critpath.diagnose/1
rules:
  busbw_low:
    function: variance
    criteria: "< -0.10"
    verdict: suspect
    categories: bandwidth
    metrics: ['.*/busbw_gbps']
"""


@pytest.mark.parametrize("edit, line, message", [
    (lambda t: t.replace('"< -0.10"', '"less than 0.9"'), 5,
     "field rules.busbw_low.criteria: 'less than 0.9' is not a comparison like \"< 0.9\""),
    (lambda t: t.replace("variance", "median"), 4, "field rules.busbw_low.function: 'median' is not one of"),
    (lambda t: t.replace("    verdict: suspect\n", ""), 3, "field rules.busbw_low.verdict: 'verdict' is a required"),
    (lambda t: t.replace("'.*/busbw_gbps'", "'(busbw'"), 8, "field rules.busbw_low.metrics.0: '(busbw' is not a regex"),
    (lambda t: t.replace("    categories: bandwidth\n", "    categories: bandwidth\n    verdict: failed\n"), 8,
     "duplicate key 'verdict' (first at line 6)"),
    (lambda t: t.replace("critpath.diagnose/1", "critpath.diagnose/2"), 1,
     "field schema: 'critpath.diagnose/1' was expected"),
    (lambda t: t + "  both:\n    function: multi_rules\n    rules: [busbw_low, nope]\n    at_least: 1\n"
               "    verdict: suspect\n    categories: x\n", 11, "field rules.both.rules: 'nope' is not a rule defined"),
    (lambda t: t.replace("    metrics:", "    at_least: 2\n    metrics:"), 8,
     "field rules.busbw_low.at_least: a setting of multi_rules rules only"),
])
def test_a_bad_rule_file_names_its_file_line_and_field(tmp_path, edit, line, message):
    path = tmp_path / "rules.yaml"
    path.write_text(edit(GOOD_RULE))
    with pytest.raises(rules_mod.RuleFileError) as refused:
        rules_mod.load(path)
    text = str(refused.value)
    assert text.startswith(f"{path}:{line}: "), text
    assert message in text, text


def test_the_command_exits_2_on_a_bad_rule_file_and_1_on_a_slow_node(tmp_path, cli):
    keys = _pairs_run(tmp_path / "run", lambda a, b, rail: 1500.0 if 1 in (a, b) else 100.0)
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD_RULE.replace('"< -0.10"', "'<<'"))
    refused = cli("diagnose", str(tmp_path / "run"), "--rules", str(bad))
    assert refused.returncode == 2 and f"{bad}:5: field rules.busbw_low.criteria" in refused.stderr
    out = cli("diagnose", str(tmp_path / "run"), "--rules", str(SHARED_CPU), "--json", str(tmp_path / "d.json"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"drain 1 node(s):\n  {keys[1]} (host1): suspect" in out.stdout
    saved = json.loads((tmp_path / "d.json").read_text())
    assert saved["drain"] == [keys[1]] and saved["links"] == [] and saved["exit_code"] == 1


# -- for real: torchrun agents on loopback, one of them slowed through the fault hook -------------

# Alone: diagnose withholds contended records, and beside another test worker the four ranks on
# two cores have a neighbour (foreign CPU ~50 %), so every node would have no evidence.
@pytest.mark.alone
@pytest.mark.integration
def test_diagnosis_names_the_torchrun_agent_slowed_by_the_fault_hook_and_nothing_without_it(tmp_path, cli):
    from test_torchrun import _agents

    from harness.families import p2p_tiers
    from harness.gatepower.inject import INJECT_ENV
    from harness.core.store import load_records

    # One pair at a time: four ranks on two shared cores would otherwise compete for the CPUs.
    cases = [p2p_tiers.FAMILY.case(tier="pairs", backend="gloo", size_bytes=size, world=4, at_once="pair").id
             for size in (8, 1024, 65536)]
    args = [a for c in cases for a in ("--case", c)] + ["--iters", "300", "--warmup", "5", "--timeout", "60"]
    slow_agent = 2
    # 2 ms of busy-wait before each step of the slowed agent's rank (a round trip is ~0.1-0.3 ms here).
    injected = json.dumps({c: [2_000_000, 1] for c in cases})
    verdicts = {}
    for name, env_of in (("clean", lambda node: {}),
                         ("slowed", lambda node: {INJECT_ENV: injected} if node == slow_agent else {})):
        (tmp_path / name).mkdir()
        codes, logs = _agents(tmp_path / name, args + ["--out", str(tmp_path / name / "run")], nodes=4, nproc=1,
                              env_of=env_of)
        assert codes == [0, 0, 0, 0], logs
        out = cli("diagnose", str(tmp_path / name / "run"), "--rules", str(SHARED_CPU),
                  "--json", str(tmp_path / name / "diagnosis.json"))
        verdicts[name] = (out, json.loads((tmp_path / name / "diagnosis.json").read_text()))

    out, clean = verdicts["clean"]
    assert out.returncode == 0, out.stdout
    assert clean["drain"] == [] and clean["links"] == [] and len(clean["nodes"]) == 4

    out, slowed = verdicts["slowed"]
    run = tmp_path / "slowed" / "run"
    layout = json.loads((run / "fingerprint.json").read_text())["layout"]
    records = load_records(run)
    # The agent's node as the rendezvous numbered it: the ranks whose reports carry the injection.
    marked = {rank for r in records for rank, rep in enumerate(r.extra["rank_reports"]) if "injected_slowdown" in rep}
    assert len(marked) == 1, marked
    slow_node = layout["node_keys"][layout["node_of_rank"][marked.pop()]]
    assert out.returncode == 1, out.stdout
    assert slowed["drain"] == [slow_node], out.stdout
    assert slowed["links"] == [], out.stdout
    (node,) = [n for n in slowed["nodes"] if n["node"] == slow_node]
    assert {e["case_id"] for e in node["evidence"]} == set(cases)  # slow at every size, with all 3 partners
    assert all(e["judged"] > 3 and "best of 3 partner(s)" in e["detail"] for e in node["evidence"])


def _nccl_tests_log(text: str, host: str, slower: float = 1.0) -> str:
    """The fixture's log as another node's: its host name, and the large sizes ``slower`` times slower
    (time up, algbw and busbw down by the same factor, as a slower link would give), with the
    trailer's average busbw as nccl-tests would have printed it for those rows."""
    out, busbw = [], []
    for line in text.replace("node01", host).splitlines():
        cols = line.split()
        if len(cols) == 13 and cols[0].isdigit():
            if slower != 1.0 and int(cols[0]) >= 2097152:
                for i in (5, 9):
                    cols[i] = f"{float(cols[i]) * slower:.2f}"
                for i in (6, 7, 10, 11):
                    cols[i] = f"{float(cols[i]) / slower:.2f}"
                line = " ".join(cols)
            busbw += [float(cols[7]), float(cols[11])]
        if line.startswith("# Avg bus bandwidth") and slower != 1.0:
            line = f"# Avg bus bandwidth    : {sum(busbw) / len(busbw):g} "
        out.append(line)
    return "\n".join(out) + "\n"


def test_nccl_tests_imports_of_many_nodes_are_diagnosed_by_their_hosts(tmp_path):
    from harness.nccltests.importer import import_file

    text = (ROOT / "tests" / "fixtures" / "nccl_tests" / "all_reduce_h100.txt").read_text()
    runs = []
    for i, slower in enumerate((1.0, 1.0, 1.25, 1.0)):
        log = tmp_path / f"node{i:02d}.txt"
        log.write_text(_nccl_tests_log(text, f"node{i:02d}", slower))
        import_file(log, tmp_path / f"imp{i}", collective="all_reduce")
        runs.append(tmp_path / f"imp{i}")
    result = _diagnose(runs, DEFAULT)
    assert result.to_drain() == ["node02"] and set(result.nodes) == {f"node{i:02d}" for i in range(4)}
    figures = {(f.figure, f.case_id.split("size_bytes=")[1].split(",")[0]) for f in result.node_findings("node02")}
    assert figures == {("allreduce/busbw_gbps", size) for size in ("2097152", "16777216", "134217728")}
    # Mean-only imports offer no p99: the rule judges nothing, and says so.
    assert "p99_high: no figure of these runs matches ['.*/p99_us']" in result.notes.lines()


def test_a_json_that_cannot_be_written_is_refused_before_any_verdict_line(tmp_path, cli):
    _pairs_run(tmp_path / "run", lambda a, b, rail: 100.0)
    (tmp_path / "file").write_text("precious\n")
    out = cli("diagnose", str(tmp_path / "run"), "--rules", str(SHARED_CPU), "--json", str(tmp_path / "file" / "d.json"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "-> exit" not in out.stdout, out.stdout  # no "-> exit 0" above an exit 2
    assert f"{tmp_path / 'file'}" in out.stderr and "Traceback" not in out.stderr
    assert (tmp_path / "file").read_text() == "precious\n"
