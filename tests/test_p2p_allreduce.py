"""Ring and tree built from point-to-point ops give exact sums for any world and element count."""
from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from harness.collectives.p2p_allreduce import RingPlan, TreePlan, ring_allreduce, tree_allreduce
from harness.run.driver import Collectives, run_case
from harness.core.family import CheckResult, Family, RankContext
from harness.core.case import Case, Param
from harness.families import allreduce
from harness.run.timing import PlanPolicy

COUNTS = (1, 2, 3, 5, 7, 31, 1000, 1001)


def _init(rank, world, store_path):
    store = dist.FileStore(store_path, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))


def _exactness_worker(rank, world, store_path, results):
    _init(rank, world, store_path)
    bad = []
    for count in COUNTS:
        for name, plan_cls, fn in (("ring", RingPlan, ring_allreduce), ("tree", TreePlan, tree_allreduce)):
            # Distinct integers per rank and element: any lost or doubled chunk changes the sum.
            buf = (torch.arange(count, dtype=torch.float64) * (rank + 1) + 10 * rank)
            fn(plan_cls.for_buffer(buf, rank, world))
            want = torch.arange(count, dtype=torch.float64) * sum(range(1, world + 1)) + 10 * sum(range(world))
            if not torch.equal(buf, want):
                bad.append((name, count, int((buf != want).sum())))
    results[rank] = bad
    dist.destroy_process_group()


@pytest.mark.integration
@pytest.mark.parametrize("world", [2, pytest.param(3, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)])
def test_ring_and_tree_are_exact(world, tmp_path):
    results = mp.Manager().dict()
    mp.spawn(_exactness_worker, args=(world, str(tmp_path / "store"), results), nprocs=world, join=True)
    assert dict(results) == {r: [] for r in range(world)}


# --- the loop plan is rank 0's, on every rank -------------------------------------------------

def _counting_setup(ctx, case):
    return {"ctx": ctx, "steps": 0}


def _counting_step(state):
    state["steps"] += 1


COUNTING = Family(
    name="counting", version=1, description="counts steps", params=(Param("world", int),),
    grid=lambda o: [], setup=_counting_setup, step=_counting_step,
    metrics=lambda case, summary, reports: {}, check=lambda s: CheckResult(0, 1),
    report=lambda s: {"steps": s["steps"]},
)


def _plan_worker(rank, world, store_path, results):
    _init(rank, world, store_path)
    control = dist.new_group(backend="gloo")
    ctx = RankContext(rank, world, rank, "gloo", torch.device("cpu"), dist.group.WORLD)
    # Each rank's clock runs at a different speed, so local calibration would disagree.
    ticks = iter(range(0, 10**12, 1000 * (rank + 1) ** 3))
    policy = PlanPolicy(warmup=4, target_s=1e-4, min_iters=3, max_iters=10_000)
    record = run_case(COUNTING, Case("counting", {"world": world}), ctx, Collectives(control, world), policy, "t",
                      clock=lambda: next(ticks))
    if rank == 0:
        results["record"] = record.to_dict()
    dist.destroy_process_group()


@pytest.mark.integration
@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_loop_plan_is_identical_on_all_ranks(tmp_path):
    results = mp.Manager().dict()
    mp.spawn(_plan_worker, args=(3, str(tmp_path / "store"), results), nprocs=3, join=True)
    record = results["record"]
    plan = record["plan"]
    steps = [r["steps"] for r in record["extra"]["rank_reports"]]
    # Every rank ran warm-up + the planned iterations + nothing else.
    assert steps == [plan["warmup"] + plan["iters"]] * 3
    # The slowest rank (rank 2: 27000 ns per tick pair) set the estimate: 1e5 ns / 27000 ns -> 4.
    assert plan["iters"] == 4
    # Per-iteration latency is the max over ranks: rank 2's fake clock.
    assert set(record["samples_ns"]) == {27000}


def test_allreduce_check_catches_a_sum_that_did_not_happen():
    # A ring plan for one rank does nothing; checked as if two ranks took part, it must fail.
    buf = torch.zeros(11)
    ctx = RankContext(0, 2, 0, "gloo", torch.device("cpu"), None)
    plan = RingPlan.for_buffer(buf, 0, 1)
    state = allreduce.State(ctx, None, buf, "ring", op=lambda: ring_allreduce(plan), plan=plan)
    result = allreduce.check(state)
    assert result.checked == 11
    assert result.wrong > 0 and not result.passed


@pytest.mark.parametrize("world", range(1, 9))
def test_expected_sum_matches_brute_force(world):
    count = 17
    brute = sum(allreduce._pattern(count, r, "cpu") for r in range(world))
    assert torch.equal(allreduce._expected(count, world, "cpu"), brute)
