"""asv: critpath's own hot paths, the entries of ``harness/microbench.py`` (the same declaration
``tests/test_microbench.py`` runs under pytest-benchmark), so one history holds their figures.

Each parameter is one entry; the time is of one call (``doc`` in the declaration says what one call
does; ns/op is time / ``ops``). Setup makes one untimed call and checks it, so a benchmark whose
code gives a wrong answer fails instead of reporting a fast time.

    asv run --environment existing:same --set-commit-hash $(git rev-parse HEAD) --bench bench_micro
"""
from __future__ import annotations

from harness.microbench import BENCHMARKS

_SHARED = [n for n, b in BENCHMARKS.items() if not b.fresh]
_FRESH = [n for n, b in BENCHMARKS.items() if b.fresh]


def _prepared_and_checked(name: str):
    prepared = BENCHMARKS[name].prepare()
    state = prepared.fresh() if prepared.fresh else prepared.state
    prepared.check(prepared.call(state))
    return prepared


class Micro:
    """Entries whose calls share one state: asv picks the calls per sample."""

    params = [_SHARED]
    param_names = ["entry"]
    version = "microbench-1"
    timeout = 120

    def setup(self, entry):
        prepared = _prepared_and_checked(entry)
        self.call, self.state = prepared.call, prepared.state

    def time_call(self, entry):
        self.call(self.state)


class MicroFresh:
    """Entries whose call changes its state (an allocator after a replay): one call per sample, on a
    state setup built for it."""

    params = [_FRESH]
    param_names = ["entry"]
    version = "microbench-1"
    number = 1
    repeat = (3, 10, 20.0)
    warmup_time = 0.0
    timeout = 120

    def setup(self, entry):
        prepared = _prepared_and_checked(entry)
        self.call, self.state = prepared.call, prepared.fresh()

    def time_call(self, entry):
        self.call(self.state)
