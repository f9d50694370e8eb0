"""The rpc family through the seam: grid, setup/step/check, failing checks, and one CLI run."""
from __future__ import annotations

import json

import pytest

from harness.core import registry
from harness.run.driver import time_iterations
from harness.core.family import GridOptions, RankContext
from harness.families import rpc

CTX = RankContext(rank=0, world=1, local_rank=0, backend="gloo", device=None)


@pytest.mark.parametrize("profile", ["quick", "full"])
def test_grid_ids_are_unique_round_trip_and_never_pickle(profile):
    cases = rpc.FAMILY.grid(GridOptions(profile=profile))
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids))
    assert all(registry.parse(i) == c for i, c in zip(ids, cases))
    assert all(c.params.get("codec") != "pickle" for c in cases)
    assert all("world" not in c.params for c in cases)


def test_quick_has_the_named_scenarios():
    ids = {c.id for c in rpc.FAMILY.grid(GridOptions())}
    assert "rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=tcp_nagle_split" in ids
    assert "rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=tcp_nodelay_split" in ids
    assert any("stall_every" in i and "openloop" in i for i in ids)


def run_case(case_id: str, iters: int = 20):
    case = registry.parse(case_id)
    state = rpc.setup(CTX, case)
    try:
        # The driver's path: the family's own loop for open-loop cases, the driver's timer otherwise.
        samples, _timer = time_iterations(rpc.FAMILY, CTX, __import__("time").perf_counter_ns, state, iters)
        result = rpc.check(state)
        report = rpc.report(state)
    finally:
        rpc.teardown(state)
    return state, samples, result, report


@pytest.mark.integration
@pytest.mark.parametrize("case_id", [
    "rpc/codec=msgpack,mode=pingpong,preset=specdec_round,transport=uds",
    "rpc/codec=raw,inflight=4,mode=pipelined,payload_bytes=512,transport=shm",
    "rpc/batch=4,codec=raw,mode=batched,payload_bytes=1024,transport=zmq_dealer_ipc",
    "rpc/batch=4,codec=raw,mode=openloop,payload_bytes=64,rate_hz=4000,transport=tcp_nodelay,window_us=500",
    "rpc/codec=pickle,mode=pingpong,preset=tool_call,transport=tcp_nodelay",
])
def test_cases_pass_their_check(case_id):
    state, samples, result, report = run_case(case_id)
    assert len(samples) == 20 and (samples > 0).all()
    assert result.passed and result.checked >= 4, result
    metrics = rpc.metrics(state.case, __import__("harness.core.stats", fromlist=["Summary"]).Summary.of(samples), [report])
    if state.codec.name != "raw":
        assert metrics["encode_us"] > 0 and metrics["decode_us"] > 0
    if state.mode == "openloop":
        assert "uncorrected_p99_us" in metrics and metrics["rtt_p99_us"] >= metrics["uncorrected_p99_us"] * 0.999


@pytest.mark.integration
def test_check_fails_when_the_echo_is_altered():
    case = registry.parse("rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=tcp_nodelay")
    state = rpc.setup(CTX, case)
    try:
        honest = state.client.request

        def corrupting(body: bytes) -> bytes:
            reply = honest(body)
            return reply[:-1] + bytes([reply[-1] ^ 1])

        state.client.request = corrupting
        result = rpc.check(state)
    finally:
        rpc.teardown(state)
    assert not result.passed and result.wrong >= 3, result


def test_bad_params_are_refused_by_name_when_the_id_is_parsed():
    from harness.core.case import CaseIdError

    for case_id, why in (
        ("rpc/codec=raw,payload_bytes=64,transport=carrier_pigeon", "transport must be one of tcp_nodelay"),
        ("rpc/codec=json,transport=tcp_nodelay", "needs a preset"),
        ("rpc/codec=raw,mode=pipelined,payload_bytes=64,transport=http_keepalive", "cannot keep requests in flight"),
        ("rpc/codec=raw,hops=1,payload_bytes=64,transport=shm", "cannot sit behind a proxy"),
        ("rpc/codec=raw,payload_bytes=64,stall_every=5,stall_us=10,transport=grpc_unary", "cannot sit behind a proxy"),
    ):
        with pytest.raises(CaseIdError, match=why):
            registry.parse(case_id)


@pytest.mark.integration
def test_cli_run_writes_a_passing_record(tmp_path):
    from harness.cli import main

    case_id = "rpc/codec=raw,mode=openloop,payload_bytes=256,rate_hz=2000,stall_every=50,stall_us=10000,transport=uds"
    out = tmp_path / "run"
    assert main(["run", "--case", case_id, "--out", str(out), "--iters", "200", "--warmup", "2"]) == 0
    record = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert record["status"] == "ok" and record["case_id"] == case_id
    m = record["metrics"]
    assert m["rtt_p99_us"] > m["uncorrected_p99_us"]
