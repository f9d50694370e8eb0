"""Best-fit with coalescing (BFC), as TensorFlow's ``BFCAllocator`` does it with ``allow_growth``.

- Sizes are rounded up to 256 B (``kMinAllocationSize``).
- The smallest free chunk that fits is chosen (TensorFlow searches size bins; within a bin,
  chunks are ordered by size then address, which is best fit).
- A chunk is split only "into two reasonably large pieces": when it is at least twice the rounded
  request, or when the remainder is at least 128 MiB (``kMaxInternalFragmentation``); otherwise
  the remainder stays inside the allocation as internal waste.
- Freeing coalesces a chunk with its free neighbours inside its region.
- When nothing fits, a new region is reserved: ``curr_region_allocation_bytes`` starts at 2 MiB
  and doubles (to the first power-of-two multiple that holds the request, and again after each
  region that did not need to grow it), capped by what is left of the budget; regions are never
  returned to the device and never merge with each other.
"""
from __future__ import annotations

from harness.kv_alloc.base import (AllocatorStats, Handles, Device, Extent, Layout, MiB, OutOfMemory, merged_extents,
                                   round_up)
from harness.kv_alloc.blocks import Block, FreeIndex, release, split

K_MIN_ALLOCATION_SIZE = 256
K_MAX_INTERNAL_FRAGMENTATION = 128 * MiB
INITIAL_REGION_BYTES = 2 * MiB


class _Region:
    __slots__ = ("addr", "size")

    def __init__(self, addr: int, size: int) -> None:
        self.addr = addr
        self.size = size


class BFCAllocator:
    name = "bfc"

    def __init__(self, budget_bytes: int) -> None:
        self.device = Device(budget_bytes)
        self.pool = FreeIndex("bfc")
        self._regions: list[_Region] = []
        self._curr_region_bytes = INITIAL_REGION_BYTES
        self._live = Handles(self.name)
        self._allocated = 0
        self._live_block_bytes = 0
        self.num_ooms = 0

    def malloc(self, size_bytes: int) -> int:
        if size_bytes <= 0:
            raise ValueError(f"size_bytes must be > 0, got {size_bytes}")
        rounded = round_up(size_bytes, K_MIN_ALLOCATION_SIZE)
        block = self.pool.best_fit(rounded)
        if block is None:
            block = self._extend(rounded)
            if block is None:
                self.num_ooms += 1
                raise OutOfMemory(size_bytes, self.device.reserved_bytes, self._allocated, self.device.budget_bytes)
        if block.size >= 2 * rounded or block.size - rounded >= K_MAX_INTERNAL_FRAGMENTATION:
            split(block, rounded)
        block.allocated = True
        block.requested = size_bytes
        handle = self._live.issue(block)
        self._allocated += size_bytes
        self._live_block_bytes += block.size
        return handle

    def free(self, handle: int) -> None:
        block = self._live.retire(handle)
        self._allocated -= block.requested
        self._live_block_bytes -= block.size
        release(block)

    def _extend(self, rounded: int) -> Block | None:
        available = (self.device.budget_bytes - self.device.reserved_bytes) // K_MIN_ALLOCATION_SIZE * K_MIN_ALLOCATION_SIZE
        if rounded > available:
            return None
        grew = False
        while rounded > self._curr_region_bytes:
            self._curr_region_bytes *= 2
            grew = True
        size = min(self._curr_region_bytes, available)
        addr = self.device.reserve(size)
        assert addr is not None  # size <= available
        if not grew:
            self._curr_region_bytes *= 2
        region = _Region(addr, size)
        self._regions.append(region)
        return Block(addr, size, self.pool, region)

    def stats(self) -> AllocatorStats:
        reserved = self.device.reserved_bytes
        return AllocatorStats(
            reserved_bytes=reserved,
            allocated_bytes=self._allocated,
            internal_waste_bytes=self._live_block_bytes - self._allocated,
            free_bytes=reserved - self._live_block_bytes,
            largest_free_extent_bytes=self.pool.largest(),
            peak_reserved_bytes=self.device.peak_reserved_bytes,
            live_handles=len(self._live),
            segments=len(self._regions),
            num_ooms=self.num_ooms,
            num_alloc_retries=0,
        )

    def layout(self) -> Layout:
        live = {h: (Extent(b.addr, b.size),) for h, b in self._live.items()}
        return Layout(live, tuple(merged_extents(self.pool.extents())),
                      tuple(Extent(r.addr, r.size) for r in self._regions))
