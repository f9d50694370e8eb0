"""Case IDs whose keys are each in bounds but whose buffers together are not: refused at parse."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import derived_record

from harness.cli import main
from harness.core.case import CaseIdError
from harness.core.registry import parse
from harness.core.sizes import MAX_RUN_SIZE_BYTES
from harness.core.store import (
    RECORD_LIMITS,
    RECORD_TOO_LARGE,
    append_record,
    iter_records,
)
from harness.moe_a2a import cli as moe_cli

PIPELINE = ("pipeline/act_bytes={act},backend=gloo,compute=sleep,compute_us=3000,microbatches={mb},rtt_us=400,"
            "scenario=a0_pipeline_barrier,schedule=sync,world=4")


def test_pipeline_refuses_microbatches_times_act_bytes_over_the_run_cap():
    with pytest.raises(CaseIdError) as err:
        parse(PIPELINE.format(act=16777216, mb=100000))
    assert "microbatches=100000" in str(err.value) and "act_bytes=16777216" in str(err.value)
    assert "MAX_RUN_SIZE_BYTES" in str(err.value)


def test_pipeline_keeps_a_stash_at_the_run_cap():
    act = 1 << 20
    assert parse(PIPELINE.format(act=act, mb=MAX_RUN_SIZE_BYTES // act)).params["microbatches"] == 16384


MOE = ("moe_a2a/backend=gloo,bytes_per_elem=4,compute=sleep,expert_bytes={expert_bytes},experts_per_rank={epr},"
       "hidden={hidden},mitigation=none,ns_per_token=20000.0,seed=0,skew=0.0,tokens={tokens},top_k=2,"
       "workload=uniform,world=4")


def _moe(epr=8, hidden=256, tokens=256, expert_bytes=262144):
    return MOE.format(epr=epr, hidden=hidden, tokens=tokens, expert_bytes=expert_bytes)


def test_moe_refuses_receive_rows_over_the_run_cap():
    # 1M tokens x 2 x 4 ranks x 1024 x 4 bytes = 32 GiB a receive buffer
    with pytest.raises(CaseIdError) as err:
        parse(_moe(hidden=1024, tokens=1 << 20))
    assert "tokens=1048576" in str(err.value) and "hidden=1024" in str(err.value)
    assert "MAX_RUN_SIZE_BYTES" in str(err.value)


def test_moe_refuses_expert_weights_over_the_run_cap():
    # 100,000 slots x 256 KiB of weights each = 24 GiB
    with pytest.raises(CaseIdError, match=r"experts_per_rank=100000 .*MAX_RUN_SIZE_BYTES"):
        parse(_moe(epr=100_000))


def test_moe_keeps_the_cpu_shape():
    assert parse(_moe()).params["tokens"] == 256


def test_moe_refuses_placements_no_record_could_hold():
    # 4 ranks each report 4 x 1M slots: 16M values, more than a record's reader loads
    with pytest.raises(CaseIdError, match=r"experts_per_rank=1000000 .*MAX_PLACEMENT_VALUES"):
        parse(_moe(epr=1_000_000, hidden=1, expert_bytes=0))


def test_a_record_past_what_a_reader_loads_is_written_as_a_failed_record_and_the_run_goes_on(tmp_path):
    case_id = "selftest/fault_rank=0,mode=noop,world=1"
    huge = derived_record(case_id, [1000] * 3, extra={"placement_final": [0] * RECORD_LIMITS.values})
    path = tmp_path / "results.jsonl"
    append_record(path, huge)
    append_record(path, derived_record(case_id, [1000] * 3))
    first, second = list(iter_records(path))
    assert first.status == "failed" and first.error.kind == RECORD_TOO_LARGE
    assert "RECORD_LIMITS" in first.error.message and first.extra == {} and first.samples_ns == ()
    assert second.status == "ok"


RUN = Path(__file__).parent / "fixtures" / "run_mixed"


@pytest.mark.parametrize("bound,value,named", [("MAX_TOKENS", 100, "tokens=256"), ("MAX_MODELLED_WORLD", 2, "world=4"),
                                               ("MAX_SLOTS", 16, "MAX_SLOTS")])
def test_moe_sim_from_run_holds_the_runs_shape_to_moe_sims_bounds(tmp_path, capsys, monkeypatch, bound, value, named):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    monkeypatch.setattr(moe_cli, bound, value)  # the fixture's shape (256 tokens, 4 ranks, 36 slots) past it
    assert main(["moe-sim", "--from-run", str(run)]) == 2
    err = capsys.readouterr().err
    assert named in err and bound in err and "Traceback" not in err


def test_moe_sim_from_run_still_runs_the_fixture(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    assert main(["moe-sim", "--from-run", str(run)]) == 0
