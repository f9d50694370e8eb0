"""Block-list mechanics shared by the best-fit allocators (the caching allocator and BFC).

A reservation (segment, region) is a chain of blocks linked by address (``prev``/``next``).
Free blocks sit in a best-fit index ordered by (size, address), so the smallest block that fits
is found in O(log n), the way PyTorch's ``BlockPool`` (a ``std::set`` ordered by size then
pointer) and TensorFlow's BFC bins are searched. Freeing merges a block with its free
neighbours in the *same* chain only: two reservations never merge.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from typing import Optional

from sortedcontainers import SortedList

from harness.kv_alloc.base import Extent


class Block:
    __slots__ = ("addr", "size", "requested", "allocated", "prev", "next", "pool", "chain")

    def __init__(self, addr: int, size: int, pool: "FreeIndex", chain: object) -> None:
        self.addr = addr
        self.size = size
        self.requested = 0
        self.allocated = False
        self.prev: Optional[Block] = None
        self.next: Optional[Block] = None
        self.pool = pool
        self.chain = chain  # the reservation this block belongs to

    @property
    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class FreeIndex:
    """Free blocks of one pool, best-fit searchable.

    Sizes repeat a lot in KV traffic (blocks, chunks), so blocks are bucketed by exact size:
    a sorted list of the distinct sizes finds the smallest size that fits, and each bucket keeps
    its addresses sorted, so the lowest address among equals is chosen, the order of PyTorch's
    (size, pointer) set.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._sizes = SortedList()
        self._buckets: dict[int, list[int]] = {}
        self._by_addr: dict[int, Block] = {}

    def __len__(self) -> int:
        return len(self._by_addr)

    def add(self, block: Block) -> None:
        size = block.size
        bucket = self._buckets.get(size)
        if bucket is None:
            self._buckets[size] = [block.addr]
            self._sizes.add(size)
        elif block.addr > bucket[-1]:
            bucket.append(block.addr)
        else:
            insort(bucket, block.addr)
        self._by_addr[block.addr] = block

    def remove(self, block: Block) -> None:
        size = block.size
        bucket = self._buckets[size]
        del bucket[bisect_left(bucket, block.addr)]
        if not bucket:
            del self._buckets[size]
            self._sizes.remove(size)
        del self._by_addr[block.addr]

    def best_fit(self, size: int) -> Optional[Block]:
        """Remove and return the smallest free block of at least ``size`` bytes (lowest address
        among equals), or None."""
        bucket = self._buckets.get(size)
        if bucket is None:
            sizes = self._sizes
            i = sizes.bisect_left(size)
            if i == len(sizes):
                return None
            size = sizes[i]
            bucket = self._buckets[size]
        addr = bucket.pop(0)
        if not bucket:
            del self._buckets[size]
            self._sizes.remove(size)
        return self._by_addr.pop(addr)

    def largest(self) -> int:
        return self._sizes[-1] if self._sizes else 0

    def blocks(self) -> list[Block]:
        return list(self._by_addr.values())

    def extents(self) -> list[Extent]:
        return [Extent(b.addr, b.size) for b in self._by_addr.values()]


def split(block: Block, size: int) -> Block:
    """Cut ``block`` to ``size`` bytes; the remainder becomes a new free block right after it,
    added to the pool's index. Returns the remainder."""
    rest = Block(block.addr + size, block.size - size, block.pool, block.chain)
    rest.prev = block
    rest.next = block.next
    if block.next is not None:
        block.next.prev = rest
    block.next = rest
    block.size = size
    block.pool.add(rest)
    return rest


def release(block: Block) -> Block:
    """Mark ``block`` free, merge it with free neighbours of its chain, index the result."""
    block.allocated = False
    block.requested = 0
    pool = block.pool
    prev, nxt = block.prev, block.next
    if prev is not None and not prev.allocated:
        pool.remove(prev)
        prev.size += block.size
        prev.next = nxt
        if nxt is not None:
            nxt.prev = prev
        block = prev
    if nxt is not None and not nxt.allocated:
        pool.remove(nxt)
        block.size += nxt.size
        block.next = nxt.next
        if nxt.next is not None:
            nxt.next.prev = block
    pool.add(block)
    return block
