"""Slab allocator with size classes fitted to the observed sizes and pre-sized pools.

- ``fit_size_classes`` places ``n_classes`` class sizes at evenly spaced quantiles of the
  observed request sizes (rounded up to ``granularity_bytes``; the last class is the largest size
  seen), so classes are dense where requests are.
- Each class owns slabs: one device reservation of ``slots`` equal slots. A request takes a free
  slot of the smallest class that holds it; the slot's unused bytes are internal waste.
- ``presize_bytes`` reserves slabs for each class at construction (``presize_plan`` splits a total
  by each class's share of the observed bytes); pools grow by one slab when a class runs out.
- A request larger than every class gets a reservation of its own (rounded to 2 MiB), returned
  to the device when freed.
- When a slab cannot be reserved, empty slabs of every class are returned to the device and the
  reservation is retried once (counted in ``num_alloc_retries``).
"""
from __future__ import annotations

import bisect
from typing import Mapping, Optional, Sequence

import numpy as np

from harness.kv_alloc.base import AllocatorStats, Device, Extent, Handles, Layout, MiB, OutOfMemory, round_up

DEFAULT_SLAB_BYTES = 1 << 30
OVERSIZE_ROUND = 2 * MiB


def fit_size_classes(sizes_bytes: Sequence[int], n_classes: int = 16, granularity_bytes: int = 2 * MiB) -> tuple[int, ...]:
    """Class sizes at the 1/n, 2/n, ..., 1 quantiles of the observed sizes."""
    if n_classes < 1:
        raise ValueError(f"n_classes must be >= 1, got {n_classes}")
    values = np.asarray(sizes_bytes, dtype=np.float64)
    if values.size == 0:
        raise ValueError("cannot fit size classes to zero observed sizes")
    qs = np.quantile(values, np.arange(1, n_classes + 1) / n_classes, method="higher")
    classes = sorted({round_up(int(q), granularity_bytes) for q in qs})
    return tuple(classes)


def presize_plan(sizes_bytes: Sequence[int], classes: Sequence[int], total_bytes: int) -> dict[int, int]:
    """Split ``total_bytes`` over classes by each class's share of the observed bytes."""
    values = np.asarray(sizes_bytes, dtype=np.int64)
    idx = np.searchsorted(np.asarray(classes), values, side="left")
    demand = np.zeros(len(classes), dtype=np.float64)
    inside = idx < len(classes)
    np.add.at(demand, idx[inside], np.asarray(classes)[idx[inside]].astype(np.float64))
    if demand.sum() == 0:
        return {}
    share = demand / demand.sum()
    return {int(c): int(total_bytes * s) for c, s in zip(classes, share) if s > 0}


class _Slab:
    __slots__ = ("addr", "cls", "slots", "live")

    def __init__(self, addr: int, cls: int, slots: int) -> None:
        self.addr = addr
        self.cls = cls
        self.slots = slots
        self.live = 0


