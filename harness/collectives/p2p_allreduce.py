"""AllReduce (sum) built from torch.distributed point-to-point operations.

These exist so the ring-vs-tree comparison can be made on any backend, gloo on CPU included,
where the backend's own allreduce hides which algorithm it uses. Both work for any world size
(not only powers of two) and any element count (not only multiples of the world size).

- Ring: reduce-scatter then all-gather, 2(p-1) steps, each moving ~n/p elements to the next
  rank. Bandwidth-optimal; latency grows linearly with p.
- Tree: binomial-tree reduce to rank 0 then binomial-tree broadcast, 2*ceil(log2 p) steps, each
  moving all n elements. Latency grows with log p; not pipelined, so unlike NCCL's pipelined
  double binary tree it is not bandwidth-optimal at large sizes.

Buffers are prepared once (``RingPlan`` / ``TreePlan``) so a step allocates nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


def _exchange(send: torch.Tensor, dst: int, recv: torch.Tensor, src: int) -> None:
    # Post both sides before waiting, so neighbours in the ring cannot deadlock on each other.
    # Empty chunks (count < world) are skipped on both sides: sizes are known to every rank.
    requests = []
    if send.numel():
        requests.append(dist.isend(send, dst))
    if recv.numel():
        requests.append(dist.irecv(recv, src))
    for request in requests:
        request.wait()


@dataclass
class RingPlan:
    buffer: torch.Tensor
    scratch: torch.Tensor
    chunks: tuple[torch.Tensor, ...]
    rank: int
    world: int

    @classmethod
    def for_buffer(cls, buffer: torch.Tensor, rank: int, world: int) -> "RingPlan":
        chunks = torch.tensor_split(buffer, world)  # views; sizes differ by at most one element
        largest = max(c.numel() for c in chunks)
        scratch = torch.empty(largest, dtype=buffer.dtype, device=buffer.device)
        return cls(buffer, scratch, tuple(chunks), rank, world)


def ring_allreduce(plan: RingPlan) -> None:
    rank, world, chunks = plan.rank, plan.world, plan.chunks
    if world == 1:
        return
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # Reduce-scatter: after p-1 steps rank r holds the full sum of chunk (r+1) mod p.
    for s in range(world - 1):
        incoming = chunks[(rank - s - 1) % world]
        tmp = plan.scratch[: incoming.numel()]
        _exchange(chunks[(rank - s) % world], nxt, tmp, prv)
        incoming.add_(tmp)
    # All-gather: pass each completed chunk around the ring, overwriting in place.
    for s in range(world - 1):
        _exchange(chunks[(rank - s + 1) % world], nxt, chunks[(rank - s) % world], prv)


@dataclass
class TreePlan:
    buffer: torch.Tensor
    scratch: torch.Tensor
    rank: int
    world: int

    @classmethod
    def for_buffer(cls, buffer: torch.Tensor, rank: int, world: int) -> "TreePlan":
        return cls(buffer, torch.empty_like(buffer), rank, world)


def tree_allreduce(plan: TreePlan) -> None:
    rank, world, buf = plan.rank, plan.world, plan.buffer
    if world == 1 or buf.numel() == 0:
        return
    # Reduce towards rank 0: at level `mask`, ranks with that bit set send to rank - mask and stop.
    mask = 1
    while mask < world:
        if rank & mask:
            dist.send(buf, rank - mask)
            break
        child = rank + mask
        if child < world:
            dist.recv(plan.scratch, child)
            buf.add_(plan.scratch)
        mask <<= 1
    # Broadcast back down the same tree: receive from the parent (lowest set bit cleared), then
    # send to children in decreasing distance.
    if rank == 0:
        low = 1
        while low < world:
            low <<= 1
    else:
        low = rank & -rank
        dist.recv(buf, rank - low)
    mask = low >> 1
    while mask:
        if rank + mask < world:
            dist.send(buf, rank + mask)
        mask >>= 1
