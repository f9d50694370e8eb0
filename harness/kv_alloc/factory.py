"""Build an allocator model by name for a trace and policy (slab classes are fitted here)."""
from __future__ import annotations

from harness.core.options import UnknownName
from harness.kv_alloc.bfc import BFCAllocator
from harness.kv_alloc.caching import CachingAllocator
from harness.kv_alloc.paged import PagedAllocator
from harness.kv_alloc.slab import SlabAllocator, fit_size_classes, presize_plan
from harness.kv_alloc.traces import Trace
from harness.kv_alloc.workload import Policy, ReserveMax

ALLOCATORS = ("caching", "caching_expandable", "bfc", "slab", "paged")
SLAB_CLASSES = 16
SLAB_PRESIZE_FRACTION = 0.5  # of the budget, split over classes by observed byte share


def observed_sizes(trace: Trace, policy: Policy, bytes_per_token: int) -> list[int]:
    cap = policy.max_new_tokens if isinstance(policy, ReserveMax) else None
    return [
        tokens * bytes_per_token
        for p, o in zip(trace.prompt_tokens.tolist(), trace.output_tokens.tolist())
        for tokens in policy.sizes_tokens(p, min(o, cap) if cap else o)
    ]


def make_allocator(name: str, budget_bytes: int, *, bytes_per_token: int, block_tokens: int,
                   trace: Trace | None = None, policy: Policy | None = None):
    if name == "caching":
        return CachingAllocator(budget_bytes)
    if name == "caching_expandable":
        return CachingAllocator(budget_bytes, expandable_segments=True)
    if name == "bfc":
        return BFCAllocator(budget_bytes)
    if name == "paged":
        return PagedAllocator(budget_bytes, block_bytes=block_tokens * bytes_per_token)
    if name == "slab":
        if trace is None or policy is None:
            raise ValueError("the slab allocator fits its classes to a trace and policy; give both")
        sizes = observed_sizes(trace, policy, bytes_per_token)
        classes = fit_size_classes(sizes, SLAB_CLASSES)
        return SlabAllocator(budget_bytes, classes,
                             presize_bytes=presize_plan(sizes, classes, int(budget_bytes * SLAB_PRESIZE_FRACTION)))
    raise UnknownName(f"unknown allocator {name!r}; known: {', '.join(ALLOCATORS)}")