class SlabAllocator:
    name = "slab"

    def __init__(self, budget_bytes: int, class_sizes: Sequence[int], slab_bytes: int = DEFAULT_SLAB_BYTES,
                 presize_bytes: Optional[Mapping[int, int]] = None) -> None:
        classes = sorted(set(int(c) for c in class_sizes))
        if not classes or classes[0] <= 0:
            raise ValueError(f"class sizes must be positive, got {class_sizes!r}")
        self.device = Device(budget_bytes)
        self.classes = tuple(classes)
        self.slab_bytes = slab_bytes
        self._free: dict[int, list[tuple[_Slab, int]]] = {c: [] for c in classes}  # class -> (slab, slot)
        self._slabs: dict[int, _Slab] = {}
        self._oversize: dict[int, Extent] = {}
        self._live = Handles(self.name)
        self._allocated = 0
        self._live_block_bytes = 0
        self.num_ooms = 0
        self.num_alloc_retries = 0
        for cls, nbytes in (presize_bytes or {}).items():
            if cls not in self._free:
                raise ValueError(f"presize class {cls} is not one of {self.classes}")
            for _ in range(-(-nbytes // self._slab_size(cls))):
                if not self._new_slab(cls):
                    break

    def _slots_per_slab(self, cls: int) -> int:
        return max(1, self.slab_bytes // cls)

    def _slab_size(self, cls: int) -> int:
        return self._slots_per_slab(cls) * cls

    def _new_slab(self, cls: int) -> bool:
        slots = self._slots_per_slab(cls)
        addr = self.device.reserve(slots * cls)
        if addr is None:
            return False
        slab = _Slab(addr, cls, slots)
        self._slabs[addr] = slab
        # Reverse so the lowest slot is handed out first.
        self._free[cls].extend((slab, i) for i in range(slots - 1, -1, -1))
        return True

    def _release_empty_slabs(self) -> None:
        empty = [s for s in self._slabs.values() if s.live == 0]
        if not empty:
            return
        gone = set(id(s) for s in empty)
        for s in empty:
            del self._slabs[s.addr]
            self.device.release(s.slots * s.cls)
        for cls in {s.cls for s in empty}:
            self._free[cls] = [(slab, i) for slab, i in self._free[cls] if id(slab) not in gone]

    def _reserve(self, make) -> bool:
        if make():
            return True
        self._release_empty_slabs()
        self.num_alloc_retries += 1
        return make()

    def _class_for(self, size: int) -> Optional[int]:
        i = bisect.bisect_left(self.classes, size)
        return self.classes[i] if i < len(self.classes) else None

    def malloc(self, size_bytes: int) -> int:
        if size_bytes <= 0:
            raise ValueError(f"size_bytes must be > 0, got {size_bytes}")
        cls = self._class_for(size_bytes)
        if cls is None:
            size = round_up(size_bytes, OVERSIZE_ROUND)
            holder: list[int] = []

            def make() -> bool:
                addr = self.device.reserve(size)
                if addr is not None:
                    holder.append(addr)
                return addr is not None

            if not self._reserve(make):
                self.num_ooms += 1
                raise OutOfMemory(size_bytes, self.device.reserved_bytes, self._allocated, self.device.budget_bytes)
            addr = holder[0]
            self._oversize[addr] = Extent(addr, size)
            entry = (None, 0, addr, size_bytes)
            block = size
        else:
            free = self._free[cls]
            if not free and not self._reserve(lambda: self._new_slab(cls)):
                self.num_ooms += 1
                raise OutOfMemory(size_bytes, self.device.reserved_bytes, self._allocated, self.device.budget_bytes)
            slab, slot = free.pop()
            slab.live += 1
            entry = (slab, slot, slab.addr + slot * cls, size_bytes)
            block = cls
        handle = self._live.issue(entry)
        self._allocated += size_bytes
        self._live_block_bytes += block
        return handle

    def free(self, handle: int) -> None:
        entry = self._live.retire(handle)
        slab, slot, addr, requested = entry
        self._allocated -= requested
        if slab is None:
            ext = self._oversize.pop(addr)
            self._live_block_bytes -= ext.size_bytes
            self.device.release(ext.size_bytes)
        else:
            slab.live -= 1
            self._live_block_bytes -= slab.cls
            self._free[slab.cls].append((slab, slot))

    def _free_runs(self) -> list[Extent]:
        by_slab: dict[int, list[int]] = {}
        for items in self._free.values():
            for slab, slot in items:
                by_slab.setdefault(slab.addr, []).append(slot)
        runs: list[Extent] = []
        for addr, slots in by_slab.items():
            cls = self._slabs[addr].cls
            slots.sort()
            start = prev = slots[0]
            for s in slots[1:] + [None]:
                if s is not None and s == prev + 1:
                    prev = s
                    continue
                runs.append(Extent(addr + start * cls, (prev - start + 1) * cls))
                if s is not None:
                    start = prev = s
        return runs

    def stats(self) -> AllocatorStats:
        reserved = self.device.reserved_bytes
        runs = self._free_runs()
        return AllocatorStats(
            reserved_bytes=reserved,
            allocated_bytes=self._allocated,
            internal_waste_bytes=self._live_block_bytes - self._allocated,
            free_bytes=reserved - self._live_block_bytes,
            largest_free_extent_bytes=max((r.size_bytes for r in runs), default=0),
            peak_reserved_bytes=self.device.peak_reserved_bytes,
            live_handles=len(self._live),
            segments=len(self._slabs) + len(self._oversize),
            num_ooms=self.num_ooms,
            num_alloc_retries=self.num_alloc_retries,
        )

    def layout(self) -> Layout:
        live = {}
        for h, (slab, _slot, addr, _req) in self._live.items():
            size = slab.cls if slab is not None else self._oversize[addr].size_bytes
            live[h] = (Extent(addr, size),)
        reservations = [Extent(s.addr, s.slots * s.cls) for s in self._slabs.values()] + list(self._oversize.values())
        return Layout(live, tuple(self._free_runs()), tuple(reservations))
