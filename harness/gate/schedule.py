"""The gate's measurement loop: generations of fresh A/B processes, looked at within a budget.

A *generation* is one fresh process per side (a ``critpath worker``, or a ``critpath run`` per
round for an old tree), started together, then ``rounds`` rounds each, interleaved A B / B A:
round r of generation g goes base first when g + r is even. Every case of the gate runs in every
round, in an order shuffled per round and identical on both sides. The generation's value per
case is the mean log of its rounds' statistic on the candidate side minus that on the base side:
one paired observation, its pair sharing the minutes of the machine it was measured in. Fresh
processes every generation keep between-process variance (memory layout, CPU placement,
neighbours) in every observation, as a fresh CI job would see it; the rounds inside a
generation make each observation cheaper and less noisy. ``harness.gate.sequential`` decides.

The loop looks at the data every ``look_every_s`` seconds and stops a case once it is decided;
the last look spends what is left of alpha. The budget is kept from measured costs (``Spend``): no
generation starts when its processes' start and one round on each side would end past the budget,
and no round pair starts within a generation when it would; a generation cut short that way is
paired over the rounds it ran and listed in the result's ``cut``. The first base round of a case calibrates its iterations to the
window; every later round, on both sides, runs exactly that many.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from harness.gate.factors import SIDES, PairFactors
from harness.gate.sides import RoundCase, RoundResult, RunSide, SideError, WorkerSide
from harness.gate.trees import BASE, CANDIDATE, Tree
from harness.core.comparable import mismatch
from harness.core import figures
from harness.core.figures import FigureUnavailable
from harness.core.runfiles import GATE_ID_FILE
from harness.core.store import new_run_id
from harness.gate.values import failure_text

START_TIMEOUT_S = 180.0  # a worker must be ready, its ranks up, within this (or what the budget leaves)
# A worker's start is given at least this, whatever the budget leaves: python and torch take seconds
# to import, and a generation the budget let start is not failed for starting.
MIN_START_WAIT_S = 5.0
ROUND_SLACK_S = 10.0  # a round may take this much longer than its cases' --timeout, for the worker itself
# A CI job's own limit (GitHub Actions stops a job at 6 h); beyond it, alpha spent by the calendar
# fraction of the budget is never spent, and the gate never decides.
MAX_BUDGET_S = 6 * 3600.0
MAX_ROUNDS = 1000  # rounds per process pair; docs/gate.md measured 1 to 6
MAX_PAIRS = 1_000_000  # --max-pairs: a bound the budget reaches long before
# In each generation's directory on each side, GATE_ID_FILE (declared with the files only a gate
# writes): the ID of the gate that measured it, as gate.json's extra.gate_id names it. Run IDs are
# the workers' own (a base tree's worker knows nothing of the gate), so without it the sides of two
# gates, or a generation of another, read back as one gate.
RECENT = 3  # measurements an estimate is the median of: decided cases drop out, later ones are shorter


@dataclass(frozen=True)
class Plan:
    """How long and how a gate measures."""

    budget_s: float = 180.0
    rounds: int = 1  # rounds per fresh process (a generation); docs/gate.md has the measured trade-off
    window_s: float = 0.3  # timed seconds per case per round, when --iters does not fix it
    iters: Optional[int] = None  # fixed iterations per case per round (else calibrated once)
    warmup: Optional[int] = None
    case_timeout_s: float = 60.0
    look_every_s: Optional[float] = None  # default: a twentieth of the budget
    probe_pairs: int = 4  # pairs after which the minimum detectable effect is first estimated
    max_pairs: Optional[int] = None  # stop after this many generations (else the budget decides)
    seed: int = 0
    toggle: Optional[str] = None  # a factor held at two values, one per side (harness.gate.factors)

    @property
    def look_interval_s(self) -> float:
        return self.look_every_s if self.look_every_s is not None else self.budget_s / 20.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CaseTrack:
    """What the loop knows about one case so far."""

    case_id: str
    iters: Optional[int] = None
    pairs: list = field(default_factory=list)  # log(candidate / base) per generation
    values: dict = field(default_factory=lambda: {BASE: [], CANDIDATE: []})  # per generation: round values
    problem: str = ""  # set: could not run, with why
    first: Optional[tuple] = None  # (side, record) first seen: later records must share its definition
    state: object = None  # the sequential decision's last CaseState
    decided_at_s: Optional[float] = None


@dataclass
class Spend:
    """What a generation's parts cost so far, measured: the start (and prepare) of its two
    processes, and a round pair (one round on each side)."""

    start_s: list = field(default_factory=list)
    round_pair_s: list = field(default_factory=list)

    @staticmethod
    def _recent(values: list) -> Optional[float]:
        return float(np.median(values[-RECENT:])) if values else None

    def next_generation_s(self) -> Optional[float]:
        """The least a generation costs (its start and one round pair); None before any was measured."""
        start, pair = self._recent(self.start_s), self._recent(self.round_pair_s)
        return None if start is None or pair is None else start + pair

    def next_round_pair_s(self) -> Optional[float]:
        return self._recent(self.round_pair_s)


def fits(elapsed_s: float, estimate_s: Optional[float], budget_s: float) -> bool:
    """Whether a piece whose cost is ``estimate_s`` (None: not measured yet, so the first one runs)
    ends within ``budget_s`` when started at ``elapsed_s``."""
    return estimate_s is None or elapsed_s + estimate_s <= budget_s


@dataclass
class ScheduleResult:
    tracks: dict[str, CaseTrack]
    generations: int
    wall_s: float
    side_kind: str  # "worker" or "run"
    stopped: str  # why the loop ended: decided, budget, interrupted, error
    generation_s: list = field(default_factory=list)
    looks: int = 0
    cut: list = field(default_factory=list)  # generations the budget cut short: {generation, rounds_run, ...}
    gate_id: str = ""  # what each generation's GATE_ID_FILE holds
    factors: dict = field(default_factory=dict)  # PairFactors.to_dict(): what each pair's sides got

    def seconds_per_pair(self) -> Optional[float]:
        """Recent wall seconds per generation (the last few: decided cases drop out and later
        generations get shorter)."""
        return float(np.median(self.generation_s[-3:])) if self.generation_s else None

    def summary(self) -> dict:
        return {"generations": self.generations, "stopped": self.stopped, "looks": self.looks,
                "generation_s": [round(g, 3) for g in self.generation_s], "measure_wall_s": round(self.wall_s, 3),
                "cut": list(self.cut), "gate_id": self.gate_id, "factors": self.factors}


def pair_value(base_values: Sequence[float], cand_values: Sequence[float]) -> float:
    """One generation's observation: the mean log of the candidate's rounds minus the base's."""
    return float(np.mean(np.log(cand_values)) - np.mean(np.log(base_values)))


