"""A model of PyTorch's CUDA caching allocator (``c10/cuda/CUDACachingAllocator.cpp``).

What is modelled, with the source's own words (default ``PYTORCH_CUDA_ALLOC_CONF``, one stream):

- "all sizes are rounded to at least 512 bytes" (``kMinBlockSize``; ``round_size`` rounds up to a
  multiple of 512).
- "Large (>1MB) and small allocations are stored in separate pools. Small requests are packed
  into 2MB buffers." (``kSmallSize`` = 1 MiB, ``kSmallBuffer`` = 2 MiB.)
- "requests between 1MB and 10MB will allocate and split a 20MB block" (``kLargeBuffer`` = 20 MiB,
  ``kMinLargeAlloc`` = 10 MiB); larger requests get a segment rounded up to 2 MiB
  (``kRoundLarge``): ``get_allocation_size``.
- "The allocator attempts to find the smallest cached block that will fit the requested size. If
  the block is larger than the requested size, it may be split." ``should_split``: a small-pool
  remainder >= 512 B, a large-pool remainder > 1 MiB (``remaining > kSmallSize``); otherwise the
  whole block is handed out and the remainder is internal waste.
- ``free_block`` merges a freed block with its free ``prev``/``next``: blocks of one segment
  only. Segments (separate ``cudaMalloc`` calls) never merge.
- "If the cudaMalloc fails, the allocator will attempt to free ... all cached blocks that are not
  split and retry the allocation" (``release_cached_blocks`` then ``alloc_block(isRetry=true)``,
  which counts ``num_alloc_retries``; failing that, ``num_ooms`` and ``OutOfMemoryError``). With
  the default ``max_split_size`` (unlimited), ``release_available_cached_blocks`` does nothing,
  so it is not modelled.
- Expandable segments (Note [Expandable Segments]): one segment per pool that grows by mapping
  pages, "2MiB pages for our small pool and 20MiB pages for our large pool"; ``should_split``
  allows any remainder >= 512 B there. On an out-of-memory retry the model unmaps the free pages
  at the *end* of each expandable segment; PyTorch also unmaps whole free pages in the middle of a
  segment, so the model's reserved figure under memory pressure is an upper bound.

Not modelled: streams and events, CUDA graph pools, ``max_split_size``, ``roundup_power2_divisions``,
garbage collection thresholds, memory held by the driver.
"""
from __future__ import annotations

from typing import Optional

from harness.kv_alloc.base import (AllocatorStats, Handles, Device, Extent, Layout, MiB, OutOfMemory, merged_extents,
                                   round_up)
from harness.kv_alloc.blocks import Block, FreeIndex, release, split

K_MIN_BLOCK_SIZE = 512
K_SMALL_SIZE = 1 * MiB
K_SMALL_BUFFER = 2 * MiB
K_MIN_LARGE_ALLOC = 10 * MiB
K_LARGE_BUFFER = 20 * MiB
K_ROUND_LARGE = 2 * MiB


def round_size(size: int) -> int:
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return round_up(size, K_MIN_BLOCK_SIZE)


def get_allocation_size(size: int) -> int:
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return round_up(size, K_ROUND_LARGE)


class _Segment:
    __slots__ = ("addr", "size", "small", "tail")

    def __init__(self, addr: int, size: int, small: bool) -> None:
        self.addr = addr
        self.size = size  # mapped (reserved) bytes
        self.small = small
        self.tail: Optional[Block] = None  # last block, expandable segments only


