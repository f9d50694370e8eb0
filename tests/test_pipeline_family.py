"""pipeline and sendrecv families: correctness at every stage, checks that can fail, a dying stage,
oversubscription reporting. Integration tests spawn ranks through ``harness.cli.main``."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from harness.core import registry
from harness.cli import main
from harness.families import pipeline as pipeline_family
from harness.families import sendrecv
from harness.core.family import RankContext
from harness.core.records import Record
from harness.pipeline import link
from harness.pipeline.executor import Stage
from harness.pipeline.schedule import Key, Recv, messages, program
from harness.core.stats import Summary
from harness.core.store import load_records

SMALL = "act_bytes=4096,backend=gloo,compute=sleep,compute_us=300,microbatches=3"


def _pipeline_id(schedule: str, world: int, rtt_us: int, extra: str = "") -> str:
    return f"pipeline/{SMALL},{extra}rtt_us={rtt_us},scenario=test,schedule={schedule},world={world}"


def _stage(schedule="gpipe", stage=1, stages=3, microbatches=3) -> Stage:
    return Stage(schedule=schedule, stage=stage, stages=stages, microbatches=microbatches, fwd_s=0.0,
                 bwd_s=0.0, one_way_ns=0, act_bytes=4096, compute=link.SleepCompute(), device=torch.device("cpu"))


def _message_as_sent(stage: Stage, key: Key, payload_sum_offset: int = 0) -> torch.Tensor:
    """What a correct upstream stage sends for ``key`` (an activation), built independently."""
    n = stage.payload_n
    v = stage.value(key.index)
    msg = torch.zeros(n + link.HEADER_WORDS, dtype=torch.int64)
    msg[1], msg[2], msg[3] = key.index, stage.step_no, link.KIND_CODES[key.kind]
    # stage 0 writes base + 1 and every forward adds 1: stage s receives v + j + s
    msg[link.HEADER_WORDS:] = torch.arange(n) + v + stage.stage
    msg[link.HEADER_WORDS] += payload_sum_offset
    return msg


def test_stage_verification_accepts_correct_data_and_counts_corruption():
    stage = _stage()
    stage.verify = True
    good = _message_as_sent(stage, Key("act", 1))
    stage._arrived(Key("act", 1), good)
    assert (stage.stats.checked, stage.stats.wrong) == (1, 0)
    stage._arrived(Key("act", 1), _message_as_sent(stage, Key("act", 1), payload_sum_offset=1))
    assert (stage.stats.checked, stage.stats.wrong) == (2, 1)
    assert "checksum" in stage.stats.first_wrong
    wrong_step = good.clone()
    wrong_step[2] += 1  # a message from another step (stale buffer) is wrong even if its payload fits
    stage._arrived(Key("act", 1), wrong_step)
    assert stage.stats.wrong == 2


def test_expected_gradient_follows_the_forward_values():
    stage = _stage(stage=1, stages=3)
    n, v = stage.payload_n, stage.value(2)
    base_sum = n * v + n * (n - 1) // 2
    # last stage output = base + 3; its gradient -(base+3) - 1 reaches stage 1
    assert stage.expected_sum("grad", 2, 1) == -(base_sum + 3 * n) - n


def test_oversubscription_is_flagged_in_metrics_and_table():
    reports = [{"busy_s": 0.8, "wall_s": 1.0, "steps": 10, "computes": 80, "usable_cores": 2,
                "base_one_way_us": 50.0, "loadavg_1min": 1.0}] * 4
    summary = Summary.of(np.full(10, 30_000_000))
    fam = pipeline_family.FAMILY
    spin = fam.case(act_bytes=4096, backend="gloo", compute="spin", compute_us=3000, microbatches=8,
                    rtt_us=400, scenario="x", schedule="async", world=4)
    m = pipeline_family.metrics(spin, summary, reports)
    assert m["oversubscribed"] == 1.0 and m["busy_ranks"] == 4 and m["usable_cores"] == 2
    record = type("R", (), {"metrics": m})()
    assert "OVERSUBSCRIBED 4 spinning/2 cores" in pipeline_family._warn(record)
    sleep = fam.case(**{**spin.params, "compute": "sleep"})
    assert pipeline_family.metrics(sleep, summary, reports)["oversubscribed"] == 0.0


def test_named_scenarios_keep_the_articles_ratios():
    sc = pipeline_family.SCENARIOS
    barrier, tax = sc["a0_pipeline_barrier"], sc["a0_sync_tax"]
    assert (barrier.stages, barrier.compute_us, barrier.rtt_us) == (4, 3000, 400)
    assert (tax.stages, tax.compute_us, tax.rtt_us) == (2, 5000, 1000)
    cases = pipeline_family.grid(pipeline_family.GridOptions(profile="quick"))
    assert {c.params["world"] for c in cases if c.params["scenario"] == "a0_pipeline_barrier"} == {4}
    assert all(registry.parse(c.id) == c for c in cases)


def test_sendrecv_check_fails_on_data_from_the_wrong_rank(monkeypatch):
    ctx = RankContext(rank=0, world=2, local_rank=0, backend="gloo", device=torch.device("cpu"))
    state = sendrecv.State(ctx, torch.zeros(64), torch.zeros(64), ops=[])
    # A "transport" that loops the rank's own data back instead of delivering rank 1's.
    monkeypatch.setattr(sendrecv, "step", lambda st: st.recv.copy_(st.send))
    result = sendrecv.check(state)
    assert result.checked == 64 and result.wrong > 0


def _expected_checked(schedule: str, stages: int, microbatches: int) -> int:
    receives = sum(isinstance(op, Recv) for s in range(stages)
                   for op in messages(program(schedule, stages, microbatches, s)))
    final_grads = microbatches if schedule in ("gpipe", "1f1b") else 0
    return receives + final_grads


@pytest.mark.integration
def test_every_schedule_delivers_correct_data_to_every_stage(tmp_path):
    ids = [_pipeline_id("sync", 3, 200), _pipeline_id("async", 3, 200),
           _pipeline_id("gpipe", 3, 0), _pipeline_id("1f1b", 3, 0)]
    argv = ["run", "--iters", "5", "--warmup", "1", "--timeout", "60", "--out", str(tmp_path / "run")]
    for case_id in ids:
        argv += ["--case", case_id]
    assert main(argv) == 0
    records = load_records(tmp_path / "run")
    assert [r.case_id for r in records] == ids
    for record in records:
        assert record.ok, record.error
        schedule = record.params["schedule"]
        # every message received by every stage was verified (header + checksum), none wrong
        assert record.check.checked == _expected_checked(schedule, 3, 3), schedule
        assert record.check.wrong == 0
        m = record.metrics
        assert m["step_model_us"] > 0 and 0.0 <= m["bubble_idle_share"] < 1.0
        assert m["microbatches_per_s"] == pytest.approx(3 / (record.summary.p50_ns / 1e9))
        reports = record.extra["rank_reports"]
        assert [r["stage"] for r in reports] == [0, 1, 2]
        assert all(r["busy_s"] > 0 and r["wall_s"] >= r["busy_s"] for r in reports)
        assert "bubble_idle_share" in reports[0]["definitions"]
    # the emulated link is labelled, and the sync schedule carries the steady-state sync tax
    assert "emulated" in records[0].extra["rank_reports"][0]["definitions"]["link_latency"]
    assert 0 < records[0].metrics["sync_efficiency_steady_model"] < 1


SENDRECV_IDS = [f"sendrecv/backend=gloo,size_bytes={n},world=2" for n in (4096, 256 << 10)]
DYING_ID = registry.parse(_pipeline_id("async", 2, 0, extra="die_stage=1,")).id  # canonical key order


@pytest.fixture(scope="module")
def world2_run(tmp_path_factory):
    """One 2-rank run shared by the tests below (one pool start, not two): the sendrecv cases,
    then a pipeline whose stage 1 dies mid-pipeline."""
    out = tmp_path_factory.mktemp("world2") / "run"
    argv = ["run", "--timeout", "10", "--warmup", "3", "--iters", "5", "--out", str(out)]
    for case_id in SENDRECV_IDS + [DYING_ID]:
        argv += ["--case", case_id]
    t0 = time.monotonic()
    code = main(argv)
    return code, time.monotonic() - t0, {r.case_id: r for r in load_records(out)}


@pytest.mark.integration
def test_a_stage_dying_mid_pipeline_fails_the_case_within_the_timeout(world2_run):
    code, elapsed, records = world2_run
    assert code == 1
    record = records[DYING_ID]
    assert record.status == "failed"
    assert record.error.rank == 1 and "exited with code 17" in record.error.message
    assert record.wall_s < 10
    assert elapsed < 90  # two cases and pool start-up included; a hang would sit out the timeout


@pytest.mark.integration
def test_sendrecv_sweep_reports_bandwidth_with_factor_one(world2_run):
    _, _, records = world2_run
    for case_id in SENDRECV_IDS:
        record = records[case_id]
        # every element each of the two ranks received, summed over ranks
        assert record.ok and record.check.checked == 2 * record.params["size_bytes"] // 4
        m = record.metrics
        assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"])
        assert m["algbw_gbps"] == pytest.approx(record.params["size_bytes"] / (m["time_us"] * 1e3))


def _record(schedule: str, mb_per_s: float, model_us: float, **metrics) -> Record:
    from harness.core.family import CheckResult

    params = dict(act_bytes=4096, backend="gloo", compute="sleep", compute_us=5000, microbatches=8,
                  rtt_us=1000, scenario="a0_sync_tax", schedule=schedule, world=2)
    return Record(run_id="r", case_id=pipeline_family.FAMILY.case(**params).id, family="pipeline",
                  family_version=1, params=params, status="ok", backend="gloo", world=2, started_at="t",
                  wall_s=1.0, samples_ns=(1000,), check=CheckResult(0, 1),
                  metrics={"microbatches_per_s": mb_per_s, "step_model_us": model_us, **metrics})


def test_compare_pairs_sync_with_async_and_withholds_verdicts_on_distorted_runs():
    from harness.pipeline.compare import compare

    sync = _record("sync", 80.0, 50.0, sync_efficiency_steady_model=5 / 6, compute_stretch=1.0)
    fast = _record("async", 100.0, 40.0, compute_stretch=1.0)
    (c,) = compare([sync, fast])
    assert c.throughput_ratio == pytest.approx(0.8) and c.throughput_ratio_model == pytest.approx(0.8)
    assert c.throughput_ratio_best == pytest.approx(1.0)  # both fabricated records have one 1 us step
    assert c.claim == "A0.sync_tax" and c.claim_efficiency == 0.83 and c.verdict == "confirms"
    (far,) = compare([_record("sync", 50.0, 50.0), fast])
    assert far.verdict == "contradicts"
    (busy,) = compare([_record("sync", 80.0, 50.0, oversubscribed=1.0), fast])
    assert busy.verdict == "not clean here" and "oversubscribed" in busy.distorted
    assert compare([sync]) == []


def test_compare_gives_one_row_per_repetition_in_run_order():
    from harness.pipeline.compare import compare

    rows = compare([_record("sync", 80.0, 50.0), _record("async", 100.0, 40.0),
                    _record("sync", 60.0, 50.0), _record("async", 100.0, 40.0)])
    assert [round(r.throughput_ratio, 2) for r in rows] == [0.8, 0.6]
