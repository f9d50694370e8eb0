"""asv: allocator-model cost, replaying one million logged KV allocation events per allocator.

The event log comes from the continuous-batching simulator on the Azure conversation trace
(7B shapes, per-block policy of 16 tokens, 80 GB budget, 4x speed-up): the malloc/free calls a
vLLM-style server makes. The log is cut to exactly ``EVENTS`` ops. Each timed call replays them on
a fresh allocator with a 1 TB budget (no out-of-memory path), on one core. The target is at most
10 s per allocator (``docs/kv_alloc.md``).

    asv run --environment existing:same --bench bench_kv_alloc
"""
from __future__ import annotations

from harness.kv_alloc.factory import ALLOCATORS, make_allocator
from harness.kv_alloc.simulator import replay
from harness.microbench import KV_BLOCK_TOKENS as BLOCK_TOKENS
from harness.microbench import KV_REPLAY_BUDGET_BYTES as REPLAY_BUDGET_BYTES
from harness.microbench import kv_event_log

EVENTS = 1_000_000
REQUESTS = 5200  # enough requests of the trace to log at least EVENTS ops


def event_log():
    """(trace, policy, bytes per token, ids, sizes) with exactly EVENTS ops."""
    return kv_event_log(REQUESTS, EVENTS)


class ReplayMillionEvents:
    params = [list(ALLOCATORS)]
    param_names = ["allocator"]
    version = "kv-alloc-replay-1"
    number = 1  # one replay per sample: each needs a fresh allocator from setup
    repeat = (1, 3, 30.0)
    warmup_time = 0.0
    timeout = 300

    def setup_cache(self):
        return event_log()

    def setup(self, cache, allocator):
        trace, policy, bpt, ids, sizes = cache
        self.ids, self.sizes = ids, sizes
        self.alloc = make_allocator(allocator, REPLAY_BUDGET_BYTES, bytes_per_token=bpt, block_tokens=BLOCK_TOKENS,
                                    trace=trace, policy=policy)
        self.handles = [0] * (max(ids) + 1)

    def time_replay_1m_events(self, cache, allocator):
        replay(self.ids, self.sizes, self.alloc, handles=self.handles)
