"""The kv_alloc family through the seam: setup/step/check directly, and one case end to end."""
from __future__ import annotations

import json

import pytest

from harness.core import registry
from harness.cli import main
from harness.families import kv_alloc
from harness.core.family import GridOptions
from harness.kv_alloc.base import AllocatorStats

SMALL = dict(block_tokens=16, budget_gb=20, model="7b", requests=60, speedup=4.0, trace="azure_conv")


def test_quick_grid_covers_every_allocator_and_policy():
    cases = kv_alloc.grid(GridOptions("quick"))
    assert {c.params["allocator"] for c in cases} == set(kv_alloc.ALLOCATORS)
    assert {c.params["policy"] for c in cases} == set(kv_alloc.POLICIES)
    for case in cases:
        assert registry.parse(case.id) == case


@pytest.mark.parametrize("allocator", kv_alloc.ALLOCATORS)
def test_setup_step_check_and_metrics(allocator):
    case = kv_alloc.FAMILY.case(allocator=allocator, policy="per_block", **SMALL)
    state = kv_alloc.setup(None, case)
    for _ in range(3):
        kv_alloc.step(state)
    result = kv_alloc.check(state)
    assert result.passed, result.detail
    assert result.checked > 10
    rep = kv_alloc.report(state)
    assert rep["source"].startswith("model")
    assert set(rep["definitions"]) >= {"fragmentation", "external_fragmentation", "internal_waste_fraction"}
    assert len(rep["series"]["step"]) == len(rep["series"]["reserved_gb"]) > 10
    json.dumps(rep)


def test_check_fails_when_the_allocator_misreports(monkeypatch):
    case = kv_alloc.FAMILY.case(allocator="bfc", policy="grow_chunk", **SMALL)
    state = kv_alloc.setup(None, case)
    real = state.make

    def lying(budget):
        alloc = real(budget)
        honest = alloc.stats

        def stats():
            s = honest()
            return AllocatorStats(**{**s.to_dict(), "allocated_bytes": s.allocated_bytes + 512})
        alloc.stats = stats
        return alloc

    state.make = lying
    result = kv_alloc.check(state)
    assert not result.passed and "allocated" in result.detail


def test_bad_parameter_is_named():
    # Refused when the case is built or parsed, before any replay starts.
    with pytest.raises(ValueError, match="allocator must be one of caching, caching_expandable, bfc, slab, paged"):
        kv_alloc.FAMILY.case(allocator="buddy", policy="per_block", **SMALL)


@pytest.mark.integration
def test_one_case_end_to_end(tmp_path):
    case = kv_alloc.FAMILY.case(allocator="paged", policy="reserve_max", **SMALL)
    out = tmp_path / "run"
    assert main(["run", "--case", case.id, "--out", str(out), "--iters", "20", "--warmup", "2"]) == 0
    record = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert record["status"] == "ok"
    assert 0 <= record["metrics"]["fragmentation_mean"] < 1
    assert record["metrics"]["replay_ns_per_op_p50"] > 0
    assert record["extra"]["rank_reports"][0]["source"].startswith("model")
