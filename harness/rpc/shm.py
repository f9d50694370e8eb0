"""A shared-memory ring between two processes: the fastest request/reply path on one host.

One ``multiprocessing.shared_memory`` segment holds two single-producer single-consumer rings
(client->server and server->client). Each ring is fixed slots plus two counters on their own
cache lines: ``head`` (messages published, written only by the producer) and ``tail`` (messages
consumed, written only by the consumer). A producer writes the slot, then bumps ``head``; x86
keeps stores in order, so a consumer that sees the new ``head`` sees the slot. (On a weakly
ordered CPU this needs fences that pure Python cannot issue; the family says so in its report.)

Waiting is a busy-poll with a bounded back-off: spin for up to ``SPIN_POLLS`` reads
(microseconds: where the low latency comes from; the budget adapts like an adaptive mutex,
doubling when the reply came while spinning and halving when it did not, because on a busy host
a spinner only delays a peer that is waiting for a CPU), then block on a doorbell: the consumer raises a "sleeping"
flag, re-checks the ring, and waits on a FIFO that the producer writes one byte to when it sees
the flag. The wait has a 1 ms timeout, which bounds the cost of the one race pure Python cannot
close (flag store and head load may be reordered), and an idle ring costs a wake-up per
millisecond instead of a whole core. A sleeper woken by the kernel is also scheduled ahead of
spinners on a busy host, which a pure spin/sleep back-off is not. While backing off, the waiter
calls ``on_idle`` so the client notices a dead server and the server the stop event. (A full
ring, rare with one request in flight, is waited out with yield and doubling sleeps.)

Slot layout: u32 body length | u8 kind | 3 pad | body (at most ``max_bytes``).
"""
from __future__ import annotations

import os
import select
import struct
import time
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Callable, Optional

from harness.rpc.framing import (KIND_ERROR, KIND_REPLY, KIND_REQUEST, MAX_FRAME_BYTES, MalformedFrame, OversizedFrame,
                                 ServerError)
from harness.rpc.server import Control

COUNTER = struct.Struct("<Q")
SLOT_HEADER = struct.Struct("<IB3x")
CACHE_LINE = 64
RING_HEADER_BYTES = 2 * CACHE_LINE  # head on one line, tail on the next: no false sharing
SPIN_POLLS = 2_000  # ~0.2 ms of polling at most before the doorbell
MIN_SPIN_POLLS = 32  # the adaptive budget never drops below this (~3 us)
DOORBELL_TIMEOUT_S = 1e-3
FLAG_OFFSET = 8  # sleeping flag: on the consumer's (tail) cache line, after tail
YIELD_POLLS = 2_000
MIN_SLEEP_S = 20e-6
MAX_SLEEP_S = 1e-3


def ring_bytes(nslots: int, max_bytes: int) -> int:
    slot = SLOT_HEADER.size + _round_up(max_bytes, 8)
    return RING_HEADER_BYTES + nslots * slot


def segment_bytes(nslots: int, max_bytes: int) -> int:
    return 2 * ring_bytes(nslots, max_bytes)


def _round_up(n: int, k: int) -> int:
    return (n + k - 1) // k * k


