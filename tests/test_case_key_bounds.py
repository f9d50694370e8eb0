"""The keys of a case ID that were bounded only by --timeout: emulated times (compute, a link's
round trip, the fault proxy's delay, jitter and stall, a coalescing window, moe's placement window)
and kv_alloc's request count and block size. Each is refused when the case ID is read, naming the
key and its range; a replay whose allocator log would outgrow memory stops as a failed record
naming its bound."""
from __future__ import annotations

import pytest

from conftest import run_cli

from harness.core import registry
from harness.core.case import CaseIdError
from harness.core.scale import MAX_EMULATED_US
from harness.core.store import load_records
from harness.kv_alloc import simulator
from harness.kv_alloc.traces import MAX_REQUESTS, MAX_TOKENS

RPC = "rpc/payload_bytes=64,transport=tcp_nodelay"
# window_us is a setting of an open loop that coalesces (mode=openloop with batch) only.
RPC_COALESCED = "rpc/batch=8,mode=openloop,payload_bytes=64,rate_hz=1000,transport=tcp_nodelay"
PIPELINE = ("pipeline/act_bytes=65536,backend=gloo,compute=sleep,compute_us=100,microbatches=4,rtt_us=0,"
            "scenario=x,schedule=gpipe,world=2")
KV = ("kv_alloc/allocator=paged,block_tokens=16,budget_gb=80,model=7b,policy=reserve_max,requests=300,speedup=4.0,"
      "trace=azure_conv")


def _with(case_id: str, key: str, value) -> str:
    family, _, params = case_id.partition("/")
    kept = [p for p in params.split(",") if not p.startswith(f"{key}=")]
    return f"{family}/{','.join(sorted([*kept, f'{key}={value}']))}"


@pytest.mark.parametrize("case_id,key,high", [
    *((RPC, key, MAX_EMULATED_US) for key in ("delay_us", "jitter_us", "stall_us")),
    (RPC_COALESCED, "window_us", MAX_EMULATED_US),
    (PIPELINE, "compute_us", MAX_EMULATED_US),
    (PIPELINE, "rtt_us", MAX_EMULATED_US),
    (KV, "requests", MAX_REQUESTS),
    (KV, "block_tokens", MAX_TOKENS),
])
def test_a_key_past_its_bound_is_refused_when_read_naming_it(case_id, key, high):
    registry.parse(_with(case_id, key, high))  # the bound itself is a case
    with pytest.raises(CaseIdError, match=rf"{key}={high + 1} is not allowed; {key} must be in \[\d+, {high}\]"):
        registry.parse(_with(case_id, key, high + 1))


def test_moes_placement_window_is_held_to_the_same_emulated_bound():
    (case_id,) = [c.id for c in registry.get("moe_a2a").grid(registry.GridOptions())
                  if "mitigation=adaptive" in c.id][:1] or pytest.skip("no adaptive case in the grid")
    with pytest.raises(CaseIdError, match="window_ms"):
        registry.parse(_with(case_id, "window_ms", MAX_EMULATED_US / 1e3 * 10))


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_the_cli_refuses_a_stall_of_a_day_at_once(tmp_path):
    done = run_cli("run", "--case", _with(RPC, "stall_us", 86_400_000_000), "--out", str(tmp_path / "r"))
    assert done.returncode == 2 and "stall_us must be in [0, 10000000]" in done.stderr, done.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_more_requests_than_the_trace_holds_is_a_failed_record_not_a_shorter_replay(tmp_path):
    done = run_cli("run", "--case", _with(KV, "requests", 100_000), "--out", str(tmp_path / "r"))
    assert done.returncode == 1, done.stderr
    (record,) = load_records(tmp_path / "r")
    assert not record.ok and "holds 19366 requests (requests=0 replays them all)" in record.error.message


def test_a_replay_past_its_log_bound_stops_naming_it(monkeypatch):
    from harness.families.kv_alloc import load_trace
    from harness.kv_alloc.factory import make_allocator
    from harness.kv_alloc.workload import MODELS, make_policy

    monkeypatch.setattr(simulator, "MAX_LOG_MALLOCS", 1000)
    trace = load_trace("azure_conv", 300)
    bpt = MODELS["7b"].kv_bytes_per_token
    policy = make_policy("per_block", block_tokens=1)
    alloc = make_allocator("paged", int(80e9), bytes_per_token=bpt, block_tokens=1, trace=trace, policy=policy)
    with pytest.raises(simulator.ReplayTooLarge, match="MAX_LOG_MALLOCS = 1000 allocator mallocs of azure_conv"):
        simulator.simulate(trace, policy, alloc, simulator.SimConfig(bytes_per_token=bpt, speedup=4.0))
