"""The same KV event log, replayed with real CUDA tensors through torch's caching allocator, next
to the model's prediction (``harness.kv_alloc.caching``) at the same checkpoints.

Each malloc of the log is ``torch.empty(size, dtype=torch.uint8, device="cuda")`` and each free
drops the tensor (on one stream, so a block is reusable as soon as it is freed, as in the model).
The budget is ``torch.cuda.set_per_process_memory_fraction(budget / device total)``. At
``checkpoints`` evenly spaced ops, ``torch.cuda.memory_stats()`` is read (``reserved_bytes``,
``allocated_bytes``, ``requested_bytes``, ``inactive_split_bytes`` of the aggregate pool,
``num_alloc_retries``, ``num_ooms``) and so are the model's figures under the same names
(``CachingAllocator.torch_stats``). A malloc that the real allocator refuses is counted and its
free skipped; the model's replay does the same.

``expandable_segments`` is read when the allocator is first used, so each setting runs in a
process of its own (``python -m harness.kv_alloc.gpu_replay``, which sets
``PYTORCH_CUDA_ALLOC_CONF`` before importing torch). Without a CUDA device it reports why and
does nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Optional, Sequence

import numpy as np

from harness.core import atomic
from harness.core.options import at_least, integer, path_option, positive
from harness.kv_alloc.base import OutOfMemory
from harness.kv_alloc.caching import CachingAllocator
from harness.kv_alloc.simulator import SimConfig, simulate
from harness.kv_alloc.traces import MAX_REQUESTS, load_azure
from harness.kv_alloc.workload import MODELS, make_policy

STAT_KEYS = ("reserved_bytes", "allocated_bytes", "requested_bytes", "inactive_split_bytes")
COUNTER_KEYS = ("num_alloc_retries", "num_ooms")


def cuda_unavailable_reason() -> Optional[str]:
    """None when a CUDA device can run the replay, else why not."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        return f"torch cannot be imported: {exc}"
    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__}, cuda build {torch.version.cuda})"
    return None


def event_log(trace: str, requests: int, policy: str, model: str, budget_bytes: int, speedup: float):
    """The log the model's simulation (caching allocator, same budget) produces."""
    tr = load_azure(trace).head(requests) if requests else load_azure(trace)
    bpt = MODELS[model].kv_bytes_per_token
    sim = simulate(tr, make_policy(policy), CachingAllocator(budget_bytes), SimConfig(bytes_per_token=bpt, speedup=speedup))
    return sim.event_ids.tolist(), sim.event_sizes.tolist()


def _marks(n: int, checkpoints: int) -> set[int]:
    return set(np.linspace(0, n - 1, checkpoints).astype(int).tolist()) if n else set()


def replay_model(ids: Sequence[int], sizes: Sequence[int], budget_bytes: int, expandable: bool,
                 checkpoints: int) -> list[dict]:
    alloc = CachingAllocator(budget_bytes, expandable_segments=expandable)
    handles: dict[int, Optional[int]] = {}
    marks, out = _marks(len(ids), checkpoints), []
    for i, (lid, size) in enumerate(zip(ids, sizes)):
        if size:
            try:
                handles[lid] = alloc.malloc(size)
            except OutOfMemory:
                handles[lid] = None
        else:
            h = handles.pop(lid)
            if h is not None:
                alloc.free(h)
        if i in marks:
            out.append({"op": i, **alloc.torch_stats()})
    return out


