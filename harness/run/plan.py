"""What ``critpath run`` decides from its options, once, before anything starts, and the run
directory it writes as it goes.

The options become a ``RunPlan`` (the cases, the backend, the timing policy, the limits); what runs
after reads the plan, never the options again. The plan is the same on every rank of a joined job;
only the rank that writes opens a ``RunJournal``, which holds the run's ID and directory.
"""
from __future__ import annotations

import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from harness.core import registry, taken
from harness.core.case import Case
from harness.core.claim import Claim, claim_dir
from harness.core.escape import for_terminal
from harness.core.family import GridOptions
from harness.core.options import UsageError
from harness.core.records import Record, utc_now_iso
from harness.core.runmeta import RUN_SCHEMA
from harness.core.store import MAX_RUN_CASES, PLANNED, RunDir, new_run_id, planned_digest
from harness.run.timing import PlanPolicy

PROFILE_POLICY = {
    # quick: enough iterations for stable medians and a p99 in a CI minute, and up to 2 s more per
    # case for a family whose declared tails need more (rpc's p999: 1,000); full: tails to p999.
    "quick": PlanPolicy(warmup=5, target_s=0.2, min_iters=50, max_iters=2000, tail_budget_s=2.0),
    "full": PlanPolicy(warmup=10, target_s=1.0, min_iters=200, max_iters=20000, tail_budget_s=10.0),
}

# Ranks a local run spawns on this one host (--world, or a case ID's world): each is a process that
# imports torch (some 300 MB) and holds a socket to every other, so a thousand already fill a large
# host; a job past it runs under torchrun or Slurm, one process per rank where the ranks are.
MAX_LOCAL_WORLD = 1024
LOCAL_WORLD_RULE = (f"a local run spawns at most MAX_LOCAL_WORLD = {MAX_LOCAL_WORLD} ranks on this host; "
                    "run a larger job under torchrun or Slurm (docs/scale.md)")
# More cases than MAX_RUN_CASES in one run is a typo in a sweep, not a plan: refused, naming the cap.
# The RunOptions (and GridOptions) fields that act only on the grid --families selects; --backend
# also picks the process group, so it acts on every case.
RUN_GRID_ONLY = ("world", "sizes_bytes")


@dataclass(frozen=True)
class RunOptions:
    families: Optional[tuple[str, ...]] = None
    case_ids: tuple[str, ...] = ()
    profile: str = "quick"
    world: Optional[int] = None
    backend: Optional[str] = None
    sizes_bytes: Optional[tuple[int, ...]] = None
    iters: Optional[int] = None
    warmup: Optional[int] = None
    timeout_s: float = 60.0
    out: Optional[Path] = None
    argv: tuple[str, ...] = field(default_factory=tuple)

    def policy(self) -> PlanPolicy:
        base = PROFILE_POLICY[self.profile]
        return PlanPolicy(
            warmup=base.warmup if self.warmup is None else self.warmup,
            iters=self.iters,
            target_s=base.target_s,
            min_iters=base.min_iters,
            max_iters=base.max_iters,
            tail_budget_s=base.tail_budget_s,
        )


@dataclass(frozen=True)
class RunPlan:
    """What a run decides once, before its first case; the launcher, the workers, the sink, the
    header and run.json all read it, never the options again."""

    cases: tuple[Case, ...]
    backend: str
    policy: PlanPolicy
    timeout_s: float
    out: Optional[Path]  # the run directory asked for; None: reports/<run-id>
    options: dict  # the options as given, for run.json
    argv: tuple[str, ...]

    @property
    def worlds(self) -> list[int]:
        """The worlds the cases use (a case ID names its own), not --world."""
        return sorted({c.world for c in self.cases})

    def by_world(self) -> dict[int, list[Case]]:
        groups: dict[int, list[Case]] = defaultdict(list)
        for case in self.cases:
            groups[case.world].append(case)
        return dict(groups)


def plan_run(opts: RunOptions, world: int, backend: str) -> RunPlan:
    """The plan of a run on ``world`` ranks over ``backend``: the cases the options select there."""
    cases = select_cases(opts, GridOptions(opts.profile, world, backend, opts.sizes_bytes))
    refuse_other_backends(cases, backend)
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()}
    return RunPlan(tuple(cases), backend, opts.policy(), opts.timeout_s, opts.out, options, tuple(opts.argv))


def refuse_unavailable(opts: RunOptions, backend: str, why: str) -> None:
    """Refuse a run whose process-group backend cannot start here (``why``, from the worker's
    check), before any case runs: each would fail alike."""
    if why:
        named = f"--backend {backend}" if opts.backend else f"backend {backend}"
        other = "; --backend gloo runs on any host" if backend == "nccl" else ""
        raise UsageError(f"{named} cannot run here: {why}{other}")


