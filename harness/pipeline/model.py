"""Analytical model of a pipeline step: closed forms, and the critical path of the actual programs.

Cost model (all seconds):
- a forward pass takes ``fwd_s``, a backward ``bwd_s``; nothing else costs compute time;
- a message is delivered at max(send + hop, rendezvous + base): ``hop`` = max(emulated one-way
  latency, base), ``base`` = the transport's own one-way time (measured by the family in setup),
  rendezvous = the later of "send posted" and "receive posted" (gloo and NCCL only move a message
  once both sides posted it);
- a blocking send returns at rendezvous + base.

``evaluate`` runs every stage's program (``schedule.program``) under this model for a few
consecutive steps and returns each stage's busy time and step durations; it raises
``ScheduleDeadlock`` if the programs cannot complete, which makes it a deadlock test as well.
The closed forms below are what the articles and papers quote; tests hold them against
``evaluate`` and against hand-computed values.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.pipeline.schedule import Batch, Compute, Recv, Send, WaitRecv, WaitSend, program


# ---- closed forms -----------------------------------------------------------------------------
def fill_drain_bubble(stages: int, microbatches: int) -> float:
    """Idle share of each stage's time in a flushed pipeline: (P-1)/(M+P-1)."""
    return (stages - 1) / (microbatches + stages - 1)


def bubble_over_ideal(stages: int, microbatches: int) -> float:
    """Bubble time relative to ideal compute time: (P-1)/M (Narayanan et al., 2021)."""
    return (stages - 1) / microbatches


def sync_efficiency(compute_s: float, exposed_comm_s: float) -> float:
    """The sync tax: share of ideal throughput left when ``exposed_comm_s`` is not hidden."""
    return compute_s / (compute_s + exposed_comm_s)


def chain_barrier_exposed_s(stages: int, rtt_s: float) -> float:
    """A barrier over a linear chain of stages: arrive wave out and release wave back."""
    return (stages - 1) * rtt_s


def sync_step_s(stages: int, microbatches: int, compute_s: float, rtt_s: float) -> float:
    """Steady-state lock-step estimate: M+P-1 ticks, each compute plus the chain barrier."""
    return (microbatches + stages - 1) * (compute_s + chain_barrier_exposed_s(stages, rtt_s))


def async_step_s(stages: int, microbatches: int, compute_s: float, hop_s: float) -> float:
    """Prefetching pipeline: fill/drain ticks, P-1 hops on the way in, one return hop to stage 0."""
    if stages == 1:
        return microbatches * compute_s
    return (microbatches + stages - 1) * compute_s + stages * hop_s


def training_step_s(stages: int, microbatches: int, fwd_s: float, bwd_s: float, hop_s: float) -> float:
    """GPipe (and 1F1B while hops are short against compute): (M+P-1)(tf+tb) + 2(P-1) hops."""
    return (microbatches + stages - 1) * (fwd_s + bwd_s) + 2 * (stages - 1) * hop_s


# ---- critical path of the programs ------------------------------------------------------------
@dataclass(frozen=True)
class Cost:
    fwd_s: float
    bwd_s: float
    emulated_one_way_s: float = 0.0
    base_one_way_s: float = 0.0

    @property
    def hop_s(self) -> float:
        return max(self.emulated_one_way_s, self.base_one_way_s)


@dataclass(frozen=True)
class Prediction:
    step_s: float  # the slowest stage's duration of the last evaluated step
    stage_step_s: tuple[float, ...]  # each stage's duration of that step
    stage_busy_s: tuple[float, ...]  # compute time per stage per step

    @property
    def bubble_idle_share(self) -> float:
        """1 - sum(busy) / sum(stage step time), the same definition the family measures."""
        return 1.0 - sum(self.stage_busy_s) / sum(self.stage_step_s)


class ScheduleDeadlock(RuntimeError):
    """The programs block each other (a send and a receive that can never meet)."""


def evaluate(schedule: str, stages: int, microbatches: int, cost: Cost, steps: int = 3) -> Prediction:
    """Predict one step as the last of ``steps`` consecutive steps (steady state, cross-step overlap
    included), each stage starting the next step as soon as it finished the previous one."""
    one = [program(schedule, stages, microbatches, s) for s in range(stages)]
    return evaluate_programs(one, cost, steps, label=f"{schedule} with P={stages}, M={microbatches}")


