"""Analytical formulas against hand-computed values, and the program evaluator against them."""
from __future__ import annotations

import pytest

from harness.pipeline import model

approx = pytest.approx


def test_fill_drain_bubble_hand_computed():
    assert model.fill_drain_bubble(4, 8) == approx(3 / 11)
    assert model.fill_drain_bubble(1, 8) == 0.0
    assert model.bubble_over_ideal(4, 8) == approx(0.375)


def test_sync_tax_reproduces_the_articles_arithmetic():
    # A0.sync_tax: 5 ms compute + 1 ms synchronous message -> 5/6 = 83 %.
    assert model.sync_efficiency(5.0, 1.0) == approx(0.8333, abs=1e-4)
    # A0.pipeline_barrier: 4 stages, 0.4 ms round trip; a chain barrier exposes 3 round trips,
    # 3 / (3 + 1.2) = 71 %, i.e. the reported ~30 % loss.
    assert model.chain_barrier_exposed_s(4, 0.4) == approx(1.2)
    assert model.sync_efficiency(3.0, model.chain_barrier_exposed_s(4, 0.4)) == approx(0.7143, abs=1e-4)


def test_closed_form_step_times_hand_computed():
    # GPipe, P=4, M=8, tf=1, tb=2, hop 0.1: (8+3)*3 + 2*3*0.1 = 33.6
    assert model.training_step_s(4, 8, 1.0, 2.0, 0.1) == approx(33.6)
    # async, P=4, M=8, tc=3, hop 0.2: 11*3 + 4*0.2 = 33.8 (P-1 hops in, 1 return hop)
    assert model.async_step_s(4, 8, 3.0, 0.2) == approx(33.8)
    # sync, P=2, M=8, tc=5, rtt 1: 9 ticks * (5 + 1) = 54
    assert model.sync_step_s(2, 8, 5.0, 1.0) == approx(54.0)


@pytest.mark.parametrize("P,M", [(2, 1), (3, 5), (4, 8), (6, 4)])
def test_evaluator_matches_gpipe_closed_form(P, M):
    cost = model.Cost(1.0, 2.0, emulated_one_way_s=0.25)
    predicted = model.evaluate("gpipe", P, M, cost)
    assert predicted.step_s == approx(model.training_step_s(P, M, 1.0, 2.0, 0.25))


@pytest.mark.parametrize("P,M", [(2, 1), (3, 5), (4, 8)])
def test_evaluator_matches_async_closed_form(P, M):
    predicted = model.evaluate("async", P, M, model.Cost(3.0, 0.0, emulated_one_way_s=0.2))
    assert predicted.step_s == approx(model.async_step_s(P, M, 3.0, 0.2))


def test_evaluator_sync_tick_is_compute_plus_p_minus_1_round_trips():
    # Each extra microbatch adds one steady-state tick: 3 + 3 * 0.4 = 4.2
    cost = model.Cost(3.0, 0.0, emulated_one_way_s=0.2)
    tick = model.evaluate("sync", 4, 21, cost).step_s - model.evaluate("sync", 4, 20, cost).step_s
    assert tick == approx(4.2)
    cost2 = model.Cost(5.0, 0.0, emulated_one_way_s=0.5)
    tick2 = model.evaluate("sync", 2, 21, cost2).step_s - model.evaluate("sync", 2, 20, cost2).step_s
    assert 5.0 / tick2 == approx(5 / 6)


def test_evaluator_zero_latency_bubble_is_the_fill_drain_formula():
    for schedule in ("gpipe", "1f1b"):
        predicted = model.evaluate(schedule, 4, 8, model.Cost(1.0, 2.0))
        assert predicted.step_s == approx(33.0)
        assert predicted.bubble_idle_share == approx(3 / 11)
    assert model.evaluate("async", 4, 8, model.Cost(1.0, 0.0)).bubble_idle_share == approx(3 / 11)


def test_hop_is_the_larger_of_emulated_and_base():
    assert model.Cost(1, 1, emulated_one_way_s=0.2, base_one_way_s=0.05).hop_s == 0.2
    assert model.Cost(1, 1, emulated_one_way_s=0.0, base_one_way_s=0.05).hop_s == 0.05


def test_one_f_one_b_pays_more_for_latency_than_gpipe():
    # Its steady state alternates directions, so a hop is on the critical path more often.
    cost = model.Cost(1.0, 2.0, emulated_one_way_s=0.5)
    assert model.evaluate("1f1b", 4, 8, cost).step_s > model.evaluate("gpipe", 4, 8, cost).step_s
