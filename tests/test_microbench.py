"""critpath's own hot paths under pytest-benchmark, from the one declaration in harness/microbench.py.

In the test suite (pyproject's addopts carry ``--benchmark-disable``) each benchmarked call runs
once and its result is checked: correctness, not time. Timed, with the table:

    .venv/bin/python -m pytest tests/test_microbench.py -n 0 --benchmark-enable --benchmark-only

(docs/microbench.md: saving runs and comparing them.)
"""
from __future__ import annotations

import pytest

from harness import microbench
from harness.microbench import BENCHMARKS, WrongResult

# A call that needs a fresh state (an allocator replay) is timed this many times, each on a new one.
FRESH_ROUNDS = 10


def run_benchmark(benchmark, bench: microbench.MicroBench):
    prepared = bench.prepare()
    benchmark.group = bench.name.split(".")[0]
    benchmark.extra_info.update(ops_per_call=prepared.ops, call=bench.doc)
    if prepared.fresh is None:
        result = benchmark(prepared.call, prepared.state)
    else:
        result = benchmark.pedantic(prepared.call, setup=lambda: ((prepared.fresh(),), {}), rounds=FRESH_ROUNDS)
    prepared.check(result)
    return prepared


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_microbench(benchmark, name):
    run_benchmark(benchmark, BENCHMARKS[name])


def test_every_hot_path_is_declared():
    from harness.kv_alloc.factory import ALLOCATORS
    from harness.rpc.codecs import PRESETS

    names = set(BENCHMARKS)
    assert {"timing_loop", "frame_encode", "frame_read", "gate_look", "gate_verdicts", "model_sweep"} <= names
    assert {f"kv_replay.{a}" for a in ALLOCATORS} <= names
    assert {f"codec_{d}.{c}.{p}" for d in ("encode", "decode") for c in microbench.TIMED_CODECS for p in PRESETS} <= names


# ---- each check rejects a wrong answer (a check that cannot fail checks nothing)

def _outcomes_swapped(p):
    """The real verdicts, with a regressed and an improved case's swapped."""
    out = p.call(p.state)
    return {**out, "slower20": out["faster20"], "faster20": out["slower20"]}


WRONG = {
    "timing_loop": lambda p: p.call(p.state)[:-1],
    "frame_encode": lambda p: p.call(p.state[:-1] + b"\x00"),
    "frame_read": lambda p: p.call(p.state)[::-1],
    "codec_encode": lambda p: p.call({"not": "the message"}),
    "codec_decode": lambda p: {"not": "the message"},
    "kv_replay": lambda p: p.fresh(),  # a fresh model, nothing replayed on it
    "gate_look": _outcomes_swapped,
    "gate_verdicts": _outcomes_swapped,
    "model_sweep": lambda p: (p.call(p.state)[0] * 1.01, *p.call(p.state)[1:]),
}
# One entry of each kind (the codecs and allocators share their check's code).
ONE_OF_EACH = {n.split(".")[0]: n for n in reversed(BENCHMARKS)}


def test_every_kind_has_a_wrong_answer():
    assert set(WRONG) == set(ONE_OF_EACH)


@pytest.mark.parametrize("name", sorted(ONE_OF_EACH.values()))
def test_check_rejects_a_wrong_answer(name):
    prepared = BENCHMARKS[name].prepare()
    with pytest.raises(WrongResult):
        prepared.check(WRONG[name.split(".")[0]](prepared))


# ---- the rpc family's encode_us / decode_us against the micro-benchmark of the same calls

@pytest.mark.parametrize("codec_name", ["json", "msgpack"])
def test_rpc_family_codec_figures_match_the_microbench(benchmark, codec_name):
    """The record's figure is timed in the run (blocks of calls, median of blocks) so it describes
    the machine and moment of that run's round trips; the micro-benchmark times the same call across
    commits. Timed, the two must agree: a factor of two allows for a shared machine between them."""
    from harness.families.rpc import codec_times_us

    prepared = run_benchmark(benchmark, BENCHMARKS[f"codec_encode.{codec_name}.tool_call"])
    if benchmark.disabled:
        pytest.skip("compares timings: run with --benchmark-enable")
    encode_us, _ = codec_times_us(*microbench.codec_case(codec_name, "tool_call"))
    bench_us = benchmark.stats.stats.median * 1e6 / prepared.ops
    assert 0.5 < encode_us / bench_us < 2.0, f"rpc family encode_us {encode_us:.3f}, pytest-benchmark {bench_us:.3f}"
