"""The harness measuring and testing itself. Opt-in: ``critpath run --families selftest``.

- ``mode=noop``: an empty step, so the per-iteration samples are the timing loop's own
  bookkeeping (clock reads, call, store). This is the figure behind "the loop adds < 1 us".
- ``mode=raise`` / ``hang`` / ``exit`` / ``wrong``: rank ``fault_rank`` raises in its step, sleeps
  forever, dies without a word, or returns a wrong answer. Each must give its documented outcome
  (failed, timeout, failed, failed check) while the run goes on with the next case.
- ``mode=spin``: a fixed amount of CPU work per step (a pure-Python summing loop of ``spin_iters``
  iterations). It is the regression gate's known injected cost: ``spin_iters`` x 1.10 is 10 % more
  work. Fixed work, not a clock-based busy wait, so the step suffers the same preemption and
  frequency noise as real code; a wait-until-deadline loop would hide that noise and flatter the
  gate's measured power. The check verifies the sum, so a step that skips work is caught.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from harness.core.case import Case, Needs, Param
from harness.core.figures import Figure
from harness.core.family import CheckResult, Column, Family, GridOptions, RankContext, world_param
from harness.core.stats import Summary

MODES = ("noop", "raise", "hang", "exit", "wrong", "spin")
SPIN = Needs("mode", ("spin",))  # spin_iters is a setting of the spin cases only
FAULT_MODES = ("raise", "hang", "exit", "wrong")


class InjectedFault(RuntimeError):
    """Raised on purpose by ``mode=raise``."""


def grid(options: GridOptions) -> list[Case]:
    cases = [FAMILY.case(mode="noop", fault_rank=0, world=1)]
    if options.profile == "full":
        cases += [FAMILY.case(mode=m, fault_rank=options.world - 1, world=options.world) for m in FAULT_MODES]
    return cases


@dataclass
class State:
    ctx: RankContext
    mode: str
    faulty: bool
    calls: int = 0
    spin_iters: int = 0
    spin_sum: int = 0  # last step's sum, verified by check


def validate(case: Case) -> None:
    p = case.params
    if p["mode"] == "spin" and FAMILY.value(case, "spin_iters") < 1:
        raise ValueError(f"mode=spin needs spin_iters >= 1, got {FAMILY.value(case, 'spin_iters')}")
    if p["fault_rank"] >= p["world"]:
        raise ValueError(f"fault_rank={p['fault_rank']} is not a rank of world {p['world']} (0..world-1)")


def setup(ctx: RankContext, case: Case) -> State:
    mode = case.params["mode"]
    return State(ctx, mode, ctx.rank == case.params["fault_rank"], spin_iters=FAMILY.value(case, "spin_iters"))


def step(state: State) -> None:
    if state.mode == "spin":
        total = 0
        for i in range(state.spin_iters):
            total += i
        state.spin_sum = total
        return
    if not state.faulty or state.mode in ("noop", "wrong"):
        return
    if state.mode == "raise":
        raise InjectedFault(f"injected failure on rank {state.ctx.rank}")
    if state.mode == "hang":
        while True:
            time.sleep(3600)
    if state.mode == "exit":
        os._exit(17)


def check(state: State) -> CheckResult:
    if state.mode == "spin":
        want = state.spin_iters * (state.spin_iters - 1) // 2
        wrong = int(state.spin_sum != want)
        return CheckResult(wrong=wrong, checked=1, detail=f"spin sum {state.spin_sum} != {want}" if wrong else "")
    wrong = 1 if (state.faulty and state.mode == "wrong") else 0
    return CheckResult(wrong=wrong, checked=1, detail="injected wrong answer" if wrong else "")


def metrics(case: Case, summary: Summary, reports: list[dict]) -> dict[str, float]:
    return {"loop_overhead_ns": summary.p50_ns}


FAMILY = Family(
    name="selftest",
    version=1,
    description="timing-loop overhead (noop), fault handling (raise, hang, exit, wrong), known work (spin)",
    params=(
        Param("mode", str, "what the step does (noop: the loop's own cost; spin: known work)", choices=MODES,
              required=True),
        Param("fault_rank", int, "rank that misbehaves (a rank of the world)", low=0, required=True),
        world_param(),
        Param("spin_iters", int, "mode=spin: loop iterations of CPU work per step", low=0, high=10**9, default=0, needs=SPIN),
    ),
    validate=validate,
    figures=(Figure("loop_overhead_ns", "ns", "lower",
                    "median time of one step; for mode=noop, the driver's timing loop's own cost per iteration",
                    headline=True),),
    grid=grid,
    setup=setup,
    step=step,
    metrics=metrics,
    check=check,
    checked_per_rank=lambda case: 1,  # check() judges one answer a rank
    columns=(
        Column("mode", lambda r: r.params["mode"]),
        Column("p50", figure="p50_ns", fmt="{:.0f}"),
        Column("p99", figure="p99_ns", fmt="{:.0f}"),
    ),
    default=False,
    listed_when_absent=False,
)
