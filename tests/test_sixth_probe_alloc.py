"""Case IDs whose keys are each in bounds but whose buffers together are not: refused at parse."""
from __future__ import annotations

import pytest

from harness.core.case import CaseIdError
from harness.core.registry import parse
from harness.core.sizes import MAX_RUN_SIZE_BYTES

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
