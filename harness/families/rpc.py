"""Small-message RPC: what a few-hundred-byte control message costs on each transport.

Every case runs on one rank: ``setup`` starts a real server in its own process (plus forwarding
or fault proxies when asked), waits for it to be ready and connects a client; ``teardown`` stops
it all with a bounded shutdown. The driver times ``step``; open-loop cases own their loop
(``iterate``) so latency can run from each request's intended send time.

Modes (``mode``):
- ``pingpong``: one request, wait for its reply (closed loop). A sample is one round trip.
- ``pipelined``: ``inflight`` requests sent back to back, then their replies. A sample covers all.
- ``batched``: ``batch`` messages packed into one send and one reply. A sample covers all.
- ``openloop``: requests due at ``rate_hz``; a sample is one request's latency from its intended
  send time (coordinated omission corrected); ``batch``/``window_us`` coalesce requests due within
  the window into one send. The uncorrected figures are metrics beside it.

Payload: ``payload_bytes`` of raw bytes (``codec=raw``) or a ``preset`` control message encoded
with ``codec`` (json, msgpack; pickle only when a case names it). Encode and decode are timed
apart from the round trip (``encode_us``, ``decode_us``; ``transport_us`` is the rest).

Correctness: after timing, the echo of the timed payload, of a payload holding every byte value
and of a maximum-size payload must equal what was sent, byte for byte (and decode to the same
object); the server must have counted no malformed, oversized or broken connection.
See docs/rpc.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from harness.core.case import Case, Needs, Param
from harness.core.figures import Figure
from harness.core.family import WRONG_COLUMN, CheckResult, Column, Family, GridOptions, Plot, RankContext
from harness.rpc import openloop, plots, sockperf_ref
from harness.rpc.codecs import CODECS, DEFAULT_CODECS, PRESETS, Codec, codec, every_byte_value, pattern_bytes, preset
from harness.rpc.faults import FaultSpec
from harness.rpc.framing import MAX_FRAME_BYTES, pack_batch, unpack_batch
from harness.rpc.server import COUNTERS
from harness.rpc.transports import TRANSPORTS, Endpoint, info, open_endpoint
from harness.core.scale import MAX_EMULATED_US
from harness.core.stats import Summary

MODES = ("pingpong", "pipelined", "batched", "openloop")
SIZES_BYTES = (64, 256, 512, 1024, 4096)
QUICK_SIZES_BYTES = (64, 256, 4096)
SCENARIO_BYTES = 256
# Nagle stalls cost ~40 ms per round trip: a handful of iterations shows it.
SLOW_TRANSPORTS = ("tcp_nagle_split", "http_keepalive")
# Left out of the quick profile (about 30 s): near-duplicates of a transport that stays in it.
QUICK_SKIP = ("http_newconn_nodelay", "zmq_reqrep_ipc", "zmq_dealer_tcp")
REFERENCES = ("sockperf",)
MAX_INFLIGHT = 4096  # requests a pipelined case keeps in flight
# The counters of a server or proxy that say a frame or a connection broke: the check counts each
# endpoint with any of them wrong, so an ok record's are all zero.
BROKEN_COUNTERS = ("malformed", "oversized", "truncated", "errors")
CODEC_BLOCK = 200  # encode/decode timed in blocks of this many calls (clock cost amortised)
CODEC_BLOCKS = 7
SOCKPERF_S = 1


def _raw(transport: str, size: int, mode: str = "pingpong", **extra) -> Case:
    return FAMILY.case(codec="raw", mode=mode, payload_bytes=size, transport=transport, **extra)


def grid(options: GridOptions) -> list[Case]:
    full = options.profile == "full"
    sizes = options.sizes_bytes or (SIZES_BYTES if full else QUICK_SIZES_BYTES)
    sizes = tuple(s for s in sizes if 1 <= s <= MAX_FRAME_BYTES)
    cases: list[Case] = []
    # Experiment C of the source articles: TCP vs Unix socket vs shared memory, across sizes.
    for transport in ("tcp_nodelay", "uds", "shm"):
        cases += [_raw(transport, size) for size in sizes]
    # The C reference, measured in the same run (its ~3 s is why quick has one size).
    if sockperf_ref.available():
        cases += [_raw("tcp_nodelay", size, reference="sockperf") for size in (sizes if full else (64,))]
    # Every other transport: all sizes in full, the scenario size in quick (Nagle: one size only).
    for transport in TRANSPORTS:
        if transport in ("tcp_nodelay", "uds", "shm") or (not full and transport in QUICK_SKIP):
            continue
        scenario_sizes = sizes if full and transport not in SLOW_TRANSPORTS else (SCENARIO_BYTES,)
        cases += [_raw(transport, size) for size in scenario_sizes]
    # Serialization cost of control messages, JSON vs binary (pickle: only when named).
    for name in PRESETS if full else ("specdec_round", "tool_call"):
        for c in DEFAULT_CODECS:
            if c != "raw":
                cases.append(FAMILY.case(codec=c, mode="pingpong", preset=name, transport="tcp_nodelay"))
    # Sync vs pipelined vs batched.
    for transport in ("tcp_nodelay", "shm") + (("uds", "zmq_dealer_tcp", "grpc_bidi") if full else ()):
        cases.append(_raw(transport, SCENARIO_BYTES, "pipelined", inflight=8))
    for k in (8,) + ((32,) if full else ()):
        cases.append(_raw("tcp_nodelay", SCENARIO_BYTES, "batched", batch=k))
    # Open loop: steady, with injected stalls (corrected vs uncorrected), and coalesced batches.
    cases.append(_raw("tcp_nodelay", SCENARIO_BYTES, "openloop", rate_hz=1000))
    # A 5 ms stall every 50 requests at 1 kHz: even the 50-iteration minimum plan holds one, each
    # delays ~5 requests behind it (corrected p90/p99 show them, the uncorrected ones hide them),
    # and the proxy hop leaves the client well under capacity on a busy 2-core host.
    cases.append(_raw("tcp_nodelay", SCENARIO_BYTES, "openloop", rate_hz=1000, stall_every=50, stall_us=5000))
    if full:
        cases.append(_raw("tcp_nodelay", SCENARIO_BYTES, "openloop", rate_hz=4000, batch=8, window_us=1000))
    # Forwarding hops: each adds a synchronous round trip.
    for hops in (1, 2) if full else (2,):
        cases.append(_raw("tcp_nodelay", SCENARIO_BYTES, hops=hops))
    return cases


@dataclass
class State:
    case: Case
    endpoint: Endpoint
    client: Any
    mode: str
    codec: Codec
    message: Any  # what the client sends: bytes for raw, a preset object otherwise
    body: bytes  # the message encoded
    batch_body: bytes = b""
    inflight: int = 1
    batch: int = 1
    rate_hz: float = 0.0
    window_ns: int = 0
    msgs_per_iter: int = 1
    uncorrected_ns: Optional[np.ndarray] = None
    send_lag_ns: Optional[np.ndarray] = None
    late_sends: int = 0
    batch_bodies: dict = field(default_factory=dict)


def validate(case: Case) -> None:
    """The rules that join parameters; each key's own bounds are its Param's."""
    p = case.params
    mode, c = FAMILY.value(case, "mode"), FAMILY.value(case, "codec")
    if c == "raw" and "payload_bytes" not in p:
        raise ValueError("codec=raw needs payload_bytes")
    if c != "raw" and "preset" not in p:
        raise ValueError(f"codec={c} needs a preset ({', '.join(PRESETS)})")
    if mode == "pipelined" and not info(p["transport"]).pipelines:
        raise ValueError(f"transport {p['transport']!r} cannot keep requests in flight (mode=pipelined)")
    faulted = any(FAMILY.value(case, k) for k in ("delay_us", "jitter_us", "stall_every", "stall_us"))
    if (FAMILY.value(case, "hops") or faulted) and not info(p["transport"]).proxiable:
        raise ValueError(f"transport {p['transport']!r} cannot sit behind a proxy (framed TCP/Unix transports only)")
    if mode == "openloop" and "rate_hz" not in p:
        raise ValueError("mode=openloop needs rate_hz")
    if FAMILY.value(case, "window_us") and "batch" not in p:
        raise ValueError("key 'window_us' is a setting of mode=openloop with batch only; this case has no batch")
    if "reference" in p and (p["transport"] != "tcp_nodelay" or mode != "pingpong" or c != "raw"):
        raise ValueError("reference=sockperf compares a raw TCP_NODELAY ping-pong only")


def msgs_per_iter(case: Case) -> int:
    """Messages one sample covers: the requests in flight (pipelined), a batch's (batched, 8 by
    default), else one (an open-loop sample is one request however many a send coalesces)."""
    mode = FAMILY.value(case, "mode")
    if mode == "pipelined":
        return FAMILY.value(case, "inflight")
    if mode == "batched":
        return case.params.get("batch", 8)
    return 1


def _faults(case: Case) -> Optional[FaultSpec]:
    values = {k: FAMILY.value(case, k) for k in ("delay_us", "jitter_us", "stall_every", "stall_us")}
    return FaultSpec(**values) if any(values.values()) else None


def setup(ctx: RankContext, case: Case) -> State:
    p = case.params
    if "reference" in p and not sockperf_ref.available():
        raise FileNotFoundError("reference=sockperf: sockperf is not on PATH (Debian/Ubuntu: apt-get install sockperf)")
    cdc = codec(FAMILY.value(case, "codec"))
    message = pattern_bytes(p["payload_bytes"]) if cdc.name == "raw" else preset(p["preset"])
    body = cdc.encode(message)
    endpoint = open_endpoint(p["transport"], hops=FAMILY.value(case, "hops"), faults=_faults(case))
    state = State(case, endpoint, endpoint.client, FAMILY.value(case, "mode"), cdc, message, body)
    try:
        state.msgs_per_iter = msgs_per_iter(case)
        if state.mode == "pipelined":
            state.inflight = state.msgs_per_iter
        elif state.mode == "batched":
            state.batch = state.msgs_per_iter
            state.batch_body = pack_batch([body] * state.batch)
        elif state.mode == "openloop":
            state.rate_hz = float(p["rate_hz"])
            state.batch = p.get("batch", 1)
            state.window_ns = FAMILY.value(case, "window_us") * 1000
            state.batch_bodies = {n: pack_batch([body] * n) for n in range(2, state.batch + 1)}
        if len(state.batch_body) > MAX_FRAME_BYTES or any(len(b) > MAX_FRAME_BYTES for b in state.batch_bodies.values()):
            raise ValueError(f"a batch of {state.batch} x {len(body)} B exceeds the {MAX_FRAME_BYTES} B frame bound")
        state.client.request(body)  # ready-check through the whole path, outside timing
    except BaseException:
        endpoint.close()
        raise
    return state


def step(state: State) -> None:
    mode = state.mode
    if mode == "pingpong":
        if state.codec.name == "raw":
            state.client.request(state.body)
        else:
            state.codec.decode(state.client.request(state.codec.encode(state.message)))
    elif mode == "pipelined":
        client, body = state.client, state.body
        for _ in range(state.inflight):
            client.send(body)
        for _ in range(state.inflight):
            client.recv()
    elif mode == "batched":
        state.client.request(state.batch_body)
    else:
        _send_open_loop(state, 1)


def _send_open_loop(state: State, n: int) -> None:
    if n == 1:
        state.client.request(state.body)
    else:
        state.client.request(state.batch_bodies[n])


def iterate(state: State, iters: int, clock) -> np.ndarray | None:
    if state.mode != "openloop":
        return None  # closed-loop modes: the driver's own per-iteration timer
    result = openloop.run(lambda n: _send_open_loop(state, n), iters, state.rate_hz, clock,
                          batch=state.batch, window_ns=state.window_ns)
    state.uncorrected_ns = result.uncorrected_ns
    state.send_lag_ns = result.send_lag_ns
    state.late_sends = result.late_sends
    return result.corrected_ns


def _round_trip(state: State, body: bytes) -> bytes:
    return state.client.request(body)


def check(state: State) -> CheckResult:
    wrong, checked, notes = 0, 0, []
    # The timed payload, through the mode's own path.
    if state.mode in ("batched",) or (state.mode == "openloop" and state.batch > 1):
        sent = state.batch_body or state.batch_bodies[state.batch]
        echoed = _round_trip(state, sent)
        items = unpack_batch(echoed)
        checked += 1
        if echoed != sent or len(items) != state.batch or any(i != state.body for i in items):
            wrong += 1
            notes.append("batch echo differs")
    elif state.mode == "pipelined":
        bodies = [pattern_bytes(len(state.body), salt) for salt in range(state.inflight)]
        for b in bodies:
            state.client.send(b)
        replies = [state.client.recv() for _ in bodies]
        checked += len(bodies)
        bad = sum(1 for a, b in zip(bodies, replies) if a != b)
        wrong += bad
        if bad:
            notes.append(f"{bad} pipelined replies out of order or altered")
    echoed = _round_trip(state, state.body)
    checked += 1
    if echoed != state.body:
        wrong += 1
        notes.append("echo of the timed payload differs")
    elif state.codec.name != "raw" and state.codec.decode(echoed) != state.message:
        wrong += 1
        notes.append(f"{state.codec.name} decode does not give back the message")
    # Every byte value and the largest frame allowed.
    for label, body in (("every byte value", every_byte_value(512)), ("maximum size", pattern_bytes(MAX_FRAME_BYTES, 7))):
        checked += 1
        if _round_trip(state, body) != body:
            wrong += 1
            notes.append(f"echo of the {label} payload differs")
    counters = state.endpoint.counters()
    for where, c in counters.items():
        broken = sum(c[name] for name in BROKEN_COUNTERS)
        checked += 1
        if broken:
            wrong += 1
            notes.append(f"{where} counted {broken} bad frames or broken connections")
    return CheckResult(wrong=wrong, checked=checked, detail="; ".join(notes))


def codec_times_us(cdc: Codec, message: Any, body: bytes) -> tuple[float, float]:
    """Median over blocks of the mean time of one encode / one decode (us).

    Timed here, in the run, so the record carries the figure of the machine and moment of its round
    trip; ``harness/microbench.py`` times the same calls across commits, and
    ``tests/test_microbench.py`` checks that the two agree."""
    encode, decode = cdc.encode, cdc.decode
    enc, dec = [], []
    clock = time.perf_counter_ns
    for _ in range(CODEC_BLOCKS):
        t0 = clock()
        for _ in range(CODEC_BLOCK):
            encode(message)
        t1 = clock()
        for _ in range(CODEC_BLOCK):
            decode(body)
        t2 = clock()
        enc.append((t1 - t0) / CODEC_BLOCK)
        dec.append((t2 - t1) / CODEC_BLOCK)
    return float(np.median(enc)) / 1e3, float(np.median(dec)) / 1e3


def report(state: State) -> dict:
    out: dict[str, Any] = {
        "transport": info(state.case.params["transport"]).doc,
        "encoded_bytes": len(state.body),
        "msgs_per_iter": state.msgs_per_iter,
        "counters": state.endpoint.counters(),
    }
    if state.codec.name != "raw":
        out["encode_us"], out["decode_us"] = codec_times_us(state.codec, state.message, state.body)
    if state.uncorrected_ns is not None:
        s = Summary.of(state.uncorrected_ns)
        out["uncorrected"] = {"p50_us": s.p50_ns / 1e3, "p90_us": s.p90_ns / 1e3, "p99_us": s.p99_ns / 1e3,
                              "p999_us": s.p999_ns / 1e3, "max_us": s.max_ns / 1e3}
        out["late_sends"] = state.late_sends
        lag_p50, lag_p99 = np.percentile(state.send_lag_ns, [50, 99])
        out["send_lag"] = {"p50_us": float(lag_p50) / 1e3, "p99_us": float(lag_p99) / 1e3}
    if state.case.params["transport"] == "shm":
        out["memory_ordering"] = "relies on x86 store order (TSO); no fences on weakly ordered CPUs"
    if state.case.params.get("reference") == "sockperf":
        try:
            ref = sockperf_ref.tcp_pingpong(len(state.body), SOCKPERF_S)
            out["sockperf"] = {"rtt_p50_us": ref.rtt_p50_us, "rtt_p99_us": ref.rtt_p99_us,
                               "rtt_min_us": ref.rtt_min_us, "command": ref.command}
        except (OSError, RuntimeError, ValueError) as exc:
            out["sockperf"] = {"error": str(exc)}  # the record keeps why the ratio is missing
    return out


_MICROSECONDS = {"type": "number", "minimum": 0}


def _percentiles_us(names: tuple[str, ...], each: dict) -> dict:
    return {"type": "object", "additionalProperties": False, "required": list(names),
            "properties": {name: each for name in names}}

# One rank's report as ``report`` writes it; a stored one is held to it (harness.core.verify).
REPORT_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "required": ["transport", "encoded_bytes", "msgs_per_iter", "counters"],
    "properties": {
        "transport": {"type": "string", "maxLength": 1000},
        "encoded_bytes": {"type": "integer", "minimum": 1, "maximum": MAX_FRAME_BYTES},
        "msgs_per_iter": {"type": "integer", "minimum": 1, "maximum": max(MAX_INFLIGHT, MAX_FRAME_BYTES)},
        # the server's, then each proxy's (Endpoint.counters), every counter the server keeps
        "counters": {"type": "object", "propertyNames": {"pattern": "^(server|proxy(0|[1-9][0-9]{0,2}))$"},
                     "additionalProperties": {"type": "object", "additionalProperties": False,
                                              "required": list(COUNTERS),
                                              "properties": {name: {"type": "integer", "minimum": 0}
                                                             for name in COUNTERS}}},
        "encode_us": _MICROSECONDS, "decode_us": _MICROSECONDS,
        "uncorrected": _percentiles_us(("p50_us", "p90_us", "p99_us", "p999_us", "max_us"), _MICROSECONDS),
        "late_sends": {"type": "integer", "minimum": 0},
        "send_lag": _percentiles_us(("p50_us", "p99_us"), {"type": "number"}),
        "memory_ordering": {"type": "string", "maxLength": 1000},
        "sockperf": {"type": "object", "additionalProperties": False, "oneOf": [
            {"required": ["error"]}, {"required": ["rtt_p50_us", "rtt_p99_us", "rtt_min_us", "command"]}],
            "properties": {"error": {"type": "string", "maxLength": 10_000},
                           "rtt_p50_us": {"type": "number", "exclusiveMinimum": 0},
                           "rtt_p99_us": {"type": "number", "exclusiveMinimum": 0},
                           "rtt_min_us": {"type": "number", "exclusiveMinimum": 0},
                           "command": {"type": "string", "maxLength": 10_000}}},
    },
}


def reports_contradiction(case: Case, reports) -> str:
    """Why an ok record's report is not its case's: the messages a sample covers, a raw payload's
    size on the wire, and no counter of a broken frame (the check it passed counts them)."""
    for rank, r in enumerate(reports):
        if r["msgs_per_iter"] != msgs_per_iter(case):
            return f"{rank}.msgs_per_iter: {r['msgs_per_iter']}, but a sample of {case.id} covers {msgs_per_iter(case)}"
        if FAMILY.value(case, "codec") == "raw" and r["encoded_bytes"] != case.params["payload_bytes"]:
            return (f"{rank}.encoded_bytes: {r['encoded_bytes']}, but raw bytes go on the wire as they are: "
                    f"payload_bytes={case.params['payload_bytes']}")
        for where, counters in r["counters"].items():
            broken = next((name for name in BROKEN_COUNTERS if counters[name]), None)
            if broken:
                return (f"{rank}.counters.{where}.{broken}: {counters[broken]} in an ok record, whose check counts "
                        "an endpoint with a broken frame or connection wrong")
    return ""


def teardown(state: State) -> None:
    state.endpoint.close()


def metrics(case: Case, summary: Summary, reports: list[dict]) -> dict[str, float]:
    r = reports[0] if reports else {}
    per_iter = r.get("msgs_per_iter", 1)
    mean_s = summary.mean_ns / 1e9
    out = {
        "rtt_p50_us": summary.p50_ns / 1e3,
        "rtt_p99_us": summary.p99_ns / 1e3,
        "rtt_p999_us": summary.p999_ns / 1e3,
        "per_msg_us": summary.mean_ns / 1e3 / per_iter,
        "msgs_per_s": per_iter / mean_s if mean_s > 0 else 0.0,
        "encoded_bytes": float(r.get("encoded_bytes", 0)),
    }
    if FAMILY.value(case, "mode") == "openloop":
        # Each sample is one request here; the achieved rate is bounded by the offered one.
        out.pop("per_msg_us")
        out["offered_rate_hz"] = float(case.params["rate_hz"])
        unc = r.get("uncorrected", {})
        out["rtt_p90_us"] = summary.p90_ns / 1e3
        for k in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us"):
            if k in unc:
                out[f"uncorrected_{k}"] = unc[k]
        out["late_sends"] = float(r.get("late_sends", 0))
        lag = r.get("send_lag", {})
        if lag:
            out["send_lag_p50_us"] = lag["p50_us"]
            out["send_lag_p99_us"] = lag["p99_us"]
        out.pop("msgs_per_s")
    if "encode_us" in r:
        out["encode_us"] = r["encode_us"]
        out["decode_us"] = r["decode_us"]
        out["transport_us"] = max(0.0, summary.p50_ns / 1e3 - r["encode_us"] - r["decode_us"])
    ref = r.get("sockperf", {})
    if "rtt_p50_us" in ref:
        out["sockperf_rtt_p50_us"] = ref["rtt_p50_us"]
        out["vs_sockperf_p50_ratio"] = (summary.p50_ns / 1e3) / ref["rtt_p50_us"]
    return out


def _payload(record) -> str:
    p = record.params
    return p.get("preset") or f"{p.get('payload_bytes')} B"


OPENLOOP = Needs("mode", ("openloop",))

FAMILY = Family(
    name="rpc",
    version=1,
    description="small-message RPC round trips: TCP/Nagle, Unix socket, shm ring, HTTP, gRPC, ZeroMQ, codecs, open loop",
    params=(
        Param("transport", str, "how the bytes travel", choices=tuple(TRANSPORTS), required=True),
        Param("mode", str, "what one sample is", choices=MODES, default="pingpong", written=True),
        Param("codec", str, "payload encoding (pickle only when named)", choices=CODECS, default="raw", written=True),
        Param("payload_bytes", int, "raw payload size in bytes (codec=raw)", low=1, high=MAX_FRAME_BYTES,
              needs=Needs("codec", ("raw",))),
        Param("preset", str, "control message (codecs other than raw)", choices=tuple(PRESETS),
              needs=Needs("codec", tuple(c for c in CODECS if c != "raw"))),
        Param("inflight", int, "requests in flight (mode=pipelined)", low=1, high=MAX_INFLIGHT, default=8, written=True,
              needs=Needs("mode", ("pipelined",))),
        Param("batch", int, "messages per send (mode=batched: default 8; openloop coalescing: default 1)",
              low=1, high=MAX_FRAME_BYTES, needs=Needs("mode", ("batched", "openloop"))),
        Param("window_us", int, "coalescing window in microseconds (mode=openloop with batch)", low=0, high=MAX_EMULATED_US, default=0,
              needs=OPENLOOP),
        Param("rate_hz", int, "offered request rate (mode=openloop)", low=1, high=10_000_000, needs=OPENLOOP),
        Param("hops", int, "forwarding proxies between client and server", low=0, high=16, default=0),
        Param("delay_us", int, "fault proxy: fixed latency per round trip", low=0, high=MAX_EMULATED_US, default=0),
        Param("jitter_us", int, "fault proxy: uniform random extra latency", low=0, high=MAX_EMULATED_US, default=0),
        Param("stall_every", int, "fault proxy: stall every Nth request", low=0, default=0),
        Param("stall_us", int, "fault proxy: length of each stall", low=0, high=MAX_EMULATED_US, default=0),
        Param("reference", str, "also run this reference tool's TCP ping-pong in the case and report the ratio",
              choices=REFERENCES),
    ),
    grid=grid,
    setup=setup,
    step=step,
    metrics=metrics,
    check=check,
    teardown=teardown,
    report=report,
    report_schema=REPORT_SCHEMA,
    reports_contradiction=reports_contradiction,
    iterate=iterate,
    validate=validate,
    figures=(
        Figure("rtt_p50_us", "us", "lower", "median sample: one round trip (pingpong), one request's latency from "
               "its intended send time (openloop), or all messages of a pipelined or batched sample"),
        Figure("rtt_p90_us", "us", "lower", "openloop: 90th percentile latency from the intended send time"),
        Figure("rtt_p99_us", "us", "lower", "99th percentile of the samples (as rtt_p50_us)"),
        Figure("rtt_p999_us", "us", "lower", "99.9th percentile of the samples (as rtt_p50_us)"),
        Figure("per_msg_us", "us", "lower", "mean sample / messages per sample (inflight or batch)"),
        Figure("msgs_per_s", "msg/s", "higher", "messages per sample / mean sample (closed loop)",
               headline=True),
        Figure("encoded_bytes", "bytes", "neither", "bytes of one encoded request on the wire, before framing"),
        Figure("offered_rate_hz", "1/s", "neither", "openloop: the request rate asked for (rate_hz)"),
        *(Figure(f"uncorrected_{k}", "us", "lower", f"openloop: {what} latency from the actual send time (what a "
                 f"closed-loop tool reports: coordinated omission not corrected)")
          for k, what in (("p50_us", "median"), ("p90_us", "90th percentile"), ("p99_us", "99th percentile"),
                          ("p999_us", "99.9th percentile"), ("max_us", "largest"))),
        Figure("late_sends", "count", "lower", "openloop: requests sent after their intended time"),
        Figure("send_lag_p50_us", "us", "lower", "openloop: median lag of the actual send behind the intended time"),
        Figure("send_lag_p99_us", "us", "lower", "openloop: 99th percentile send lag"),
        Figure("encode_us", "us", "lower", "median time to encode the request with the codec (timed apart)"),
        Figure("decode_us", "us", "lower", "median time to decode the reply with the codec (timed apart)"),
        Figure("transport_us", "us", "lower", "rtt_p50_us - encode_us - decode_us, floored at 0"),
        Figure("sockperf_rtt_p50_us", "us", "lower", "reference=sockperf: sockperf's median TCP ping-pong round trip, "
               "run in the same case"),
        Figure("vs_sockperf_p50_ratio", "ratio", "lower", "rtt_p50_us / sockperf_rtt_p50_us"),
    ),
    columns=(
        Column("transport", lambda r: r.params["transport"]),
        Column("mode", lambda r: FAMILY.value(r, "mode")),
        Column("codec", lambda r: FAMILY.value(r, "codec")),
        Column("payload", _payload),
        Column("p50", figure="p50_us", fmt="{:.1f}"),
        Column("p99", figure="p99_us", fmt="{:.1f}"),
        Column("p999", figure="p999_us", fmt="{:.1f}"),
        Column("rate", figure="msgs_per_s", fmt="{:.0f}"),
        Column("uncorr p99", figure="uncorrected_p99_us", fmt="{:.1f}"),
        Column("enc/dec (us)", lambda r: f"{r.metrics['encode_us']:.2f}/{r.metrics['decode_us']:.2f}"),
        Column("x sockperf", figure="vs_sockperf_p50_ratio", fmt="{:.1f}"),
        WRONG_COLUMN,
    ),
    plots=(Plot("rpc_percentiles", "RPC round-trip latency by percentile per transport (ping-pong, no faults)",
                plots.plot_rpc_percentiles),),
)
