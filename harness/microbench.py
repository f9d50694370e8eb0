"""critpath's own hot paths as micro-benchmarks, declared once for pytest-benchmark and asv.

Each entry names an in-process path and builds, untimed, what one timed call needs:

- ``call(state)``: the timed operation; ``ops`` operations per call, so ns/op = time / ops;
- ``check(result)``: raises ``WrongResult`` when the call's result is wrong. A fast wrong answer
  is a failure, so every entry has one, and the quick mode of the tests runs it;
- ``state``: what every call gets; or, where a call changes its state (an allocator after a
  replay), ``fresh()``: a new state per call, built outside the timing.

``tests/test_microbench.py`` runs them under pytest-benchmark and ``benchmarks/bench_micro.py``
under asv, both from ``BENCHMARKS``, so the two track the same figures (docs/microbench.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from harness.core.sizes import parse_sizes
from harness.gate.config import GateConfig
from harness.gate.paired import SPENDING
from harness.gate.sequential import CaseSpec, SequentialGate, forget_boundaries
from harness.gate.stats import CaseInput, verdicts
from harness.kv_alloc.factory import ALLOCATORS, make_allocator
from harness.kv_alloc.simulator import SimConfig, replay, simulate
from harness.kv_alloc.traces import load_azure
from harness.kv_alloc.workload import MODELS, make_policy
from harness.model import alphabeta as ab
from harness.model.command import DEFAULT_PROFILE, DEFAULT_RANKS, DEFAULT_SIZES, model_grid, parse_ranks
from harness.model.profile import load_profile
from harness.rpc import framing
from harness.rpc.codecs import PRESETS, codec, pattern_bytes, preset
from harness.run.timing import time_each


class WrongResult(AssertionError):
    """A micro-benchmarked call gave a wrong answer."""


@dataclass(frozen=True)
class Prepared:
    call: Callable[[Any], Any]
    check: Callable[[Any], None]
    ops: int = 1
    state: Any = None
    fresh: Optional[Callable[[], Any]] = None  # set: each call gets a new state from it, untimed


@dataclass(frozen=True)
class MicroBench:
    name: str
    doc: str  # what one call does
    make: Callable[[], Prepared]
    fresh: bool = False  # each call needs a new state (asv then times one call per sample)

    def prepare(self) -> Prepared:
        prepared = self.make()
        if (prepared.fresh is not None) != self.fresh:
            raise TypeError(f"{self.name}: declared fresh={self.fresh} but its setup "
                            f"{'gives' if prepared.fresh else 'has no'} a fresh state per call")
        return prepared


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise WrongResult(what)


# --------------------------------------------------------------------------- the driver's timing loop

TIMING_ITERS = 1000


def _noop(_state: Any) -> None:
    return None


def _timing_loop() -> Prepared:
    def check(samples: np.ndarray) -> None:
        _expect(samples.dtype == np.int64 and samples.shape == (TIMING_ITERS,),
                f"time_each gave {samples.dtype} {samples.shape}, not int64 ({TIMING_ITERS},)")
        _expect(bool((samples >= 0).all()), "time_each gave a negative duration")

    return Prepared(lambda _: time_each(_noop, None, TIMING_ITERS), check, ops=TIMING_ITERS)


# --------------------------------------------------------------------------- RPC framing and codecs

FRAME_BODY_BYTES = 64  # a step receipt's size
FRAMES_PER_READ = 64


def _frame_encode() -> Prepared:
    body = pattern_bytes(FRAME_BODY_BYTES)

    def check(frame: bytes) -> None:
        magic, version, kind, length = framing.HEADER.unpack_from(frame)
        _expect((magic, version, kind, length) == (framing.MAGIC, framing.VERSION, framing.KIND_REQUEST, len(body))
                and frame[framing.HEADER_BYTES:] == body, f"encode gave a wrong frame {frame[:16]!r}...")

    return Prepared(framing.encode, check, state=body)


class _Replaying:
    """A socket whose every ``recv`` returns the same bytes: the reader's parsing without a system call."""

    def __init__(self, chunk: bytes) -> None:
        self.chunk = chunk

    def recv(self, _n: int) -> bytes:
        return self.chunk