def refuse_other_backends(cases: list[Case], backend: str) -> None:
    """Refuse, before any case runs, a case ID naming a process-group backend other than the run's:
    a run has one process group, so each such case would only fail, as a record of the run."""
    other = next((case for case in cases if case.params.get("backend", backend) != backend), None)
    if other is not None:
        wanted = other.params["backend"]
        raise UsageError(f"case {other.id} is for backend {wanted!r} but this run uses {backend!r}: give "
                         f"--backend {wanted}, with only cases for {wanted} (one backend per run)")


def select_cases(opts: RunOptions, grid: GridOptions) -> list[Case]:
    if opts.case_ids:
        if len(opts.case_ids) > MAX_RUN_CASES:  # before any is parsed: a run cannot hold them
            raise UsageError(f"--case given {len(opts.case_ids)} times; a run holds at most {MAX_RUN_CASES} cases")
        try:
            named = [registry.parse(cid) for cid in opts.case_ids]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        # A case named twice is run once, where it was first named: one record per case ID.
        ids = [case.id for case in named]
        cases = list({case_id: case for case_id, case in zip(ids, named)}.values())
        if len(cases) < len(named):
            counts = Counter(ids)  # one pass: a count per case was quadratic (3,000 x 2 took over 100 s)
            twice = [case_id for case_id, n in counts.items() if n > 1]
            print(for_terminal(f"critpath run: --case named {len(named) - len(cases)} case(s) again "
                               f"({', '.join(twice[:3])}); each runs once"), file=sys.stderr)
    else:
        try:
            families = registry.select(opts.families)
        except KeyError as exc:
            raise UsageError(exc.args[0]) from None
        cases = registry.cases(families, grid, [name for name in RUN_GRID_ONLY if getattr(opts, name) is not None])
    if len(cases) > MAX_RUN_CASES:
        raise UsageError(f"{len(cases)} cases selected; a run holds at most {MAX_RUN_CASES} (narrow --sizes or --families)")
    return cases


class RunJournal:
    """The run directory of a plan while it runs: each record on disk as it comes, and run.json
    saying how far the run got, so a run killed at any point leaves a directory that says so."""

    def __init__(self, plan: RunPlan, run_dir: RunDir, claim: Optional[Claim] = None) -> None:
        self.plan = plan
        self.claim = claim  # held from open to end
        self.run_dir = run_dir
        self.run_id = run_dir.run_id
        self.started_at = utc_now_iso("seconds")
        self.records: list[Record] = []
        self.planned = planned_digest(case.id for case in plan.cases)  # once: run.json is written per case

    @classmethod
    def open(cls, plan: RunPlan) -> "RunJournal":
        """A new run ID and its directory: the one asked for, else reports/<run-id>; never one that
        already holds a run, nor one another process is writing (claimed before it is looked into,
        so two runs started at once into one --out cannot both find it empty)."""
        run_id = new_run_id()
        path = plan.out or Path("reports") / run_id
        claim = claim_dir(path, "run")
        refused = taken.refusal(path)
        if refused:
            claim.release()
            raise UsageError(refused)
        return cls(plan, RunDir(path, run_id), claim)

    @property
    def path(self) -> Path:
        return self.run_dir.path

    def start(self, fingerprint: dict) -> None:
        try:
            self.run_dir.write_fingerprint(fingerprint)
            self.run_dir.write_meta(self.meta("running"))
        except BaseException:
            # A start that failed (a full disk, a run.json refused) leaves the directory as it found
            # it: a fingerprint.json left there would refuse the retry as "already holds a run".
            self.run_dir.remove_start()
            self._release()
            raise

    def keep(self, record: Record) -> None:
        self.run_dir.append(record)  # on disk before anything else happens
        self.records.append(record)
        self.run_dir.write_meta(self.meta("running"))  # how far it got, if it is killed next

    def end(self, state: str) -> None:
        try:
            self.run_dir.write_meta(self.meta(state))
        finally:
            self._release()

    def _release(self) -> None:
        if self.claim is not None:
            self.claim.release()

    def meta(self, state: str) -> dict:
        """run.json: how far the run got."""
        return {
            "schema": RUN_SCHEMA,
            "run_id": self.run_id,
            "state": state,
            "argv": list(self.plan.argv),
            "options": self.plan.options,
            "started_at": self.started_at,
            "finished_at": utc_now_iso("seconds") if state != "running" else None,
            "cases_total": len(self.plan.cases),
            PLANNED: self.planned,
            "cases_ok": sum(1 for r in self.records if r.ok),
            "cases_failed": sum(1 for r in self.records if not r.ok),
        }