def evaluate_programs(one: list[list], cost: Cost, steps: int = 3, label: str = "programs") -> Prediction:
    """``evaluate`` for explicit per-stage programs (one step each)."""
    stages = len(one)
    progs = [[(n, a) for n in range(steps) for a in one[s]] for s in range(stages)]
    clock = [0.0] * stages
    pc = [0] * stages
    step_start = [[0.0] * steps for _ in range(stages)]
    step_end = [[0.0] * steps for _ in range(stages)]
    busy = [[0.0] * steps for _ in range(stages)]
    sent: dict = {}  # (src, dst, step, key) -> time the send was posted
    posted: dict = {}  # same key -> time the receive was posted
    # Which peer a key travels from/to, for WaitRecv / WaitSend (they name only the key).
    recv_peer: list[dict] = [dict() for _ in range(stages)]
    send_peer: list[dict] = [dict() for _ in range(stages)]

    def deliver(k) -> float | None:
        if k not in sent or k not in posted:
            return None
        meet = max(sent[k], posted[k])
        return max(sent[k] + cost.hop_s, meet + cost.base_one_way_s)

    progress = True
    while progress:
        progress = False
        for s in range(stages):
            per_step = len(one[s])
            while pc[s] < len(progs[s]):
                n, action = progs[s][pc[s]]
                first = pc[s] % per_step == 0
                before = clock[s]
                if _apply(s, n, action, clock, busy, sent, posted, recv_peer, send_peer, cost, deliver):
                    break  # blocked; a posted send/receive is recorded and is not posted twice
                if first:
                    step_start[s][n] = before
                progress = True
                pc[s] += 1
                if pc[s] % per_step == 0:
                    step_end[s][n] = clock[s]
    stuck = [s for s in range(stages) if pc[s] < len(progs[s])]
    if stuck:
        where = ", ".join(f"stage {s} at {progs[s][pc[s]][1]}" for s in stuck)
        raise ScheduleDeadlock(f"{label} cannot complete: {where}")
    last = steps - 1
    durations = tuple(step_end[s][last] - step_start[s][last] for s in range(stages))
    return Prediction(max(durations), durations, tuple(busy[s][last] for s in range(stages)))


def _apply(s, n, action, clock, busy, sent, posted, recv_peer, send_peer, cost, deliver) -> bool:
    """Advance stage ``s`` by one action; True if it must wait for another stage first."""
    if isinstance(action, Compute):
        dur = cost.fwd_s if action.work.kind == "F" else cost.bwd_s
        clock[s] += dur
        busy[s][n] += dur
        return False
    if isinstance(action, Batch):
        for op in action.ops:
            _apply(s, n, op, clock, busy, sent, posted, recv_peer, send_peer, cost, deliver)
        return False
    if isinstance(action, Send):
        k = (s, action.peer, n, action.key)
        send_peer[s][(n, action.key)] = action.peer
        sent.setdefault(k, clock[s])
        if not action.blocking:
            return False
        if k not in posted:
            return True
        clock[s] = max(clock[s], max(sent[k], posted[k]) + cost.base_one_way_s)
        return False
    if isinstance(action, Recv):
        k = (action.peer, s, n, action.key)
        recv_peer[s][(n, action.key)] = action.peer
        posted.setdefault(k, clock[s])
        if not action.blocking:
            return False
        arrival = deliver(k)
        if arrival is None:
            return True
        clock[s] = max(clock[s], arrival)
        return False
    if isinstance(action, WaitRecv):
        k = (recv_peer[s][(n, action.key)], s, n, action.key)
        arrival = deliver(k)
        if arrival is None:
            return True
        clock[s] = max(clock[s], arrival)
        return False
    if isinstance(action, WaitSend):
        k = (s, send_peer[s][(n, action.key)], n, action.key)
        if k not in posted:
            return True
        clock[s] = max(clock[s], max(sent[k], posted[k]) + cost.base_one_way_s)
        return False
    raise TypeError(f"unknown action {action!r}")