class CachingAllocator:
    """PyTorch's caching allocator, modelled (see the module docstring for what and why)."""

    def __init__(self, budget_bytes: int, expandable_segments: bool = False) -> None:
        self.name = "caching_expandable" if expandable_segments else "caching"
        self.expandable = expandable_segments
        self.device = Device(budget_bytes)
        self.small = FreeIndex("small")
        self.large = FreeIndex("large")
        self._segments: dict[int, _Segment] = {}
        self._expandable: dict[bool, _Segment] = {}
        self._live = Handles(self.name)
        self._allocated = 0
        self._live_block_bytes = 0
        self.num_ooms = 0
        self.num_alloc_retries = 0

    # -- interface ---------------------------------------------------------------------------
    def malloc(self, size_bytes: int) -> int:
        if size_bytes <= 0:
            raise ValueError(f"size_bytes must be > 0, got {size_bytes}")
        size = round_size(size_bytes)
        is_small = size <= K_SMALL_SIZE
        pool = self.small if is_small else self.large
        block = pool.best_fit(size)
        if block is None:
            block = self._grow_expandable(size, is_small) if self.expandable else self._new_segment(size, is_small)
            if block is None:
                self.num_ooms += 1
                raise OutOfMemory(size_bytes, self.device.reserved_bytes, self._allocated, self.device.budget_bytes)
        remaining = block.size - size
        if is_small or self.expandable:
            do_split = remaining >= K_MIN_BLOCK_SIZE
        else:
            do_split = remaining > K_SMALL_SIZE
        if do_split:
            rest = split(block, size)
            seg = block.chain
            if seg.tail is block:
                seg.tail = rest
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
        seg = block.chain
        was_tail = seg.tail is block or (block.next is not None and seg.tail is block.next
                                         and not block.next.allocated)
        merged = release(block)
        if was_tail:
            seg.tail = merged

    def stats(self) -> AllocatorStats:
        reserved = self.device.reserved_bytes
        return AllocatorStats(
            reserved_bytes=reserved,
            allocated_bytes=self._allocated,
            internal_waste_bytes=self._live_block_bytes - self._allocated,
            free_bytes=reserved - self._live_block_bytes,
            largest_free_extent_bytes=max(self.small.largest(), self.large.largest()),
            peak_reserved_bytes=self.device.peak_reserved_bytes,
            live_handles=len(self._live),
            segments=len(self._segments) + len(self._expandable),
            num_ooms=self.num_ooms,
            num_alloc_retries=self.num_alloc_retries,
        )

    def torch_stats(self) -> dict[str, int]:
        """The model's figures under ``torch.cuda.memory_stats()`` names and meanings:
        ``allocated_bytes`` there counts whole (rounded) blocks, ``requested_bytes`` the request;
        ``inactive_split_bytes`` is free memory in blocks split off a segment that is partly in use
        (not counted for expandable segments, as in PyTorch)."""
        inactive_split = sum(
            b.size for pool in (self.small, self.large) for b in pool.blocks()
            if b.is_split and b.chain.addr in self._segments
        )
        return {
            "reserved_bytes": self.device.reserved_bytes,
            "allocated_bytes": self._live_block_bytes,
            "requested_bytes": self._allocated,
            "inactive_split_bytes": inactive_split,
            "num_alloc_retries": self.num_alloc_retries,
            "num_ooms": self.num_ooms,
        }

    def layout(self) -> Layout:
        live = {h: (Extent(b.addr, b.size),) for h, b in self._live.items()}
        free = tuple(merged_extents(self.small.extents() + self.large.extents()))
        segs = list(self._segments.values()) + list(self._expandable.values())
        return Layout(live, free, tuple(Extent(s.addr, s.size) for s in segs if s.size))

    # -- cudaMalloc path ---------------------------------------------------------------------
    def _new_segment(self, size: int, is_small: bool) -> Optional[Block]:
        alloc = get_allocation_size(size)
        addr = self.device.reserve(alloc)
        if addr is None:
            self._release_cached_blocks()
            addr = self.device.reserve(alloc)
            self.num_alloc_retries += 1
            if addr is None:
                return None
        seg = _Segment(addr, alloc, is_small)
        self._segments[addr] = seg
        return Block(addr, alloc, self.small if is_small else self.large, seg)

    def _release_cached_blocks(self) -> None:
        """Give every free, unsplit segment back to the device (``release_cached_blocks``)."""
        for pool in (self.small, self.large):
            for block in pool.blocks():
                if not block.is_split and block.chain.addr in self._segments:
                    pool.remove(block)
                    del self._segments[block.chain.addr]
                    self.device.release(block.size)
        for seg in self._expandable.values():
            self._unmap_tail(seg)

    # -- expandable segments -----------------------------------------------------------------
    def _page(self, is_small: bool) -> int:
        return K_SMALL_BUFFER if is_small else K_LARGE_BUFFER

    def _grow_expandable(self, size: int, is_small: bool) -> Optional[Block]:
        seg = self._expandable.get(is_small)
        if seg is None:
            # Address space for the whole budget; pages are reserved only when mapped.
            seg = _Segment(self.device.address_space(self.device.budget_bytes + K_LARGE_BUFFER), 0, is_small)
            self._expandable[is_small] = seg
        page = self._page(is_small)
        grow = self._pages_needed(seg, size, page)
        if not self.device.grow(grow):
            self._release_cached_blocks()
            grow = self._pages_needed(seg, size, page)
            self.num_alloc_retries += 1
            if not self.device.grow(grow):
                return None
        pool = self.small if is_small else self.large
        tail = seg.tail
        if tail is not None and not tail.allocated:
            pool.remove(tail)
            tail.size += grow
            block = tail
        else:
            block = Block(seg.addr + seg.size, grow, pool, seg)
            block.prev = tail
            if tail is not None:
                tail.next = block
            seg.tail = block
        seg.size += grow
        return block

    @staticmethod
    def _pages_needed(seg: _Segment, size: int, page: int) -> int:
        tail = seg.tail
        have = tail.size if tail is not None and not tail.allocated else 0
        return round_up(size - have, page)

    def _unmap_tail(self, seg: _Segment) -> None:
        tail = seg.tail
        if tail is None or tail.allocated:
            return
        page = self._page(seg.small)
        unmap = tail.size // page * page
        if unmap == 0:
            return
        pool = tail.pool
        pool.remove(tail)
        if unmap == tail.size:
            prev = tail.prev
            if prev is not None:
                prev.next = None
            seg.tail = prev
        else:
            tail.size -= unmap
            pool.add(tail)
        seg.size -= unmap
        self.device.release(unmap)
