"""The moe_a2a family: set-up/step/check in process (world 1), and end to end on 3 ranks."""
from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

from harness.cli import main
from harness.families.moe_a2a import FAMILY, check, setup
from harness.core.family import GridOptions, RankContext
from harness.moe_a2a import step as moe_step

SMALL = dict(backend="gloo", bytes_per_elem=4, compute="sleep", expert_bytes=256, hidden=8, ns_per_token=0.0,
             seed=0, tokens=24, top_k=2)


@pytest.fixture(scope="module")
def world1():
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield RankContext(0, 1, 0, "gloo", torch.device("cpu"), dist.group.WORLD)
    if owned:  # leave no process group behind for other tests in this process
        dist.destroy_process_group()


def _case(**over):
    params = dict(SMALL, experts_per_rank=20, workload="hot", skew=17.0, mitigation="none", world=1)
    params.update(over)
    return FAMILY.case(**params)


@pytest.mark.parametrize("dtype_bytes", [2, 4])
def test_round_trip_is_exact_in_process(world1, dtype_bytes):
    state = setup(world1, _case(bytes_per_elem=dtype_bytes))
    for _ in range(3):
        moe_step.step(state)
    result = check(state)
    assert result.passed, result.detail
    assert result.checked == 24 * 2 + 2


def test_check_catches_a_wrong_expert(world1):
    state = setup(world1, _case())
    state.weights[3] += 1  # expert 3 now answers as expert 4 would
    result = check(state)
    assert not result.passed and result.wrong > 0


def test_check_catches_rows_returned_to_the_wrong_pair(world1):
    state = setup(world1, _case())
    real_step = moe_step.run_once

    def swapping_step(s):
        real_step(s)
        s.result[[0, 1]] = s.result[[1, 0]]

    moe_step.run_once = swapping_step
    try:
        result = check(state)
    finally:
        moe_step.run_once = real_step
    assert not result.passed


def test_capacity_drop_is_counted_in_process(world1):
    state = setup(world1, _case(mitigation="capacity", capacity_factor=1.0, overflow="drop"))
    result = check(state)
    assert result.passed, result.detail
    assert state.counters.dropped_pairs > 0


def test_bad_mitigation_is_a_clear_error(world1):
    with pytest.raises(ValueError, match="spare_slots"):
        setup(world1, _case(mitigation="replicate", routing="aware", spare_slots=0))


def test_quick_grid_puts_every_mitigation_beside_the_unmitigated_case():
    cases = FAMILY.grid(GridOptions("quick", 2, "gloo"))
    kinds = {c.params["mitigation"] for c in cases}
    assert kinds == {"none", "replicate", "capacity", "adaptive"}
    assert any(c.params["workload"] == "uniform" for c in cases)


@pytest.mark.slow
@pytest.mark.integration
def test_end_to_end_three_ranks(tmp_path):
    # hot 17x with top-2 needs 17*2 <= experts + 16: 18 experts over 3 ranks.
    base = dict(SMALL, experts_per_rank=6, workload="hot", skew=17.0, world=3)
    ids = [
        FAMILY.case(**dict(base, mitigation="none", workload="uniform", skew=0.0)).id,
        FAMILY.case(**dict(base, mitigation="none", paired=1)).id,
        FAMILY.case(**dict(base, mitigation="replicate", routing="naive", spare_slots=1)).id,
        FAMILY.case(**dict(base, mitigation="replicate", routing="aware", spare_slots=1)).id,
        FAMILY.case(**dict(base, mitigation="capacity", capacity_factor=1.0, overflow="reroute")).id,
        FAMILY.case(**dict(base, mitigation="adaptive", spare_slots=1, window_steps=2, drift_steps=3)).id,
    ]
    argv = ["run", "--out", str(tmp_path / "run"), "--iters", "40", "--warmup", "1"]
    for cid in ids:
        argv += ["--case", cid]
    assert main(argv) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert [r["case_id"] for r in records] == ids
    for r in records:
        assert r["status"] == "ok" and r["check"]["wrong"] == 0
        twins = 2 if r["params"].get("paired") else 1  # a paired case checks its uniform twin too
        assert r["check"]["checked"] == twins * 3 * (24 * 2 + 2)
        assert r["metrics"]["tokens_per_s"] > 0
    paired = records[1]["metrics"]
    assert paired["paired_steps"] >= 5 and 0 < paired["paired_rel_throughput"] < 10
    # The paired record's samples are its own steps: as many as the plan, from its own loop.
    assert len(records[1]["samples_ns"]) == records[1]["plan"]["iters"] == 40
    assert records[1]["timer"] == "family-owned loop (moe_a2a)"
    by_mitigation = {r["params"]["mitigation"] + r["params"].get("routing", ""): r for r in records
                     if r["params"]["workload"] == "hot"}
    assert by_mitigation["none"]["metrics"]["rank_max_over_mean"] > by_mitigation["replicateaware"]["metrics"]["rank_max_over_mean"]
    adaptive = by_mitigation["adaptive"]
    assert adaptive["metrics"]["recomputes_per_kstep"] > 0
    assert sum(rep["migrated_bytes"] for rep in adaptive["extra"]["rank_reports"]) > 0

    # The relative-throughput report pairs each case with the uniform one of the same run.
    assert main(["moe-report", str(tmp_path / "run"), "--json", str(tmp_path / "rel.json")]) == 0
    rows = {row["case_id"]: row for row in json.loads((tmp_path / "rel.json").read_text())}
    assert rows[ids[0]]["rel_throughput"] == 1.0
    assert all(0 < row["rel_throughput"] < 10 for row in rows.values())
    # A case run without a paired twin has no paired ratio: null in the JSON, never NaN.
    by_id = {r["case_id"]: r for r in records}
    assert all((row["paired_rel_throughput"] is None) == ("paired_rel_throughput" not in by_id[case_id]["metrics"])
               for case_id, row in rows.items())


def test_a_paired_case_times_only_its_own_steps(monkeypatch):
    """The twin's steps and the first step of each of the case's blocks run but are never samples:
    a case step costs 10 ns, a twin step 1 ns, so any twin step among the samples would show."""
    from types import SimpleNamespace

    from harness.moe_a2a import step as moe_step

    now = [0]
    ran = []

    def run_once(state):
        ran.append(state.name)
        now[0] += 10 if state.name == "case" else 1

    monkeypatch.setattr(moe_step, "run_once", run_once)
    case = SimpleNamespace(name="case", turns=0, baseline=SimpleNamespace(name="twin"))
    samples = moe_step.time_paired(case, 30, lambda: now[0])
    assert samples.tolist() == [10] * 30
    block = moe_step.PAIR_BLOCK
    assert ran[:2 * block] == ["case"] * block + ["twin"] * block  # A B A B in blocks
    assert ran.count("case") == 30 + -(-30 // (block - 1))  # plus one untimed first step per block
