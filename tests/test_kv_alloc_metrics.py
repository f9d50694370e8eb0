"""Fragmentation metrics on hand-built layouts, and the simulator's bookkeeping."""
from __future__ import annotations

import numpy as np
import pytest

from harness.kv_alloc import metrics
from harness.kv_alloc.base import MiB
from harness.kv_alloc.bfc import BFCAllocator
from harness.kv_alloc.caching import CachingAllocator
from harness.kv_alloc.paged import PagedAllocator
from harness.kv_alloc.simulator import SimConfig, replay, simulate
from harness.kv_alloc.traces import Trace
from harness.kv_alloc.workload import MODELS, make_policy


def test_definitions_on_numbers():
    assert metrics.fragmentation(100, 68) == pytest.approx(0.32)
    assert metrics.fragmentation(0, 0) == 0.0
    assert metrics.external_fragmentation(10, 40) == pytest.approx(0.75)
    assert metrics.external_fragmentation(0, 0) == 0.0
    assert metrics.internal_waste_fraction(1, 3) == pytest.approx(0.25)


def test_caching_layout_with_a_hole_between_two_live_blocks():
    # One 60 MiB segment: [20 live][20 free][20 live] -> free 20 MiB in one extent.
    alloc = CachingAllocator(1 << 30)
    big = alloc.malloc(60 * MiB)
    alloc.free(big)
    a, b, c = (alloc.malloc(20 * MiB) for _ in range(3))
    alloc.free(b)
    s = alloc.stats()
    assert (s.reserved_bytes, s.allocated_bytes, s.free_bytes) == (60 * MiB, 40 * MiB, 20 * MiB)
    f = metrics.of_stats(s)
    assert f["fragmentation"] == pytest.approx(1 / 3)
    assert f["external_fragmentation"] == 0.0  # all free memory is one extent


def test_external_fragmentation_of_two_separate_holes():
    # [10 free][10 live][30 free][10 live] in one BFC region of 64 MiB: holes of 10 and 34 MiB.
    alloc = BFCAllocator(1 << 30)
    r = alloc.malloc(40 * MiB)  # 64 MiB region (doubling from 2 MiB); 24 MiB split off
    alloc.free(r)
    h = [alloc.malloc(10 * MiB) for _ in range(4)]  # splits at 10, 20, 30, 40 MiB
    alloc.free(h[0])
    alloc.free(h[2])
    s = alloc.stats()
    assert s.free_bytes == 10 * MiB + 10 * MiB + 24 * MiB
    assert s.largest_free_extent_bytes == 24 * MiB  # h[2]'s 10 MiB is not next to the 24 MiB tail
    assert metrics.of_stats(s)["external_fragmentation"] == pytest.approx(1 - 24 / 44)


def test_paged_free_runs_make_the_largest_extent():
    alloc = PagedAllocator(1 << 30, block_bytes=MiB, chunk_bytes=8 * MiB)
    hs = [alloc.malloc(MiB) for _ in range(8)]  # the whole 8-block chunk
    for i in (1, 2, 3, 6):
        alloc.free(hs[i])
    s = alloc.stats()
    assert s.free_bytes == 4 * MiB and s.largest_free_extent_bytes == 3 * MiB


def test_figures_average_over_the_arrival_window():
    series = {
        "step": np.array([0, 10, 20, 30]), "reserved_bytes": np.array([0, 100, 100, 100]),
        "allocated_bytes": np.array([0, 80, 60, 0]), "internal_waste_bytes": np.array([0, 0, 0, 0]),
        "free_bytes": np.array([0, 20, 40, 100]), "largest_free_extent_bytes": np.array([0, 20, 20, 100]),
        "token_bytes": np.array([0, 50, 60, 0]), "running": np.array([0, 2, 2, 0]), "queued": np.array([0, 0, 0, 0]),
    }
    f = metrics.figures(series, peak_reserved_bytes=100, last_arrival_step=20)
    assert f.fragmentation_mean == pytest.approx((0.2 + 0.4) / 2)  # step 30 is after the last arrival
    assert f.fragmentation_loaded == pytest.approx(0.2)  # only step 10 has allocated >= 90 % of its max
    assert f.external_fragmentation_mean == pytest.approx((0 + 0.5) / 2)
    assert f.kv_waste_mean == pytest.approx((0.5 + 0.4) / 2)


def _trace(n=40, seed=1):
    rng = np.random.default_rng(seed)
    return Trace("t", np.sort(rng.uniform(0, 5, n)), rng.integers(20, 400, n), rng.integers(1, 120, n))


@pytest.mark.parametrize("policy", ["reserve_max", "grow_chunk", "per_block"])
def test_simulation_completes_every_request_and_logs_a_balanced_replayable_trace(policy):
    bpt = MODELS["7b"].kv_bytes_per_token
    pol = make_policy(policy, max_new_tokens=128, chunk_tokens=32)
    alloc = CachingAllocator(8 << 30)
    res = simulate(_trace(), pol, alloc, SimConfig(bytes_per_token=bpt, speedup=1.0))
    assert res.completed + res.rejected == res.requests == 40
    assert alloc.stats().allocated_bytes == 0 and res.mallocs == res.frees
    # Every malloc id is freed exactly once, after it was allocated.
    seen = {}
    for i, (lid, size) in enumerate(zip(res.event_ids.tolist(), res.event_sizes.tolist())):
        if size:
            assert lid not in seen
            seen[lid] = i
        else:
            assert lid in seen
            del seen[lid]
    assert not seen
    fresh = CachingAllocator(8 << 30)
    replay(res.event_ids, res.event_sizes, fresh)
    assert fresh.stats().allocated_bytes == 0


def test_tight_budget_makes_growth_oom_and_preempt_but_all_finish():
    bpt = MODELS["7b"].kv_bytes_per_token
    pol = make_policy("per_block", block_tokens=16)
    alloc = PagedAllocator(int(1e9), block_bytes=16 * bpt)
    res = simulate(_trace(60), pol, alloc, SimConfig(bytes_per_token=bpt, speedup=1.0))
    assert res.decode_ooms > 0  # growth outran the budget
    assert res.completed == 60 and res.rejected == 0
    assert max(alloc.stats().peak_reserved_bytes, 0) <= int(1e9)


def test_request_larger_than_budget_is_rejected():
    bpt = MODELS["7b"].kv_bytes_per_token
    trace = Trace("t", np.array([0.0, 0.1]), np.array([100_000, 10]), np.array([5, 5]))
    res = simulate(trace, make_policy("reserve_max", max_new_tokens=16), CachingAllocator(4 << 30),
                   SimConfig(bytes_per_token=bpt))
    assert res.rejected == 1 and res.completed == 1
