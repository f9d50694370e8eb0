"""Pipeline schedules as pure functions: the order of work per stage, and the per-stage programs.

Stages are 0..P-1, microbatches 0..M-1. ``F`` is a forward pass, ``B`` a backward pass.

Published orders (both give the same fill/drain bubble, (P-1)/(M+P-1) of each stage's time):

- GPipe (Huang et al., 2019; "all forward, all backward" in Narayanan et al., 2021, fig. 3 top):
  every stage runs F0..F(M-1), then B0..B(M-1).
- 1F1B (PipeDream-Flush; Narayanan et al., 2021, fig. 3 bottom; Megatron-LM's
  ``forward_backward_pipelining_without_interleaving``): stage s runs
  w = min(P-s-1, M) warm-up forwards, then M-w pairs (F(w+i), B(i)), then the last w backwards.
  At most min(P-s, M) activations are stashed at once instead of M.

Decode-style forward-only schedules (one step = M microbatches through all stages):

- ``sync``: lock-step ticks. In tick k stage s computes microbatch k-s (if any), then a blocking
  receive from s-1 and a blocking send to s+1 (the activation, or a small arrive token when no
  microbatch crosses that link this tick), then a blocking release token back from s+1, passed on
  to s-1. Data and barrier share the links: the arrive wave goes 0 -> P-1 and the release wave back,
  so every tick exposes (P-1) round trips. That is the "synchronous barrier every step".
- ``async``: prefetch. A stage posts the receive of microbatch i+1 before it computes microbatch
  i (two receive buffers), sends with isend (two send buffers, a buffer is reused only once its
  send completed), and nothing waits for a barrier. The last stage returns a small token per
  microbatch to stage 0 (the sampled token ids that the next decode step needs), which is what
  ends a step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

SCHEDULES = ("sync", "async", "gpipe", "1f1b")
TRAINING_SCHEDULES = ("gpipe", "1f1b")  # forward + backward


@dataclass(frozen=True)
class Work:
    """One pass of one microbatch on one stage."""

    kind: str  # "F" or "B"
    mb: int

    def __str__(self) -> str:
        return f"{self.kind}{self.mb}"


def _check(stages: int, microbatches: int, stage: int) -> None:
    if stages < 1 or microbatches < 1:
        raise ValueError(f"need stages >= 1 and microbatches >= 1, got {stages} and {microbatches}")
    if not 0 <= stage < stages:
        raise ValueError(f"stage {stage} out of range 0..{stages - 1}")


def gpipe_order(stages: int, microbatches: int, stage: int) -> list[Work]:
    _check(stages, microbatches, stage)
    return [Work("F", i) for i in range(microbatches)] + [Work("B", i) for i in range(microbatches)]


def one_f_one_b_order(stages: int, microbatches: int, stage: int) -> list[Work]:
    _check(stages, microbatches, stage)
    warmup = min(stages - stage - 1, microbatches)
    order = [Work("F", i) for i in range(warmup)]
    for i in range(microbatches - warmup):
        order += [Work("F", warmup + i), Work("B", i)]
    order += [Work("B", i) for i in range(microbatches - warmup, microbatches)]
    return order


def max_stashed(order: list[Work]) -> int:
    """Most forward activations held at once waiting for their backward (activation memory)."""
    live = peak = 0
    for work in order:
        live += 1 if work.kind == "F" else -1
        peak = max(peak, live)
    return peak


# ---- programs ---------------------------------------------------------------------------------
# A message is named by (kind, index) and travels on one link (src -> dst). Kinds:
#   act  activation of microbatch `index` (act_bytes)     grad  its gradient (act_bytes)
#   arr  arrive token of tick `index` (small)              rel   release token of tick `index`
#   ret  return token of microbatch `index` (small), last stage -> stage 0
SMALL_KINDS = ("arr", "rel", "ret")


@dataclass(frozen=True)
class Key:
    kind: str
    index: int


@dataclass(frozen=True)
class Compute:
    work: Work


@dataclass(frozen=True)
class Send:
    key: Key
    peer: int
    blocking: bool  # True: dist.send (returns once the receiver took it); False: isend
    slot: int = 0  # which send buffer of this kind holds the message


@dataclass(frozen=True)
class Recv:
    key: Key
    peer: int
    blocking: bool  # True: dist.recv; False: irecv posted now, completed by WaitRecv
    slot: int = 0


@dataclass(frozen=True)
class WaitRecv:
    key: Key


@dataclass(frozen=True)
class WaitSend:
    key: Key


@dataclass(frozen=True)
class Batch:
    """Non-blocking sends and receives posted together (``batch_isend_irecv`` where supported)."""

    ops: tuple  # of non-blocking Send / Recv


Action = Union[Compute, Send, Recv, WaitRecv, WaitSend, Batch]


def program(schedule: str, stages: int, microbatches: int, stage: int) -> list[Action]:
    """The actions stage ``stage`` performs in one step of ``schedule``."""
    _check(stages, microbatches, stage)
    if schedule == "sync":
        return _sync(stages, microbatches, stage)
    if schedule == "async":
        return _async(stages, microbatches, stage)
    if schedule == "gpipe":
        return _training(gpipe_order(stages, microbatches, stage), stages, stage, batched=False)
    if schedule == "1f1b":
        return _training(one_f_one_b_order(stages, microbatches, stage), stages, stage, batched=True)
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")


def _sync(P: int, M: int, s: int) -> list[Action]:
    out: list[Action] = []
    for tick in range(M + P - 1):
        mine = tick - s
        if 0 <= mine < M:
            out.append(Compute(Work("F", mine)))
        if s > 0:
            upstream = tick - (s - 1)  # what stage s-1 computed this tick, if anything
            key = Key("act", upstream) if 0 <= upstream < M else Key("arr", tick)
            out.append(Recv(key, s - 1, blocking=True, slot=upstream % 2 if key.kind == "act" else 0))
        if s < P - 1:
            key = Key("act", mine) if 0 <= mine < M else Key("arr", tick)
            out.append(Send(key, s + 1, blocking=True, slot=mine % 2 if key.kind == "act" else 0))
            out.append(Recv(Key("rel", tick), s + 1, blocking=True))
        if s > 0:
            out.append(Send(Key("rel", tick), s - 1, blocking=True))
    return out


def _async(P: int, M: int, s: int) -> list[Action]:
    out: list[Action] = []
    if P == 1:
        return [Compute(Work("F", i)) for i in range(M)]
    if s == 0:
        # Returns from the last stage are posted up front (small buffers, one per microbatch).
        out += [Recv(Key("ret", i), P - 1, blocking=False, slot=i) for i in range(M)]
    if s > 0:
        out.append(Recv(Key("act", 0), s - 1, blocking=False, slot=0))
    for i in range(M):
        if s > 0:
            out.append(WaitRecv(Key("act", i)))
            if i + 1 < M:  # prefetch: the next receive is in flight while this one computes
                out.append(Recv(Key("act", i + 1), s - 1, blocking=False, slot=(i + 1) % 2))
        if s < P - 1 and i >= 2:
            out.append(WaitSend(Key("act", i - 2)))  # its buffer is about to be overwritten
        out.append(Compute(Work("F", i)))
        if s < P - 1:
            out.append(Send(Key("act", i), s + 1, blocking=False, slot=i % 2))
        else:
            out.append(Send(Key("ret", i), 0, blocking=False, slot=i))
    if s < P - 1:
        out += [WaitSend(Key("act", i)) for i in range(max(0, M - 2), M)]
    else:
        out += [WaitSend(Key("ret", i)) for i in range(M)]
    if s == 0:
        out += [WaitRecv(Key("ret", i)) for i in range(M)]
    return out


def _training(order: list[Work], P: int, s: int, batched: bool) -> list[Action]:
    """GPipe / 1F1B: receive when the work needs it, send with isend, wait all sends at the end.

    Sends never block, so only receives wait and the schedule's data dependencies (a DAG) cannot
    deadlock. With ``batched`` (1F1B), a send is posted together with the receive of the next
    work item on the same link pair, as Megatron-LM's send_forward_recv_backward does.
    """
    out: list[Action] = []
    sends: list[Key] = []
    posted: set[Key] = set()

    def needed(work: Work):
        if work.kind == "F" and s > 0:
            return Recv(Key("act", work.mb), s - 1, blocking=False, slot=work.mb)
        if work.kind == "B" and s < P - 1:
            return Recv(Key("grad", work.mb), s + 1, blocking=False, slot=work.mb)
        return None

    for n, work in enumerate(order):
        recv = needed(work)
        if recv is not None:
            if recv.key not in posted:
                out.append(recv)
                posted.add(recv.key)
            out.append(WaitRecv(recv.key))
        out.append(Compute(work))
        send = None
        if work.kind == "F" and s < P - 1:
            send = Send(Key("act", work.mb), s + 1, blocking=False, slot=work.mb)
        elif work.kind == "B" and s > 0:
            send = Send(Key("grad", work.mb), s - 1, blocking=False, slot=work.mb)
        if send is None:
            continue
        sends.append(send.key)
        following = needed(order[n + 1]) if n + 1 < len(order) else None
        if batched and following is not None and following.key not in posted:
            out.append(Batch((send, following)))
            posted.add(following.key)
        else:
            out.append(send)
    out += [WaitSend(key) for key in sends]
    return out


def messages(prog: list[Action]) -> list[Union[Send, Recv]]:
    """Every send and receive a program posts, batches flattened (for buffer allocation)."""
    found: list[Union[Send, Recv]] = []
    for action in prog:
        if isinstance(action, Batch):
            found += list(action.ops)
        elif isinstance(action, (Send, Recv)):
            found.append(action)
    return found
