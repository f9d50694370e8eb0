"""Schedule orders against the published ones, and the per-stage programs' message pairing."""
from __future__ import annotations

from collections import defaultdict

import pytest

from harness.pipeline import model
from harness.pipeline.schedule import (SCHEDULES, Batch, Recv, Send, Work, gpipe_order, max_stashed, messages,
                                       one_f_one_b_order, program)


def _names(order: list[Work]) -> str:
    return " ".join(str(w) for w in order)


def test_gpipe_order_is_all_forward_then_all_backward():
    # Narayanan et al. 2021, fig. 3 (top): every device runs F1..F8 then B1..B8 (0-based here).
    for stage in range(4):
        assert _names(gpipe_order(4, 8, stage)) == (
            "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7"
        )


# Narayanan et al. 2021, fig. 4 (top), 4 devices and 8 microbatches, transcribed 0-based.
PUBLISHED_1F1B_P4_M8 = {
    0: "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
    1: "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
    2: "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
    3: "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
}


@pytest.mark.parametrize("stage", range(4))
def test_1f1b_order_matches_published_figure(stage):
    assert _names(one_f_one_b_order(4, 8, stage)) == PUBLISHED_1F1B_P4_M8[stage]


def test_1f1b_with_fewer_microbatches_than_stages():
    # Warm-up is capped by M: stage 0 of 4 with M=2 runs both forwards, then both backwards.
    assert _names(one_f_one_b_order(4, 2, 0)) == "F0 F1 B0 B1"
    assert _names(one_f_one_b_order(4, 2, 3)) == "F0 B0 F1 B1"


def test_activation_stash_gpipe_m_vs_1f1b_p_minus_s():
    for stage in range(4):
        assert max_stashed(gpipe_order(4, 8, stage)) == 8
        assert max_stashed(one_f_one_b_order(4, 8, stage)) == 4 - stage


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("stages,microbatches", [(1, 1), (2, 1), (2, 5), (3, 2), (4, 8), (5, 3)])
def test_each_link_sends_exactly_what_its_receiver_expects_in_order(schedule, stages, microbatches):
    # gloo and NCCL match point-to-point messages per (src, dst) in posting order, so the
    # sequence of keys sent on a link must equal the sequence the other end receives.
    sent, received = defaultdict(list), defaultdict(list)
    for s in range(stages):
        for op in messages(program(schedule, stages, microbatches, s)):
            if isinstance(op, Send):
                sent[(s, op.peer)].append(op.key)
            else:
                received[(op.peer, s)].append(op.key)
    assert dict(sent) == dict(received)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("stages,microbatches", [(2, 1), (3, 4), (4, 8), (6, 2)])
def test_programs_complete_under_rendezvous_semantics(schedule, stages, microbatches):
    # evaluate() raises ScheduleDeadlock if a blocking send or receive can never be matched.
    prediction = model.evaluate(schedule, stages, microbatches, model.Cost(1.0, 2.0, 0.3, 0.1))
    assert prediction.step_s > 0


def test_every_microbatch_is_computed_once_per_stage():
    for schedule in SCHEDULES:
        for s in range(3):
            prog = program(schedule, 3, 4, s)
            works = [a.work for a in prog if type(a).__name__ == "Compute"]
            forwards = sorted(w.mb for w in works if w.kind == "F")
            assert forwards == [0, 1, 2, 3], (schedule, s)
            backwards = sorted(w.mb for w in works if w.kind == "B")
            assert backwards == ([0, 1, 2, 3] if schedule in ("gpipe", "1f1b") else []), (schedule, s)


def test_async_posts_next_receive_before_computing():
    prog = program("async", 3, 4, 1)
    names = [(type(a).__name__, getattr(getattr(a, "key", None), "index", None)) for a in prog]
    computes = [n for n, a in enumerate(prog) if type(a).__name__ == "Compute"]
    # the receive of microbatch i+1 is posted after i arrived and before i is computed
    for i in range(3):
        assert names.index(("WaitRecv", i)) < names.index(("Recv", i + 1)) < computes[i]
    # and never more than one receive ahead: two buffers
    assert names.index(("Recv", 2)) > computes[0]


def test_1f1b_batches_send_with_next_receive():
    assert any(isinstance(a, Batch) for a in program("1f1b", 4, 8, 1))
    assert not any(isinstance(a, Batch) for a in program("gpipe", 4, 8, 1))


def test_sync_uses_blocking_operations_only():
    for s in range(3):
        for op in messages(program("sync", 3, 4, s)):
            assert op.blocking, op


def test_unknown_schedule_and_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="schedule must be one of"):
        program("zb-h1", 2, 2, 0)
    with pytest.raises(ValueError, match="stage 4 out of range"):
        program("sync", 4, 2, 4)
    with pytest.raises(ValueError, match="microbatches >= 1"):
        gpipe_order(2, 0, 0)


def test_deadlocking_programs_are_reported():
    from harness.pipeline.schedule import Key

    # Both stages wait for the other first: a classic send/recv deadlock under rendezvous.
    a = [Recv(Key("act", 0), 1, blocking=True), Send(Key("act", 0), 1, blocking=True)]
    b = [Recv(Key("act", 0), 0, blocking=True), Send(Key("act", 0), 0, blocking=True)]
    with pytest.raises(model.ScheduleDeadlock, match="stage 0"):
        model.evaluate_programs([a, b], model.Cost(1.0, 1.0))
