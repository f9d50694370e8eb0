"""Runs one stage's program (``schedule.program``) over torch.distributed point-to-point operations.

Buffers are allocated once per (message kind, slot), so a step allocates nothing. Data is real:
stage 0 writes a payload that depends on (step, microbatch), every forward adds 1, every backward
subtracts 1, so the value a stage receives for a microbatch is known in advance and ``verify``
mode checks each one (header and checksum). The clock is read only around compute, to split each
stage's time into busy and idle; the step itself is timed by the driver.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from harness.pipeline import link
from harness.pipeline.schedule import (SMALL_KINDS, Batch, Compute, Key, Recv, Send, WaitRecv, WaitSend, messages,
                                       program)

VALUE_MODULUS = 1 << 20  # keeps every payload sum far inside int64


@dataclass
class StageStats:
    busy_ns: int = 0  # compute (including the payload update) in non-verify steps
    wall_ns: int = 0  # this stage's own step durations, same steps
    steps: int = 0
    computes: int = 0
    checked: int = 0  # messages verified (verify steps)
    wrong: int = 0
    first_wrong: str = ""


@dataclass
class Stage:
    schedule: str
    stage: int
    stages: int
    microbatches: int
    fwd_s: float
    bwd_s: float
    one_way_ns: int
    act_bytes: int
    compute: link.Compute
    device: Any
    batched_p2p: bool = True
    die_at_step: int = -1  # fault injection for tests: this stage exits at that step
    prog: list = field(default_factory=list)
    stats: StageStats = field(default_factory=StageStats)
    step_no: int = 0
    verify: bool = False

    def __post_init__(self) -> None:
        self.prog = program(self.schedule, self.stages, self.microbatches, self.stage)
        words = link.payload_words(self.act_bytes) + link.HEADER_WORDS
        self.payload_n = words - link.HEADER_WORDS
        self.recv_bufs: dict[tuple[str, int], torch.Tensor] = {}
        self.send_bufs: dict[tuple[str, int], torch.Tensor] = {}
        self.recv_slot: dict[Key, int] = {}
        self.send_slot: dict[Key, int] = {}
        for op in messages(self.prog):
            size = link.SMALL_MESSAGE_WORDS if op.key.kind in SMALL_KINDS else words
            table, slots = (self.send_bufs, self.send_slot) if isinstance(op, Send) else (self.recv_bufs, self.recv_slot)
            slots[op.key] = op.slot
            if (op.key.kind, op.slot) not in table:
                table[(op.key.kind, op.slot)] = torch.zeros(size, dtype=torch.int64, device=self.device)
        last = self.stage == self.stages - 1
        # The last stage keeps each microbatch's output (its backward starts from it); stage 0
        # keeps the gradient that reaches it. Both are checked like received messages.
        self.stash = [torch.zeros(self.payload_n, dtype=torch.int64, device=self.device)
                      for _ in range(self.microbatches)] if last else []
        self.sink = torch.zeros(self.payload_n, dtype=torch.int64, device=self.device)
        self.base = torch.arange(self.payload_n, dtype=torch.int64, device=self.device)
        self.pending: dict[Key, Any] = {}
        self.pending_send: dict[Key, Any] = {}

    # ---- expected contents -----------------------------------------------------------------
    def value(self, mb: int) -> int:
        return (self.step_no * self.microbatches + mb) % VALUE_MODULUS

    def expected_sum(self, kind: str, mb: int, at_stage: int) -> int:
        n, v, P = self.payload_n, self.value(mb), self.stages
        base_sum = n * v + n * (n - 1) // 2
        if kind == "act":  # input of stage at_stage: base + at_stage
            return base_sum + n * at_stage
        # gradient reaching at_stage from at_stage+1: -(base + P) - (P - 1 - at_stage)
        return -(base_sum + n * P) - n * (P - 1 - at_stage)

    def _verify(self, key: Key, message: torch.Tensor, payload_kind: str | None, at_stage: int) -> None:
        st = self.stats
        st.checked += 1
        header = message[: link.HEADER_WORDS].tolist()
        problems = []
        if header[1] != key.index or header[2] != self.step_no or header[3] != link.KIND_CODES[key.kind]:
            problems.append(f"header {header[1:]} != {[key.index, self.step_no, link.KIND_CODES[key.kind]]}")
        if payload_kind is not None:
            got = int(message[link.HEADER_WORDS:].sum().item())
            want = self.expected_sum(payload_kind, key.index, at_stage)
            if got != want:
                problems.append(f"checksum {got} != {want}")
        if problems:
            st.wrong += 1
            if not st.first_wrong:
                st.first_wrong = f"stage {self.stage} step {self.step_no} {key.kind}{key.index}: {'; '.join(problems)}"

    # ---- actions ----------------------------------------------------------------------------
    def run_step(self) -> None:
        t0 = time.perf_counter_ns()
        busy = 0
        for action in self.prog:
            kind = type(action)
            if kind is Compute:
                busy += self._compute(action.work)
            elif kind is Recv:
                self._recv(action)
            elif kind is WaitRecv:
                self.pending.pop(action.key).wait()
                self._arrived(action.key, self.recv_bufs[(action.key.kind, self.recv_slot[action.key])])
            elif kind is Send:
                self._send(action)
            elif kind is WaitSend:
                self.pending_send.pop(action.key).wait()
            elif kind is Batch:
                self._batch(action)
        if not self.verify:
            self.stats.busy_ns += busy
            self.stats.wall_ns += time.perf_counter_ns() - t0
            self.stats.steps += 1
        self.step_no += 1

    def _recv(self, action: Recv) -> None:
        buf = self.recv_bufs[(action.key.kind, action.slot)]
        if action.blocking:
            dist.recv(buf, action.peer)
            self._arrived(action.key, buf)
        else:
            self.pending[action.key] = dist.irecv(buf, action.peer)

    def _arrived(self, key: Key, buf: torch.Tensor) -> None:
        link.hold(buf, self.one_way_ns)
        if self.verify:
            payload_kind = key.kind if key.kind in ("act", "grad") else None
            # act from s-1 is this stage's input; grad from s+1 is the gradient reaching this stage.
            self._verify(key, buf, payload_kind, self.stage)

    def _fill_header(self, key: Key, buf: torch.Tensor) -> None:
        buf[1] = key.index
        buf[2] = self.step_no
        buf[3] = link.KIND_CODES[key.kind]
        link.stamp(buf)

    def _send(self, action: Send) -> None:
        buf = self.send_bufs[(action.key.kind, action.slot)]
        self._fill_header(action.key, buf)
        if action.blocking:
            dist.send(buf, action.peer)
        else:
            self.pending_send[action.key] = dist.isend(buf, action.peer)

    def _batch(self, action: Batch) -> None:
        ops, keys = [], []
        for op in action.ops:
            if isinstance(op, Send):
                buf = self.send_bufs[(op.key.kind, op.slot)]
                self._fill_header(op.key, buf)
                ops.append(dist.P2POp(dist.isend, buf, op.peer))
                keys.append((self.pending_send, op.key))
            else:
                ops.append(dist.P2POp(dist.irecv, self.recv_bufs[(op.key.kind, op.slot)], op.peer))
                keys.append((self.pending, op.key))
        works = dist.batch_isend_irecv(ops) if self.batched_p2p else [
            (dist.isend if o.op is dist.isend else dist.irecv)(o.tensor, o.peer) for o in ops
        ]
        for (table, key), work in zip(keys, works):
            table[key] = work

    def _compute(self, work) -> int:
        if self.step_no == self.die_at_step and work.mb == 0:
            os._exit(17)  # a stage dying mid-pipeline, peers blocked on it (tests only)
        t0 = time.perf_counter_ns()
        s, P, mb, H = self.stage, self.stages, work.mb, link.HEADER_WORDS
        if work.kind == "F":
            out = self.send_bufs[("act", self.send_slot[Key("act", mb)])][H:] if s < P - 1 else self.stash[mb]
            if s == 0:
                torch.add(self.base, self.value(mb) + 1, out=out)
            else:
                torch.add(self.recv_bufs[("act", self.recv_slot[Key("act", mb)])][H:], 1, out=out)
            self.compute.run(self.fwd_s)
        else:
            out = self.send_bufs[("grad", self.send_slot[Key("grad", mb)])][H:] if s > 0 else self.sink
            if s == P - 1:
                torch.sub(torch.neg(self.stash[mb], out=out), 1, out=out)
            else:
                torch.sub(self.recv_bufs[("grad", self.recv_slot[Key("grad", mb)])][H:], 1, out=out)
            if s == 0 and self.verify:
                self._verify_final_grad(mb)
            self.compute.run(self.bwd_s)
        if not self.verify:
            self.stats.computes += 1
        return time.perf_counter_ns() - t0

    def _verify_final_grad(self, mb: int) -> None:
        got = int(self.sink.sum().item())
        want = self.expected_sum("grad", mb, -1)  # as if passed on to a stage before stage 0
        self.stats.checked += 1
        if got != want:
            self.stats.wrong += 1
            if not self.stats.first_wrong:
                self.stats.first_wrong = f"stage 0 step {self.step_no} final grad{mb}: checksum {got} != {want}"

    def abandon(self) -> None:
        """Drop what an interrupted step left in flight. A completed step leaves nothing (every
        program waits for all its operations), and after a failure the peer may be gone, so
        waiting here could only hang."""
        self.pending.clear()
        self.pending_send.clear()