def _frame_read() -> Prepared:
    bodies = [pattern_bytes(FRAME_BODY_BYTES, salt=i) for i in range(FRAMES_PER_READ)]
    # One recv returns exactly FRAMES_PER_READ frames, so each call starts on an empty buffer.
    reader = framing.FrameReader(_Replaying(b"".join(framing.encode(b, framing.KIND_REPLY) for b in bodies)))

    def call(r: framing.FrameReader) -> list:
        return [r.read() for _ in range(FRAMES_PER_READ)]

    def check(frames: list) -> None:
        _expect([f.body for f in frames] == bodies and all(f.kind == framing.KIND_REPLY for f in frames),
                "FrameReader gave back frames other than those sent")
        _expect(not reader.buf, f"{len(reader.buf)} bytes left in the reader after whole frames")

    return Prepared(call, check, ops=FRAMES_PER_READ, state=reader)


# raw carries bytes as they are (a copy), and the rpc family times no codec for it either.
TIMED_CODECS = ("json", "msgpack", "pickle")


def codec_case(codec_name: str, preset_name: str):
    """(codec, message, body): what the rpc family encodes and decodes for this codec and preset."""
    cdc = codec(codec_name)
    message = preset(preset_name)
    return cdc, message, cdc.encode(message)


def _codec_encode(codec_name: str, preset_name: str) -> Callable[[], Prepared]:
    def prepare() -> Prepared:
        cdc, message, _ = codec_case(codec_name, preset_name)

        def check(body: bytes) -> None:
            _expect(cdc.decode(body) == message, f"{codec_name}: decode(encode({preset_name})) is not the message")

        return Prepared(cdc.encode, check, state=message)
    return prepare


def _codec_decode(codec_name: str, preset_name: str) -> Callable[[], Prepared]:
    def prepare() -> Prepared:
        cdc, message, body = codec_case(codec_name, preset_name)

        def check(decoded: Any) -> None:
            _expect(decoded == message, f"{codec_name}: decode of {preset_name}'s bytes is not the message")

        return Prepared(cdc.decode, check, state=body)
    return prepare


# --------------------------------------------------------------------------- KV allocator models

KV_REQUESTS = 150  # of the Azure conversation trace: about 21 000 logged ops
KV_EVENTS = 20_000
KV_BLOCK_TOKENS = 16
KV_REPLAY_BUDGET_BYTES = 10**12  # no out-of-memory path: the replay times the policy, not OOM handling


def kv_event_log(requests: int = KV_REQUESTS, events: int = KV_EVENTS):
    """(trace, policy, bytes per token, ids, sizes): the malloc/free calls of a vLLM-style server
    simulated on the Azure conversation trace (7B shapes, per-block policy, 4x speed-up), cut to
    ``events`` ops. ``benchmarks/bench_kv_alloc.py`` replays a million of them the same way."""
    trace = load_azure("azure_conv").head(requests)
    policy = make_policy("per_block", block_tokens=KV_BLOCK_TOKENS)
    bpt = MODELS["7b"].kv_bytes_per_token
    sim_alloc = make_allocator("paged", int(80e9), bytes_per_token=bpt, block_tokens=KV_BLOCK_TOKENS)
    sim = simulate(trace, policy, sim_alloc, SimConfig(bytes_per_token=bpt, speedup=4.0))
    if len(sim.event_ids) < events:
        raise RuntimeError(f"the simulation logged {len(sim.event_ids)} ops, fewer than {events}; "
                           f"use more than {requests} requests")
    return trace, policy, bpt, sim.event_ids[:events].tolist(), sim.event_sizes[:events].tolist()


