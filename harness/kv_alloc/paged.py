"""Paged KV blocks, vLLM style: memory is a pool of fixed blocks of ``block_tokens`` tokens.

A request of ``size`` bytes takes ceil(size / block_bytes) blocks from anywhere in the pool; they
need not be contiguous (the attention kernel follows a block table), so the only waste inside an
allocation is the unused tail of its last block. vLLM reserves its whole KV pool up front; this
model grows the pool on demand in chunks (``chunk_bytes``, 256 MiB by default) and never returns
them, so that reserved-vs-allocated means the same thing as for the caching allocators. A chunk
at the end of the budget is cut to the blocks that still fit.
"""
from __future__ import annotations

from harness.kv_alloc.base import AllocatorStats, Device, Extent, Handles, Layout, MiB, OutOfMemory

DEFAULT_CHUNK_BYTES = 256 * MiB


class PagedAllocator:
    name = "paged"

    def __init__(self, budget_bytes: int, block_bytes: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        if block_bytes <= 0:
            raise ValueError(f"block_bytes must be > 0, got {block_bytes}")
        self.device = Device(budget_bytes)
        self.block_bytes = block_bytes
        self.chunk_blocks = max(1, chunk_bytes // block_bytes)
        self._free: list[int] = []  # block addresses, used as a stack
        self._chunks: list[Extent] = []
        self._live = Handles(self.name)
        self._allocated = 0
        self._live_blocks = 0
        self.num_ooms = 0

    def malloc(self, size_bytes: int) -> int:
        if size_bytes <= 0:
            raise ValueError(f"size_bytes must be > 0, got {size_bytes}")
        n = -(-size_bytes // self.block_bytes)
        free = self._free
        while len(free) < n:
            if not self._grow():
                self.num_ooms += 1
                raise OutOfMemory(size_bytes, self.device.reserved_bytes, self._allocated, self.device.budget_bytes)
        blocks = free[-n:]
        del free[-n:]
        handle = self._live.issue((blocks, size_bytes))
        self._allocated += size_bytes
        self._live_blocks += n
        return handle

    def free(self, handle: int) -> None:
        entry = self._live.retire(handle)
        blocks, requested = entry
        self._allocated -= requested
        self._live_blocks -= len(blocks)
        self._free.extend(reversed(blocks))

    def _grow(self) -> bool:
        room = (self.device.budget_bytes - self.device.reserved_bytes) // self.block_bytes
        count = min(self.chunk_blocks, room)
        if count <= 0:
            return False
        size = count * self.block_bytes
        addr = self.device.reserve(size)
        assert addr is not None
        self._chunks.append(Extent(addr, size))
        bb = self.block_bytes
        # Push in reverse so the lowest address is handed out first.
        self._free.extend(range(addr + (count - 1) * bb, addr - 1, -bb))
        return True

    def _free_runs(self) -> list[Extent]:
        runs: list[Extent] = []
        bb = self.block_bytes
        start = prev = None
        for a in sorted(self._free):
            if prev is not None and a == prev + bb:
                prev = a
                continue
            if start is not None:
                runs.append(Extent(start, prev + bb - start))
            start = prev = a
        if start is not None:
            runs.append(Extent(start, prev + bb - start))
        return runs

    def stats(self) -> AllocatorStats:
        reserved = self.device.reserved_bytes
        live_bytes = self._live_blocks * self.block_bytes
        runs = self._free_runs()
        return AllocatorStats(
            reserved_bytes=reserved,
            allocated_bytes=self._allocated,
            internal_waste_bytes=live_bytes - self._allocated,
            free_bytes=reserved - live_bytes,
            largest_free_extent_bytes=max((r.size_bytes for r in runs), default=0),
            peak_reserved_bytes=self.device.peak_reserved_bytes,
            live_handles=len(self._live),
            segments=len(self._chunks),
            num_ooms=self.num_ooms,
            num_alloc_retries=0,
        )

    def layout(self) -> Layout:
        bb = self.block_bytes
        live = {h: tuple(Extent(a, bb) for a in blocks) for h, (blocks, _) in self._live.items()}
        return Layout(live, tuple(self._free_runs()), tuple(self._chunks))