def side_kind(protocols: Mapping[str, Optional[int]]) -> str:
    """Workers when both trees have them; else a fresh run per round on both sides."""
    return "worker" if all(p == 1 for p in protocols.values()) else "run"


class Schedule:
    def __init__(self, case_ids: Sequence[str], trees: Mapping[str, Tree], kind: str, plan: Plan, out: Path,
                 statistic: str, decide: Callable, on_event: Callable[[str, dict], None] = lambda kind, data: None,
                 clock: Callable[[], float] = time.monotonic, started_at: Optional[float] = None) -> None:
        """``decide(tau, {case_id: pairs}, final) -> {case_id: CaseState}`` is the sequential
        decision (``SequentialGate.look``); ``on_event`` hears of generations, looks and the probe.
        The budget runs from ``started_at`` on ``clock`` (default: now), so a gate can count its
        own set-up (worktrees, probes) in it."""
        self.tracks = {c: CaseTrack(c) for c in case_ids}
        self.trees, self.kind, self.plan, self.out = trees, kind, plan, Path(out)
        self.statistic, self.decide, self.on_event, self.clock = statistic, decide, on_event, clock
        self._shuffle = random.Random(plan.seed)
        self._live: list = []
        self._started_at = started_at
        self._start = 0.0
        self.spend = Spend()
        self.cut: list[dict] = []
        self.gate_id = new_run_id()
        self.factors = PairFactors(plan.seed, plan.toggle)

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> ScheduleResult:
        start = self._start = self.clock() if self._started_at is None else self._started_at
        generation, looks, last_look = 0, 0, 0.0
        gen_times: list[float] = []
        stopped = "decided"
        try:
            while self._open():
                elapsed = self.clock() - start
                # A loop that measures no parts (a replay on a virtual clock) goes by whole generations.
                estimate = self.spend.next_generation_s()
                if estimate is None and gen_times:
                    estimate = gen_times[-1]
                if generation and not fits(elapsed, estimate, self.plan.budget_s):
                    stopped = "budget"
                    break
                if self.plan.max_pairs is not None and generation >= self.plan.max_pairs:
                    stopped = "max_pairs"
                    break
                t0 = self.clock()
                fatal = self._generation(generation)
                gen_times.append(self.clock() - t0)
                generation += 1
                self.on_event("generation", {"generation": generation, "elapsed_s": self.clock() - start,
                                             "generation_s": gen_times[-1], "tracks": self.tracks})
                if fatal:
                    stopped = "error"
                    break
                elapsed = self.clock() - start
                if generation == self._probe_generation():
                    self.on_event("probe", {"elapsed_s": elapsed, "generation_s": gen_times[-1], "tracks": self.tracks})
                if elapsed - last_look >= self.plan.look_interval_s:
                    self._look(min(1.0, elapsed / self.plan.budget_s), final=False, elapsed_s=elapsed)
                    looks, last_look = looks + 1, elapsed
        except KeyboardInterrupt:
            stopped = "interrupted"
            raise
        finally:
            self._kill_live()
        if self._open():
            self._look(1.0, final=True, elapsed_s=self.clock() - start)
            looks += 1
        return ScheduleResult(self.tracks, generation, self.clock() - start, self.kind, stopped, gen_times, looks,
                              list(self.cut), self.gate_id, self.factors.to_dict())

    def _probe_generation(self) -> int:
        return self.plan.probe_pairs

    def _start_wait_s(self) -> float:
        """How long a worker may take to start: START_TIMEOUT_S, or what the budget leaves when that
        is less (a worker that never answers took 180 s of an 8 s budget), never under MIN_START_WAIT_S."""
        left_s = self.plan.budget_s - (self.clock() - self._start)
        return min(START_TIMEOUT_S, max(MIN_START_WAIT_S, left_s))

    def _open(self) -> list[CaseTrack]:
        return [t for t in self.tracks.values() if not t.problem and (t.state is None or t.state.outcome is None)]

    def _look(self, tau: float, final: bool, elapsed_s: float) -> None:
        open_tracks = [t for t in self._open() if t.pairs]
        if not open_tracks:
            return
        states = self.decide(tau, {t.case_id: list(t.pairs) for t in open_tracks}, final)
        for t in open_tracks:
            t.state = states[t.case_id]
            if t.state.outcome is not None and t.decided_at_s is None:
                t.decided_at_s = elapsed_s
        self.on_event("look", {"tau": tau, "final": final, "elapsed_s": elapsed_s, "tracks": self.tracks})

    # -- one generation ----------------------------------------------------------------------------

    def _generation(self, number: int) -> bool:
        """Runs one generation; True if a side cannot run at all (the gate must stop)."""
        open_ids = [t.case_id for t in self._open()]
        kind = WorkerSide if self.kind == "worker" else RunSide
        run_args = {"timeout_s": self.plan.case_timeout_s, "warmup": self.plan.warmup,
                    "target_s": self.plan.window_s}
        # Which side starts first alternates, and each side's environment size and hash seed are
        # drawn anew (harness.gate.factors): what stays fixed for a whole gate, no interval sees.
        first, factors = self.factors.draw(number)
        dirs = {s: self.out / s / f"gen-{number:03d}" for s in first}
        for gen_dir in dirs.values():  # before its worker starts: a generation on disk says whose it is
            gen_dir.mkdir(parents=True, exist_ok=True)
            (gen_dir / GATE_ID_FILE).write_text(self.gate_id + "\n")
        sides = {s: kind(self.trees[s], s, number, dirs[s], run_args, extra_env=factors[s].env()) for s in first}
        self._live = list(sides.values())
        started = self.clock()
        try:
            # Both sides start and prepare at once: their start-up overlaps and nothing is timed yet.
            for side in sides.values():
                side.start()
            for side in sides.values():
                side.await_ready(self._start_wait_s())
            for side in sides.values():
                side.prepare(open_ids)
            for side in sides.values():
                side.await_prepared(self._start_wait_s())
        except SideError as exc:
            for side in sides.values():
                side.kill()
            for t in self._open():
                t.problem = f"could not start: {exc}"
            return True
        self.spend.start_s.append(self.clock() - started)
        try:
            rounds: dict[str, list[RoundResult]] = {s: [] for s in SIDES}
            for r in range(self.plan.rounds):
                elapsed = self.clock() - self._start
                if r and not fits(elapsed, self.spend.next_round_pair_s(), self.plan.budget_s):
                    self.cut.append({"generation": number, "rounds_run": r, "rounds_planned": self.plan.rounds,
                                     "elapsed_s": round(elapsed, 3),
                                     "round_pair_s": round(self.spend.next_round_pair_s(), 3)})
                    break
                pair_started = self.clock()
                order = SIDES if (number + r) % 2 == 0 else SIDES[::-1]
                ids = list(open_ids)
                self._shuffle.shuffle(ids)
                for side in order:
                    result = sides[side].run_round(r, [RoundCase(c, self._iters(c)) for c in ids],
                                                   self.plan.case_timeout_s * len(ids) + ROUND_SLACK_S)
                    rounds[side].append(result)
                    self._calibrate(side, result)
                    if result.error:
                        self._blame(ids, result)
                        return False  # this generation has no pair; fresh processes next time
                    self._check_records(ids, result)
                    ids = [c for c in ids if not self.tracks[c].problem]
                    if not ids:
                        return False
                self.spend.round_pair_s.append(self.clock() - pair_started)
            self._pair(open_ids, rounds)
            return False
        except BaseException:
            for side in sides.values():
                side.kill()  # Ctrl-C or SIGTERM: nothing waits for a polite stop
            raise
        finally:
            for side in sides.values():
                side.stop()
            self._live = []

    def _iters(self, case_id: str) -> Optional[int]:
        return self.plan.iters or self.tracks[case_id].iters

    def _calibrate(self, side: str, result: RoundResult) -> None:
        """The first base round fixes each case's iterations for every later round of both sides."""
        if side != BASE:
            return
        for case_id, record in result.records.items():
            track = self.tracks.get(case_id)
            if track is not None and track.iters is None and record.ok and record.plan:
                track.iters = int(record.plan["iters"])

    def _check_records(self, ids: Sequence[str], result: RoundResult) -> None:
        for case_id in ids:
            record = result.records.get(case_id)
            if record is None:
                self.tracks[case_id].problem = f"{result.side} round {result.number} of generation " \
                                               f"{result.generation} has no record of the case ({result.run_dir})"
                continue
            bad = failure_text([record])
            if bad:
                self.tracks[case_id].problem = f"{result.side}: {bad} ({result.run_dir})"
                continue
            try:
                value = figures.value(record, self.statistic)
            except FigureUnavailable as exc:
                self.tracks[case_id].problem = f"{result.side}: {exc}"
                continue
            if not (math.isfinite(value) and value > 0):
                self.tracks[case_id].problem = f"{result.side}: {self.statistic} = {value!r}, not a positive number"
                continue
            track = self.tracks[case_id]
            track.first = track.first or (result.side, record)
            differs = mismatch({track.first[0]: [track.first[1]], result.side: [record]})
            if differs:
                track.problem = differs

    def _blame(self, ids: Sequence[str], result: RoundResult) -> None:
        """A process that died or hung mid-round: its records show how far it got, and the first
        case without a record was running (``in_flight``, whose failure the side recorded). That
        case cannot run; the others try again."""
        done = [c for c in ids if c in result.records and c != result.in_flight]
        self._check_records(done, result)
        missing = [c for c in ids if c not in done]
        if missing:
            self.tracks[missing[0]].problem = f"{result.error} (while running this case; {result.run_dir})"

    def _pair(self, ids: Sequence[str], rounds: Mapping[str, list[RoundResult]]) -> None:
        for case_id in ids:
            track = self.tracks[case_id]
            if track.problem:
                continue
            values = {side: [figures.value(r.records[case_id], self.statistic) for r in rounds[side]] for side in SIDES}
            for side in SIDES:
                track.values[side].append(values[side])
            track.pairs.append(pair_value(values[BASE], values[CANDIDATE]))

    def _kill_live(self) -> None:
        for side in self._live:
            side.kill()
