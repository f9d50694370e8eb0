"""Runs one case on one rank: the only place that times anything.

Order, identical on every rank: setup -> timed warm-up -> loop plan (rank 0 decides from the
slowest rank's warm-up, broadcasts) -> barrier -> timed iterations -> per-iteration max over ranks
-> check (wrong counts summed over ranks) -> per-rank reports and contention evidence gathered to
rank 0 -> teardown. The contention window (harness.run.contention) holds the timed iterations alone.
Rank 0 returns the record; other ranks return None.

Cross-rank bookkeeping goes over a separate gloo "control" group so it never shares a stream or a
communicator with the data path being measured (NCCL included).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from harness.core.case import Case
from harness.core.contention import Contention
from harness.core.family import CheckResult, Family, RankContext
from harness.core.records import (
    CHECK_FAILED,
    CUDA_TIMER,
    HOST_TIMER,
    ErrorInfo,
    Record,
    family_owned_timer,
    reduction_for,
    utc_now_iso,
)
from harness.core.stats import Summary
from harness.run.contention import Window
from harness.run.timing import Clock, LoopPlan, PlanPolicy, time_each, time_each_cuda


@dataclass(frozen=True)
class Collectives:
    """Control-plane reductions over ranks; identity operations when there is one rank.

    torch is imported only when there is more than one rank: a one-rank case of a torch-free
    family (rpc, kv_alloc, selftest) runs without it."""

    group: Any = None
    world: int = 1

    def max_(self, values: np.ndarray) -> np.ndarray:
        return self._all_reduce(values, "MAX")

    def sum_(self, values: np.ndarray) -> np.ndarray:
        return self._all_reduce(values, "SUM")

    def _all_reduce(self, values: np.ndarray, op_name: str) -> np.ndarray:
        if self.world == 1:
            return values
        import torch
        import torch.distributed as dist

        t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64))
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op_name), group=self.group)
        return t.numpy()

    def broadcast_plan(self, plan: Optional[LoopPlan]) -> LoopPlan:
        if self.world == 1:
            assert plan is not None
            return plan
        import torch
        import torch.distributed as dist

        t = torch.tensor([plan.warmup, plan.iters] if plan else [0, 0], dtype=torch.int64)
        dist.broadcast(t, src=0, group=self.group)
        return LoopPlan(int(t[0]), int(t[1]))

    def gather(self, obj: Any, rank: int) -> Optional[list]:
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world if rank == 0 else None
        dist.gather_object(obj, out, dst=0, group=self.group)
        return out

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier(group=self.group)


def time_iterations(family: Family, ctx: RankContext, clock: Clock, state: Any, iters: int) -> tuple[np.ndarray, str]:
    """One latency per iteration, and the name of the clock that took them."""
    if family.iterate is not None:
        owned = family.iterate(state, iters, clock)
        if owned is not None:  # None: this case leaves the loop to the driver
            return np.asarray(owned, dtype=np.int64), family_owned_timer(family.name)
    if ctx.device is not None and getattr(ctx.device, "type", "cpu") == "cuda":
        return time_each_cuda(family.step, state, iters), CUDA_TIMER
    return time_each(family.step, state, iters, clock), HOST_TIMER


def run_case(
    family: Family,
    case: Case,
    ctx: RankContext,
    comm: Collectives,
    policy: PlanPolicy,
    run_id: str,
    clock: Clock = time.perf_counter_ns,
) -> Optional[Record]:
    started_at = utc_now_iso()
    t_start = time.perf_counter()
    state = family.setup(ctx, case)
    try:
        warm = time_iterations(family, ctx, clock, state, policy.warmup)[0] if policy.warmup else np.zeros(0, dtype=np.int64)
        # Estimate from the slowest rank so the plan fits every rank's budget.
        estimate = comm.max_(np.array([int(np.median(warm)) if warm.size else 0], dtype=np.int64))[0]
        plan = comm.broadcast_plan(policy.decide(float(estimate), family.tail_samples()) if ctx.rank == 0 else None)
        comm.barrier()
        window = Window.start()
        samples, timer_name = time_iterations(family, ctx, clock, state, plan.iters)
        evidence = window.stop()
        if samples.shape != (plan.iters,):
            raise RuntimeError(f"timer returned {samples.shape} samples, plan asked for {plan.iters}")
        samples = comm.max_(samples)
        result: CheckResult = family.check(state)
        wrong, checked = comm.sum_(np.array([result.wrong, result.checked], dtype=np.int64))
        total = CheckResult(int(wrong), int(checked), result.detail)
        # one gather carries both: each rank's report and what its timed window suffered
        gathered = comm.gather((family.report(state) if family.report else {}, evidence), ctx.rank)
        # No rank moves on to the next case until rank 0 has everything of this one: a peer that
        # ran ahead and died in the next case's set-up would otherwise break this case's gather
        # and take its record with it.
        comm.barrier()
    finally:
        if family.teardown is not None:
            family.teardown(state)
    if ctx.rank != 0:
        return None
    reports = [report for report, _ in gathered]
    summary = Summary.of(samples)
    # A fast wrong answer is a failure: keep its samples for forensics but derive no figures.
    metrics = dict(family.metrics(case, summary, reports)) if total.passed else {}
    family.check_figures(metrics)
    error = None
    if not total.passed:
        error = ErrorInfo(CHECK_FAILED, f"{total.wrong} of {total.checked} results wrong {total.detail}".strip())
    return Record(
        run_id=run_id,
        case_id=case.id,
        family=family.name,
        family_version=family.version,
        params=dict(case.params),
        status="ok" if total.passed else "failed",
        backend=ctx.backend,
        world=ctx.world,
        started_at=started_at,
        wall_s=time.perf_counter() - t_start,
        samples_ns=tuple(int(x) for x in samples),
        plan=plan.to_dict(),
        timer=timer_name,
        metrics=metrics,
        check=total,
        error=error,
        reduction=reduction_for(ctx.world),
        extra={"rank_reports": reports} if family.report else {},
        contention=Contention(tuple(rank_evidence for _, rank_evidence in gathered)),
    )