class Ring:
    """One direction. The producer side calls ``push``, the consumer side ``pop``."""

    def __init__(self, buf: memoryview, offset: int, nslots: int, max_bytes: int,
                 on_idle: Callable[[], None] = lambda: None, doorbell: Optional[str] = None) -> None:
        self.buf = buf
        self.head_at = offset
        self.tail_at = offset + CACHE_LINE
        self.flag_at = self.tail_at + FLAG_OFFSET
        # O_RDWR on a FIFO never blocks in open and keeps it alive whichever side goes first.
        self.bell = os.open(doorbell, os.O_RDWR | os.O_NONBLOCK) if doorbell else None
        self.slots_at = offset + RING_HEADER_BYTES
        self.slot_bytes = SLOT_HEADER.size + _round_up(max_bytes, 8)
        self.nslots = nslots
        self.max_bytes = max_bytes
        self.on_idle = on_idle
        self.spin_polls = SPIN_POLLS  # adaptive: doubles when spinning pays off, halves when not
        # Each side keeps its own counter locally; only the other side's is read from memory.
        self.head = COUNTER.unpack_from(buf, self.head_at)[0]
        self.tail = COUNTER.unpack_from(buf, self.tail_at)[0]

    def push(self, body: bytes, kind: int = KIND_REQUEST) -> None:
        length = len(body)
        if length > self.max_bytes:
            raise OversizedFrame(length, self.max_bytes)
        buf, head = self.buf, self.head
        if head - COUNTER.unpack_from(buf, self.tail_at)[0] >= self.nslots:
            self._wait(lambda: head - COUNTER.unpack_from(buf, self.tail_at)[0] < self.nslots)
        slot = self.slots_at + (head % self.nslots) * self.slot_bytes
        start = slot + SLOT_HEADER.size
        buf[start : start + length] = body
        SLOT_HEADER.pack_into(buf, slot, length, kind)
        self.head = head + 1
        COUNTER.pack_into(buf, self.head_at, head + 1)
        if buf[self.flag_at] and self.bell is not None:
            try:
                os.write(self.bell, b"\x01")
            except BlockingIOError:
                pass  # the FIFO is full of wake-ups already

    def pop(self) -> tuple[int, bytes]:
        """(kind, body). A slot whose length exceeds the bound raises ``OversizedFrame``, after
        consuming it, so the ring stays in step."""
        buf, tail = self.buf, self.tail
        unpack, head_at = COUNTER.unpack_from, self.head_at
        if unpack(buf, head_at)[0] == tail:
            budget = self.spin_polls
            for _ in range(budget):
                if unpack(buf, head_at)[0] != tail:
                    if budget < SPIN_POLLS:
                        self.spin_polls = min(SPIN_POLLS, budget * 2)
                    break
            else:
                # The peer did not answer while we spun: on a busy host it is probably waiting
                # for a CPU, and spinning longer only keeps it waiting. Spin less next time.
                self.spin_polls = max(MIN_SPIN_POLLS, budget // 2)
                self._sleep_until_data(tail)
        slot = self.slots_at + (tail % self.nslots) * self.slot_bytes
        length, kind = SLOT_HEADER.unpack_from(buf, slot)
        try:
            if length > self.max_bytes:
                raise OversizedFrame(length, self.max_bytes)
            start = slot + SLOT_HEADER.size
            return kind, bytes(buf[start : start + length])
        finally:
            self.tail = tail + 1
            COUNTER.pack_into(buf, self.tail_at, tail + 1)

    def _sleep_until_data(self, tail: int) -> None:
        if self.bell is None:
            self._wait(lambda: COUNTER.unpack_from(self.buf, self.head_at)[0] != tail)
            return
        buf, head_at, flag_at, bell = self.buf, self.head_at, self.flag_at, self.bell
        while COUNTER.unpack_from(buf, head_at)[0] == tail:
            self.on_idle()
            buf[flag_at] = 1
            if COUNTER.unpack_from(buf, head_at)[0] != tail:
                buf[flag_at] = 0
                return
            select.select([bell], [], [], DOORBELL_TIMEOUT_S)
            buf[flag_at] = 0
            try:
                os.read(bell, 4096)
            except BlockingIOError:
                pass

    def close(self) -> None:
        if self.bell is not None:
            os.close(self.bell)
            self.bell = None

    def _wait(self, ready: Callable[[], bool]) -> None:
        polls = 0
        sleep_s = MIN_SLEEP_S
        while not ready():
            polls += 1
            if polls < SPIN_POLLS:
                continue
            self.on_idle()
            if polls < SPIN_POLLS + YIELD_POLLS:
                os.sched_yield()
            else:
                time.sleep(sleep_s)
                sleep_s = min(sleep_s * 2, MAX_SLEEP_S)


@dataclass(frozen=True)
class ShmServerConfig:
    name: str
    nslots: int = 16
    max_bytes: int = MAX_FRAME_BYTES
    request_bell: Optional[str] = None  # FIFO paths (see module doc); None: spin/sleep only
    reply_bell: Optional[str] = None


class _Stopped(Exception):
    pass


def serve(config: ShmServerConfig, control: Control) -> None:
    seg = shared_memory.SharedMemory(name=config.name)
    parent = os.getppid()

    def idle() -> None:
        if control.stopping() or os.getppid() != parent:
            raise _Stopped

    buf = seg.buf
    size = ring_bytes(config.nslots, config.max_bytes)
    requests = Ring(buf, 0, config.nslots, config.max_bytes, idle, config.request_bell)
    replies = Ring(buf, size, config.nslots, config.max_bytes, idle, config.reply_bell)
    control.counters.add("connections")
    control.ready(config.name)
    served = 0
    try:
        while True:
            try:
                kind, body = requests.pop()
            except OversizedFrame as exc:
                control.counters.add("oversized")
                replies.push(str(exc).encode(), KIND_ERROR)
                continue
            if kind != KIND_REQUEST:
                control.counters.add("malformed")
                replies.push(f"slot kind {kind} is not a request".encode(), KIND_ERROR)
                continue
            replies.push(body, KIND_REPLY)
            served += 1
            if served == 256:
                control.counters.add("frames", served)
                served = 0
    except _Stopped:
        pass
    finally:
        control.counters.add("frames", served)
        requests.close()
        replies.close()
        del requests, replies, buf
        seg.close()


class ShmClient:
    """Creates the segment (the server attaches by name) and unlinks it on close."""

    def __init__(self, nslots: int = 16, max_bytes: int = MAX_FRAME_BYTES, workdir: Optional[str] = None) -> None:
        self.nslots = nslots
        self.max_bytes = max_bytes
        self.bells: tuple[Optional[str], Optional[str]] = (None, None)
        if workdir is not None:
            self.bells = (os.path.join(workdir, "requests.bell"), os.path.join(workdir, "replies.bell"))
            for path in self.bells:
                os.mkfifo(path, 0o600)
        self.segment = shared_memory.SharedMemory(create=True, size=segment_bytes(nslots, max_bytes))
        self.on_idle: Callable[[], None] = lambda: None
        size = ring_bytes(nslots, max_bytes)
        self.requests = Ring(self.segment.buf, 0, nslots, max_bytes, self._idle, self.bells[0])
        self.replies = Ring(self.segment.buf, size, nslots, max_bytes, self._idle, self.bells[1])

    def config(self) -> ShmServerConfig:
        return ShmServerConfig(self.segment.name, self.nslots, self.max_bytes, *self.bells)

    def _idle(self) -> None:
        self.on_idle()

    def send(self, body: bytes) -> None:
        self.requests.push(body, KIND_REQUEST)

    def recv(self) -> bytes:
        kind, body = self.replies.pop()
        if kind == KIND_ERROR:
            raise ServerError(body.decode("utf-8", "replace"))
        if kind != KIND_REPLY:
            raise MalformedFrame(f"reply slot kind {kind}")
        return body

    def request(self, body: bytes) -> bytes:
        self.requests.push(body, KIND_REQUEST)
        return self.recv()

    def close(self) -> None:
        if self.segment is None:
            return
        # Views into the buffer must go before the segment can close.
        self.requests.close()
        self.replies.close()
        self.requests = self.replies = None  # type: ignore[assignment]
        self.segment.close()
        self.segment.unlink()
        self.segment = None  # type: ignore[assignment]