def _live_after(ids: list, sizes: list) -> dict[int, int]:
    """The log's own account: id -> bytes of every allocation still live at its end."""
    live: dict[int, int] = {}
    for i, size in zip(ids, sizes):
        if size:
            live[i] = size
        else:
            del live[i]
    return live


_KV_LOG: dict[str, tuple] = {}  # one simulation per process, shared by the five allocators


def _kv_replay(allocator: str) -> Callable[[], Prepared]:
    def prepare() -> Prepared:
        if "log" not in _KV_LOG:
            _KV_LOG["log"] = kv_event_log()
        trace, policy, bpt, ids, sizes = _KV_LOG["log"]
        live = _live_after(ids, sizes)
        n_handles = max(ids) + 1

        def fresh():
            return make_allocator(allocator, KV_REPLAY_BUDGET_BYTES, bytes_per_token=bpt,
                                  block_tokens=KV_BLOCK_TOKENS, trace=trace, policy=policy)

        def call(alloc):
            replay(ids, sizes, alloc, handles=[0] * n_handles)
            return alloc

        def check(alloc) -> None:
            s = alloc.stats()
            _expect(s.live_handles == len(live) and s.allocated_bytes == sum(live.values()),
                    f"{allocator}: {s.live_handles} live handles holding {s.allocated_bytes} B after the replay; "
                    f"the log leaves {len(live)} holding {sum(live.values())} B")
            _expect(s.reserved_bytes == s.allocated_bytes + s.internal_waste_bytes + s.free_bytes,
                    f"{allocator}: reserved {s.reserved_bytes} B is not allocated + waste + free")
            _expect(s.num_ooms == 0, f"{allocator}: {s.num_ooms} out-of-memory events in a {KV_REPLAY_BUDGET_BYTES} B budget")

        return Prepared(call, check, ops=len(ids), fresh=fresh)
    return prepare


# --------------------------------------------------------------------------- the gate's statistics

GATE_PAIRS = 20
# Known data, 5 cases: what each must be decided as. Effects are log ratios with 1 % noise per pair,
# far from the 5 % minimum effect, so the verdicts are certain, not borderline.
GATE_CASES = {"slower20": (math.log(1.2), "regressed"), "slower10": (math.log(1.1), "regressed"),
              "faster20": (-math.log(1.2), "improved"), "same_a": (0.0, "unchanged"), "same_b": (0.0, "unchanged")}


