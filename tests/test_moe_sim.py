"""The MODELLED MoE step: its all-to-all cost model, loads and the claims' shape."""
from __future__ import annotations

import numpy as np
import pytest

from harness.cli import main
from harness.moe_a2a import sim
from harness.moe_a2a.workloads import Shape, Workload

CFG = sim.SimConfig(tokens=512, hidden=1024, experts=64, top_k=4)
ONE_TIER = sim.CostModel(ranks_per_node=64, intra=sim.LinkTier("t", 0.0, 1.0), msg_overhead_us=0.0)


def test_alltoall_of_equal_messages_costs_bytes_over_bandwidth():
    # 4 ranks, 1000 bytes to each other rank at 1 GB/s (1000 bytes/us) and 2 us latency: the
    # rotated schedule never makes two senders share a receiver, so 3 messages back to back.
    model = sim.CostModel(ranks_per_node=4, intra=sim.LinkTier("t", 2.0, 1.0), msg_overhead_us=0.0)
    nbytes = np.full((4, 4), 1000)
    np.fill_diagonal(nbytes, 0)
    done, messages = sim.alltoall(np.zeros(4), nbytes, model)
    assert messages == 12
    assert done == pytest.approx(np.full(4, 3 * 1.0 + 2.0))


def test_inter_node_tier_is_slower():
    model = sim.CostModel(ranks_per_node=2, intra=sim.LinkTier("a", 0.0, 10.0), inter=sim.LinkTier("b", 0.0, 1.0),
                          msg_overhead_us=0.0)
    nbytes = np.zeros((4, 4))
    nbytes[0, 1] = nbytes[2, 0] = 1000
    done, _ = sim.alltoall(np.zeros(4), nbytes, model)
    assert done[1] == pytest.approx(0.1) and done[0] == pytest.approx(1.0)


@pytest.fixture(scope="module")
def scenarios():
    return {s.name: s for s in sim.simulate(8, CFG, ONE_TIER)}


def test_uniform_load_has_maxvio_near_zero(scenarios):
    assert scenarios["uniform"].rank_max_over_mean == pytest.approx(1.0, abs=0.01)
    assert scenarios["uniform"].rel_throughput == 1.0
    assert all(s.source == "model" for s in scenarios.values())


def test_hot_expert_gives_the_expected_max_over_mean(scenarios):
    # 64 experts over 8 ranks, one at 17x: the hot rank holds 17 + 7 = 24 units of a mean of
    # (64 + 16) / 8 = 10, so max/mean = 2.4 (up to rounding of pairs).
    assert scenarios["hot"].rank_max_over_mean == pytest.approx(2.4, rel=0.02)
    # Expert time dominates at 0.2 us/pair here, so throughput falls towards mean/max.
    assert scenarios["hot"].rel_throughput < 0.7
    # Replication with load-aware placement recovers most of it.
    assert scenarios["replicate-aware"].rel_throughput > 0.85
    assert scenarios["capacity-drop"].dropped_fraction > 0


def test_window_trades_staleness_for_recompute_cost(scenarios):
    # A recompute (2 ms) far longer than a step: recomputing every step is worse than a window.
    assert scenarios["adaptive-step"].rel_throughput < scenarios["adaptive-100ms"].rel_throughput


def test_naive_routing_still_lands_every_pair():
    shape = Shape(64, 8, 2, 4, 2, 4)
    dem = sim.demand(Workload("hot", 17.0), shape)
    from harness.moe_a2a.placement import eplb

    p = eplb(dem.sum(axis=0), 4, 5)
    for how in ("naive", "aware"):
        pairs = sim.route_pairs(dem, p, how)
        assert pairs.sum() == dem.sum()
        per_expert = np.bincount(p.slots.ravel(), weights=pairs.sum(axis=0), minlength=16)
        assert (per_expert == dem.sum(axis=0)).all()


def test_moe_sim_command_writes_modelled_json(tmp_path, capsys):
    out = tmp_path / "sim.json"
    code = main(["moe-sim", "--worlds", "8", "--tokens", "256", "--hidden", "512", "--experts", "64",
                 "--top-k", "4", "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "MODELLED" in text and "A1.moe_skew" in text
    import json

    payload = json.loads(out.read_text())
    assert payload["source"] == "model"
    assert {s["name"] for s in payload["results"]["8"]} >= {"uniform", "hot", "replicate-naive", "adaptive-100ms"}


def test_moe_sim_rejects_a_world_that_does_not_divide_the_experts(capsys):
    assert main(["moe-sim", "--worlds", "7", "--experts", "64"]) == 2
    assert "world 7" in capsys.readouterr().err
