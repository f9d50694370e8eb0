"""What every allocator model shares: its interface, its statistics, its errors, the device budget.

An allocator model hands out *handles* (ints, never reused) for requested sizes and keeps an
exact account of every byte it holds from the device:

    reserved_bytes = allocated_bytes + internal_waste_bytes + free_bytes

- ``reserved_bytes``: taken from the device (segments, regions, slabs, block pools).
- ``allocated_bytes``: bytes the caller asked for, summed over live handles.
- ``internal_waste_bytes``: bytes handed out beyond the request (rounding, unsplit remainders,
  size classes, the unused tail of the last block).
- ``free_bytes``: reserved but held by no live handle (the cache).

These are models of allocator *policies* replayed in Python; no byte of device memory is touched.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Protocol

GiB = 1 << 30
MiB = 1 << 20


class AllocatorError(Exception):
    """Misuse of an allocator: a handle it never gave out, or one already freed."""


class UnknownHandle(AllocatorError):
    pass


class DoubleFree(AllocatorError):
    pass


class Handles(dict):
    """The live handles of one allocator (handle -> whatever it keeps per allocation): numbering,
    and the errors for a handle freed twice or never given out, the same for every allocator."""

    def __init__(self, owner: str) -> None:
        super().__init__()
        self.owner = owner
        self._freed: set[int] = set()
        self._next = 1

    def issue(self, entry) -> int:
        handle = self._next
        self._next += 1
        self[handle] = entry
        return handle

    def retire(self, handle: int):
        entry = self.pop(handle, None)
        if entry is None:
            if handle in self._freed:
                raise DoubleFree(f"{self.owner}: handle {handle} was already freed")
            raise UnknownHandle(f"{self.owner}: handle {handle} was never allocated")
        self._freed.add(handle)
        return entry


class OutOfMemory(Exception):
    """The device budget cannot hold the request, even after releasing cached memory."""

    def __init__(self, size_bytes: int, reserved_bytes: int, allocated_bytes: int, budget_bytes: int) -> None:
        super().__init__(
            f"out of memory: tried to allocate {size_bytes} B with {reserved_bytes} B reserved "
            f"({allocated_bytes} B allocated) of a {budget_bytes} B budget"
        )
        self.size_bytes = size_bytes


@dataclass(frozen=True)
class AllocatorStats:
    reserved_bytes: int
    allocated_bytes: int
    internal_waste_bytes: int
    free_bytes: int
    largest_free_extent_bytes: int  # largest contiguous free range inside reserved memory
    peak_reserved_bytes: int
    live_handles: int
    segments: int  # device reservations currently held (segments, regions, slabs, pool chunks)
    num_ooms: int  # mallocs that raised OutOfMemory
    num_alloc_retries: int  # device reservations retried after releasing cache (PyTorch's stat)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Extent:
    """A contiguous byte range at a (model) virtual address."""

    addr: int
    size_bytes: int

    @property
    def end(self) -> int:
        return self.addr + self.size_bytes


@dataclass(frozen=True)
class Layout:
    """Where everything is, for invariant checks: the extents of each live handle, the free
    extents (adjacent free ranges of one reservation already merged), and the reservations."""

    live: dict  # handle -> tuple[Extent, ...] (one extent unless the allocator is paged)
    free: tuple  # tuple[Extent, ...]
    reservations: tuple  # tuple[Extent, ...]


class Allocator(Protocol):
    name: str

    def malloc(self, size_bytes: int) -> int: ...

    def free(self, handle: int) -> None: ...

    def stats(self) -> AllocatorStats: ...

    def layout(self) -> Layout: ...


class Device:
    """The memory budget: a counter of bytes reserved from the device.

    CUDA hands out virtual addresses, so a reservation never fails for want of a contiguous
    physical range; only the total counts. Addresses are a bump pointer: a released range is
    never handed out again, which keeps overlap checks meaningful across reservations.
    """

    # Gap between reservations so that two of them are never adjacent (they must never merge).
    GUARD_BYTES = 1 << 21

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be > 0, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self.reserved_bytes = 0
        self.peak_reserved_bytes = 0
        self._next_addr = 1 << 32

    def can_reserve(self, size_bytes: int) -> bool:
        return self.reserved_bytes + size_bytes <= self.budget_bytes

    def reserve(self, size_bytes: int) -> int | None:
        """Reserve ``size_bytes``; the base address, or None when the budget would be exceeded."""
        if not self.can_reserve(size_bytes):
            return None
        self.reserved_bytes += size_bytes
        if self.reserved_bytes > self.peak_reserved_bytes:
            self.peak_reserved_bytes = self.reserved_bytes
        addr = self._next_addr
        self._next_addr += size_bytes + self.GUARD_BYTES
        return addr

    def grow(self, size_bytes: int) -> bool:
        """Add bytes to an existing reservation (expandable segments map more pages)."""
        if not self.can_reserve(size_bytes):
            return False
        self.reserved_bytes += size_bytes
        if self.reserved_bytes > self.peak_reserved_bytes:
            self.peak_reserved_bytes = self.reserved_bytes
        return True

    def release(self, size_bytes: int) -> None:
        self.reserved_bytes -= size_bytes
        assert self.reserved_bytes >= 0, "released more than reserved"

    def address_space(self, size_bytes: int) -> int:
        """Virtual address range that costs nothing until pages are mapped (via ``grow``)."""
        addr = self._next_addr
        self._next_addr += size_bytes + self.GUARD_BYTES
        return addr


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def merged_extents(extents: Iterable[Extent]) -> list[Extent]:
    """Sort and merge touching extents (used for free ranges of one reservation)."""
    out: list[Extent] = []
    for e in sorted(extents, key=lambda x: x.addr):
        if out and out[-1].end == e.addr:
            out[-1] = Extent(out[-1].addr, out[-1].size_bytes + e.size_bytes)
        else:
            out.append(e)
    return out