def _gate_data(seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {c: effect + rng.normal(0.0, 0.01, GATE_PAIRS) for c, (effect, _) in GATE_CASES.items()}


def _gate_outcomes(outcomes: dict[str, str]) -> None:
    want = {c: o for c, (_, o) in GATE_CASES.items()}
    _expect(outcomes == want, f"gate verdicts {outcomes}, expected {want}")


def _gate_look() -> Prepared:
    """The A/B gate's decision: one look of the group-sequential test over every case (the final one,
    as ``critpath compare`` makes it again from a gate's stored pairs)."""
    policy = GateConfig().policy
    specs = [CaseSpec(c) for c in GATE_CASES]
    pairs = _gate_data()

    def call(_):
        forget_boundaries()  # a running gate's boundaries are never in the cache
        gate = SequentialGate(specs, alpha=policy.alpha, confidence=policy.confidence, spending=SPENDING)
        return gate.look(1.0, pairs, final=True)

    call(None)  # untimed: scipy loads its submodules on first use (bench_startup times imports)
    return Prepared(call, lambda states: _gate_outcomes({c: s.outcome for c, s in states.items()}))


def _gate_verdicts() -> Prepared:
    """``critpath compare``'s decision on two stored runs: unpaired values per side, bootstrap and Holm."""
    policy = GateConfig().policy
    rng = np.random.default_rng(11)
    inputs = []
    for case_id, log_ratio in _gate_data().items():
        base = 100.0 * np.exp(rng.normal(0.0, 0.01, GATE_PAIRS))
        inputs.append(CaseInput(case_id, base.tolist(), (base * np.exp(log_ratio)).tolist()))
    verdicts(inputs, policy)  # untimed, as in _gate_look: scipy's submodules load on first use
    return Prepared(lambda _: verdicts(inputs, policy),
                    lambda out: _gate_outcomes({c: v.outcome for c, v in out.items()}))


# --------------------------------------------------------------------------- the model sweep

def _model_sweep() -> Prepared:
    """``critpath model`` at its default ranks, sizes, profile and algorithms, without the output files."""
    profile = load_profile(DEFAULT_PROFILE)
    algos = tuple(ab.ALLREDUCE_MODELS)
    links = {a: ab.Links.from_profile(profile) for a in algos}
    scales = np.array(parse_ranks(DEFAULT_RANKS), dtype=np.float64)
    sizes = np.array(parse_sizes(DEFAULT_SIZES), dtype=np.float64)

    def check(grid) -> None:
        times_s, crossover, nccl = grid
        _expect(times_s.shape == (len(algos), len(scales), len(sizes)) and bool(np.all(times_s > 0)),
                f"model grid of shape {times_s.shape}, not all positive")
        # The vectorised sweep against each model evaluated on its own at a corner of the grid.
        for i, a in enumerate(algos):
            one = float(ab.ALLREDUCE_MODELS[a](scales[-1], sizes[-1], links[a]))
            _expect(math.isclose(times_s[i, -1, -1], one, rel_tol=1e-12),
                    f"{a} at {scales[-1]:g} ranks, {sizes[-1]:g} B: sweep {times_s[i, -1, -1]} s, model {one} s")
        _expect(set(crossover) == {"ring_vs_tree_bytes", "ring_vs_dbtree_bytes"}
                and all(len(v) == len(scales) for v in crossover.values()), f"crossovers {sorted(crossover)}")
        _expect(bool(np.all(nccl["best_us"] <= np.minimum(nccl["ring_us"], nccl["tree_us"]) * (1 + 1e-12))),
                "NCCL's chosen algorithm is slower than ring or tree alone")

    return Prepared(lambda _: model_grid(profile, links, scales, sizes, algos), check)


# --------------------------------------------------------------------------- the declaration

def _declare() -> dict[str, MicroBench]:
    entries = [
        MicroBench("timing_loop", f"time_each of an empty step, {TIMING_ITERS} iterations", _timing_loop),
        MicroBench("frame_encode", f"one {FRAME_BODY_BYTES} B body framed", _frame_encode),
        MicroBench("frame_read", f"{FRAMES_PER_READ} frames of {FRAME_BODY_BYTES} B parsed from one recv",
                   _frame_read),
    ]
    for c in TIMED_CODECS:
        for p in PRESETS:
            entries.append(MicroBench(f"codec_encode.{c}.{p}", f"one {c} encode of {p}", _codec_encode(c, p)))
            entries.append(MicroBench(f"codec_decode.{c}.{p}", f"one {c} decode of {p}", _codec_decode(c, p)))
    for a in ALLOCATORS:
        entries.append(MicroBench(f"kv_replay.{a}", f"{KV_EVENTS} logged KV malloc/free ops on a fresh {a} model",
                                  _kv_replay(a), fresh=True))
    entries += [
        MicroBench("gate_look", f"the A/B gate's look at {len(GATE_CASES)} cases x {GATE_PAIRS} pairs", _gate_look),
        MicroBench("gate_verdicts", f"compare's verdicts on {len(GATE_CASES)} cases x {GATE_PAIRS} values a side",
                   _gate_verdicts),
        MicroBench("model_sweep", "critpath model's grid at its defaults", _model_sweep),
    ]
    return {e.name: e for e in entries}


BENCHMARKS: dict[str, MicroBench] = _declare()
