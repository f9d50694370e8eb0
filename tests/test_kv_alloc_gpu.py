"""Real tensors through torch's CUDA caching allocator vs the model. Skipped without a GPU."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from harness.kv_alloc import gpu_replay
from harness.kv_alloc.base import MiB

REASON = gpu_replay.cuda_unavailable_reason()


def test_without_cuda_the_replay_says_why_and_still_gives_the_model():
    if REASON is None:
        pytest.skip("a CUDA device is present; the GPU test below covers it")
    args = argparse.Namespace(trace="azure_conv", requests=20, policy="per_block", model="7b", budget_gb=20.0,
                              speedup=4.0, expandable=False, checkpoints=4)
    result = gpu_replay.run_one(args)
    assert result["skipped"] == REASON and "no CUDA device" in REASON
    assert len(result["model"]) == 4 and result["model"][-1]["allocated_bytes"] == 0


@pytest.fixture(scope="module")
def gpu_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    # A budget that does not bind (80 requests peak well under 100 GB): the model's block
    # placement should then match torch's exactly.
    proc = subprocess.run([sys.executable, "-m", "harness.kv_alloc.gpu_replay", "--requests", "80",
                           "--budget-gb", "100", "--checkpoints", "16", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


@pytest.mark.skipif(REASON is not None, reason=f"GPU replay needs CUDA: {REASON}")
@pytest.mark.parametrize("expandable", [0, 1])
def test_model_predicts_torch_caching_allocator(gpu_results, expandable):
    result = gpu_results[expandable]
    cmp_ = result["comparison"]
    assert result["measured"][-1]["allocated_bytes"] == 0
    if not expandable:
        assert cmp_["reserved_bytes"]["max_abs_diff"] == 0, cmp_
        assert cmp_["allocated_bytes"]["max_abs_diff"] == 0, cmp_
    else:
        # PyTorch also unmaps free pages inside a segment; the model only at its end.
        assert cmp_["reserved_bytes"]["max_abs_diff"] <= 2 * 20 * MiB * 4, cmp_
    assert cmp_["requested_bytes"]["max_abs_diff"] == 0, cmp_
