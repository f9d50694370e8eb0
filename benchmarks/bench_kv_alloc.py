"""asv: allocator-model cost, replaying one million logged KV allocation events per allocator.

The event log comes from the continuous-batching simulator on the Azure conversation trace
(7B shapes, per-block policy of 16 tokens, 80 GB budget, 4x speed-up): the malloc/free calls a
vLLM-style server makes. The log is cut to exactly ``EVENTS`` ops. Each timed call replays them on
a fresh allocator with a 1 TB budget (no out-of-memory path), on one core. The target is at most
10 s per allocator (``docs/kv_alloc.md``).

    asv run --environment existing:same --bench bench_kv_alloc
"""
from __future__ import annotations

from harness.kvalloc.factory import ALLOCATORS, make_allocator
from harness.kvalloc.simulator import SimConfig, replay, simulate
from harness.kvalloc.traces import load_azure
from harness.kvalloc.workload import MODELS, make_policy

EVENTS = 1_000_000
REQUESTS = 5200  # enough requests of the trace to log at least EVENTS ops
BLOCK_TOKENS = 16
REPLAY_BUDGET_BYTES = 10**12


def event_log():
    """(trace, policy, bytes per token, ids, sizes) with exactly EVENTS ops."""
    trace = load_azure("azure_conv").head(REQUESTS)
    policy = make_policy("per_block", block_tokens=BLOCK_TOKENS)
    bpt = MODELS["7b"].kv_bytes_per_token
    sim_alloc = make_allocator("paged", int(80e9), bytes_per_token=bpt, block_tokens=BLOCK_TOKENS)
    sim = simulate(trace, policy, sim_alloc, SimConfig(bytes_per_token=bpt, speedup=4.0))
    if len(sim.event_ids) < EVENTS:
        raise RuntimeError(f"the simulation logged {len(sim.event_ids)} ops, fewer than {EVENTS}; raise REQUESTS")
    return trace, policy, bpt, sim.event_ids[:EVENTS].tolist(), sim.event_sizes[:EVENTS].tolist()


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