def replay_cuda(ids: Sequence[int], sizes: Sequence[int], budget_bytes: int, checkpoints: int) -> list[dict]:
    import torch

    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, budget_bytes / total))
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    tensors: dict[int, Optional[torch.Tensor]] = {}
    marks, out = _marks(len(ids), checkpoints), []
    for i, (lid, size) in enumerate(zip(ids, sizes)):
        if size:
            try:
                tensors[lid] = torch.empty(size, dtype=torch.uint8, device="cuda")
            except torch.cuda.OutOfMemoryError:
                tensors[lid] = None
        else:
            tensors.pop(lid)
        if i in marks:
            s = torch.cuda.memory_stats()
            row = {"op": i}
            row.update({k: int(s.get(f"{k}.all.current", 0)) for k in STAT_KEYS})
            row.update({k: int(s.get(k, 0)) for k in COUNTER_KEYS})
            out.append(row)
    tensors.clear()
    torch.cuda.synchronize()
    return out


def compare(measured: list[dict], modelled: list[dict]) -> dict:
    """Per statistic: the largest absolute difference over the checkpoints, and at the last one."""
    summary = {}
    for key in STAT_KEYS + COUNTER_KEYS:
        diffs = [m[key] - p[key] for m, p in zip(measured, modelled)]
        summary[key] = {"max_abs_diff": max((abs(d) for d in diffs), default=0), "last_measured": measured[-1][key]
                        if measured else 0, "last_model": modelled[-1][key] if modelled else 0}
    return summary


def run_one(args) -> dict:
    budget = int(args.budget_gb * 1e9)
    ids, sizes = event_log(args.trace, args.requests, args.policy, args.model, budget, args.speedup)
    modelled = replay_model(ids, sizes, budget, args.expandable, args.checkpoints)
    reason = cuda_unavailable_reason()
    result = {
        "source": "gpu: real tensors through torch's CUDA caching allocator, beside the model's prediction",
        "params": {k: getattr(args, k) for k in ("trace", "requests", "policy", "model", "budget_gb", "speedup",
                                                 "expandable", "checkpoints")},
        "events": len(ids), "model": modelled,
    }
    if reason:
        result["skipped"] = reason
        return result
    import torch

    result["torch"] = torch.__version__
    result["device"] = torch.cuda.get_device_name(0)
    result["alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    result["measured"] = replay_cuda(ids, sizes, budget, args.checkpoints)
    result["comparison"] = compare(result["measured"], modelled)
    return result


MAX_BUDGET_GB = 4096.0  # of device memory
MAX_SPEEDUP = 1e6
MAX_CHECKPOINTS = 10_000


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.kv_alloc.gpu_replay", description=__doc__.splitlines()[0])
    p.add_argument("--trace", default="azure_conv", choices=("azure_conv", "azure_code"))
    p.add_argument("--requests", type=at_least(1, MAX_REQUESTS), default=300)
    p.add_argument("--policy", default="per_block", choices=("reserve_max", "grow_chunk", "per_block"))
    p.add_argument("--model", default="7b", choices=tuple(MODELS))
    p.add_argument("--budget-gb", dest="budget_gb", type=positive(float, MAX_BUDGET_GB), default=80.0)
    p.add_argument("--speedup", type=positive(float, MAX_SPEEDUP), default=4.0)
    p.add_argument("--checkpoints", type=at_least(1, MAX_CHECKPOINTS), default=32)
    p.add_argument("--expandable", type=integer, choices=(0, 1), default=None,
                   help="one setting in this process; omitted: both, each in a child process")
    p.add_argument("--out", type=path_option, help="write the JSON here (default: stdout)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.expandable is None:
        results = []
        for flag in (0, 1):
            env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=f"expandable_segments:{'True' if flag else 'False'}")
            cmd = [sys.executable, "-m", "harness.kv_alloc.gpu_replay", "--expandable", str(flag)]
            for key in ("trace", "requests", "policy", "model", "budget_gb", "speedup", "checkpoints"):
                cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return proc.returncode
            results.append(json.loads(proc.stdout))
        text = atomic.strict_json(results, args.out or "stdout", indent=1, sort_keys=False)
    else:
        args.expandable = bool(args.expandable)
        text = atomic.strict_json(run_one(args), args.out or "stdout", indent=1, sort_keys=False)
    if args.out:
        atomic.write_text(args.out, text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
