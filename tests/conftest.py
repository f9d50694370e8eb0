"""Shared fixtures: running critpath as a user would (a real subprocess) or in-process."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What a test's run writes as its fingerprint.json before its first case: the fields every run's
# holds (harness.core.fingerprintfile.REQUIRED). A local launch of world 1 is narrower than any
# record, as a local run's fingerprint may be.
RUN_FINGERPRINT = {"host": "test", "launch": "local", "world": 1}
# The commits a fixture gate's sides were measured at: gate.json's and each worker's fingerprint's.
GATE_COMMITS = {"base": "1" * 40, "candidate": "2" * 40}


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(*args: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` in a fresh process, from the project root, like a user."""
    full_env = {**os.environ, **(env or {})}
    # A test must never join an outer torchrun/Slurm job by accident.
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        full_env.pop(key, None)
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=ROOT, env=full_env,
        capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def live_script():
    """``start(SCRIPT, *args, ready=LINE)``: ``python -c SCRIPT ARGS`` from the project root, once
    it has printed LINE; every one started lives until the test ends, when its stdin is closed."""
    started = []

    def start(script: str, *args, ready: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", script, *map(str, args)], cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.stdout.readline().strip() == ready
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stdin.close()
        proc.wait(timeout=30)


def processes_mentioning(text: str) -> list[str]:
    """Command lines of this machine's processes that mention ``text``: what a test asserts is gone."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args:
            found.append(args)
    return found


def git(repo: Path, *args: str) -> str:
    """git in ``repo`` under a test identity; its output, stripped."""
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=critpath-tests", "-c", "user.email=tests@localhost",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def tmp_repo(tmp_path) -> Path:
    """A throwaway repository holding one commit of a copy of this package (and what asv and
    history read), so a gate or history runs the same in CI whatever the depth of the clone, and
    never touches this checkout's worktree list."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    for folder in ("harness", "benchmarks"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "asv.conf.json"):
        shutil.copy(ROOT / name, repo / name)
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def derived_record(case_id: str, samples_ns, run_id: str = "t", reports=None, **fields):
    """A passing record whose figures are what its family derives from ``samples_ns`` (and
    ``reports``), as the driver writes it: a record with made-up figures is refused on read."""
    from harness.core import registry
    from harness.core.family import CheckResult
    from harness.core.records import Record
    from harness.core.stats import Summary

    case = registry.parse(case_id)
    family = registry.get(case.family)
    samples = tuple(int(x) for x in samples_ns)
    reports = list(reports or [])
    base = dict(
        run_id=run_id, case_id=case.id, family=case.family, family_version=family.version, params=dict(case.params),
        status="ok", backend=case.params.get("backend", "gloo"), world=case.world,
        started_at="2026-01-01T00:00:00+00:00", samples_ns=samples,
        wall_s=0.1 + sum(samples) / 1e9,  # set-up and check besides the timed loop, as the driver's is
        plan={"warmup": 0, "iters": len(samples)}, timer="perf_counter_ns", check=CheckResult(0, 1),
        metrics=dict(family.metrics(case, Summary.of(samples), reports)),
        extra={"rank_reports": reports} if family.report else {},
    )
    if "imported" in (fields.get("extra") or {}):  # an import's clock is its source's
        from harness.core.imported import IMPORTED_TIMER

        base["timer"] = IMPORTED_TIMER
    base.update(fields)
    return Record(**base)


def start_of(run_id: str) -> str:
    """An instant of its own for the records of run ``run_id``, within a day of 2026-01-01: fixtures
    that give runs measured apart the same samples give them starts apart, or each would be the
    other's copy (``harness.core.measurement``)."""
    import datetime as dt
    import zlib

    seconds = zlib.crc32(run_id.encode()) % 86_400
    return (dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=seconds)).isoformat()


def run_with_an_unverified_figure(path: Path, busbw_gbps: float = 9999.0, run_id: str = "t",
                                  started_at: str = "2026-01-01T00:00:00+00:00") -> Path:
    """A finished run of two allreduce records as the driver writes them, the second's busbw then
    rewritten to ``busbw_gbps`` and its per-rank reports dropped: verification reads that figure
    but cannot recompute it, and lists it in ``Record.unverifiable``. Its samples are the same in
    every such run: a second run beside it is one of another ``started_at``."""
    import dataclasses

    from harness.core.store import RunDir, planned_digest

    reports = [{"impl": "gloo allreduce", "nccl_algo_env": None}] * 2
    cases = [f"allreduce/algo=native,backend=gloo,dtype=float32,size_bytes={n},world=2" for n in (1024, 4096)]
    honest, edited = (derived_record(c, [30000 + i for i in range(200)], run_id=run_id, reports=reports,
                                     started_at=started_at) for c in cases)
    run = RunDir(path, run_id)
    run.append_many([honest, dataclasses.replace(edited, metrics={**edited.metrics, "busbw_gbps": busbw_gbps}, extra={})])
    run.write_fingerprint({**RUN_FINGERPRINT, "world": 2})  # its records' two ranks
    run.write_meta({"schema": "critpath.run/1", "run_id": run_id, "state": "finished", "cases_total": 2,
                    "cases_planned_sha256": planned_digest(cases), "cases_ok": 2, "cases_failed": 0})
    return run.path


def another_run(source: Path, path: Path, run_id: str) -> Path:
    """``source``'s records, fingerprint and run.json as a second run of ID ``run_id``, a day later:
    two runs to put side by side where a copy of one is refused as the same run given twice. The
    start of each record moves with the run, as a copy's cannot (``harness.core.measurement``)."""
    import dataclasses
    import datetime as dt
    import json

    from harness.core import atomic
    from harness.core.records import UNKNOWN_START
    from harness.core.store import append_records, load_records

    def later(instant):
        return instant if instant in (None, UNKNOWN_START) else \
            (dt.datetime.fromisoformat(instant) + dt.timedelta(days=1)).isoformat()

    path.mkdir(parents=True)
    append_records(path / "results.jsonl", [dataclasses.replace(r, run_id=run_id, started_at=later(r.started_at))
                                            for r in load_records(source)])
    shutil.copyfile(source / "fingerprint.json", path / "fingerprint.json")
    meta = json.loads((source / "run.json").read_text())
    times = {name: later(meta[name]) for name in ("started_at", "finished_at") if name in meta}
    atomic.write_json(path / "run.json", {**meta, **times, "run_id": run_id}, run_writer=True)
    return path


GATE_ID = "20260101-000000-test-0a1b"  # the ID a fixture gate writes into gate.json and its generations


def finished_gate(gate_dir: Path, error: str = "") -> Path:
    """What a gate writes into its ``--out`` when it ends, beside fixture side directories
    (``base/gen-NNN``, ``candidate/gen-NNN``), as a real one (harness.gate.cli._run_ab) writes it:
    its ID in each generation, gate.json counting them, and per case the pairs both sides hold, its
    sides measured at a commit each; compare rechecks only a gate that finished. ``error``: why it
    stopped as a whole, written as a stopped gate writes it (its sides unmeasured, no cases)."""
    from harness.core.store import load_records
    from harness.gate.outputs import GateResult, write_outputs
    from harness.gate.schedule import GATE_ID_FILE, Plan
    from harness.gate.stats import Comparison, Outcome, Policy, Verdict

    gate_dir = Path(gate_dir)
    if error:
        unmeasured = {"base": {"ref": "HEAD~1", "measured": False}, "candidate": {"ref": "HEAD", "measured": False}}
        write_outputs(GateResult("ab", "mean_ns", "process", Policy(), error=error, **unmeasured), gate_dir, own=True)
        return gate_dir
    generations = sorted(p.name for p in (gate_dir / "base").glob("gen-*"))
    pairs: dict[str, int] = {}  # case -> the generations whose rounds on both sides hold it
    for gen in generations:
        for side in ("base", "candidate"):
            if (gate_dir / side / gen).is_dir():  # a side laid out later gets its ID when gate.json is written again
                (gate_dir / side / gen / GATE_ID_FILE).write_text(GATE_ID + "\n")
                _measured_at(gate_dir / side / gen, GATE_COMMITS[side])
        held = [{r.case_id for d in sorted((gate_dir / side / gen).glob("round-*")) for r in load_records(d)}
                for side in ("base", "candidate")]
        for case_id in held[0] & held[1]:
            pairs[case_id] = pairs.get(case_id, 0) + 1
    verdicts = {case_id: Verdict(Outcome.INCONCLUSIVE, "neither a change nor its absence shown", 0.05, 0.01,
                                 comparison=Comparison(n, n, 1.0, 1.0, 1.0, 0.9, 1.1, 0.95, 0.5,
                                                       "wilcoxon signed-rank, paired, group-sequential"),
                                 detail={"n_pairs": n, "rounds_per_pair": 1})
                for case_id, n in sorted(pairs.items())}
    sides = {side: {"label": side, "ref": ref, "path": f"/tmp/critpath-gate-{side}/tree", "commit": commit,
                    "dirty": False}
             for side, ref, commit in (("base", "HEAD~1", GATE_COMMITS["base"]),
                                       ("candidate", "HEAD", GATE_COMMITS["candidate"]))}
    rounds = max((len([d for d in (gate_dir / side / gen).glob("round-*") if d.is_dir()])
                  for side in ("base", "candidate") for gen in generations), default=1)
    extra = {"plan": Plan(rounds=max(1, rounds)).to_dict(), "side_kind": "worker", "generations": len(generations), "stopped": "budget",
             "gate_id": GATE_ID}
    write_outputs(GateResult("ab", "mean_ns", "process", Policy(), verdicts, repeats=len(generations), extra=extra,
                             **sides), gate_dir, own=True)
    return gate_dir


def _measured_at(gen_dir: Path, commit: str) -> None:
    """Each fingerprint of a fixture generation (its worker's, or its rounds' runs') without a git
    commit given ``commit``, as a process of that side's tree writes it; a worker that left none
    is given one."""
    prints = [p for p in [gen_dir / "fingerprint.json", *gen_dir.glob("round-*/fingerprint.json")] if p.is_file()]
    for fp in prints or [gen_dir / "fingerprint.json"]:
        data = json.loads(fp.read_text()) if fp.is_file() else dict(RUN_FINGERPRINT)
        if "git" not in data:
            fp.write_text(json.dumps({**data, "git": {"commit": commit, "dirty": False}}))


def gate_out(root: Path, generations: int = 15, noop: str = "selftest/fault_rank=0,mode=noop,world=1") -> Path:
    """A finished gate's --out as a real one-case gate leaves it: per side a generation per worker
    (fingerprint.json, worker.log, round-000/results.jsonl of one run ID), then gate.json."""
    from harness.core.store import RESULTS, RunDir, append_record

    for side, center_ns in (("base", 10_000), ("candidate", 10_100)):
        for gen in range(generations):
            gen_dir = root / side / f"gen-{gen:03d}"
            worker = RunDir(gen_dir, f"{side}-{gen}")
            worker.write_fingerprint({**RUN_FINGERPRINT, "git": {"commit": GATE_COMMITS[side], "dirty": False}})
            (gen_dir / "worker.log").write_text("")
            samples = [center_ns + 7 * gen + i for i in range(50)]
            (gen_dir / "round-000").mkdir()
            append_record(gen_dir / "round-000" / RESULTS, derived_record(noop, samples, run_id=f"{side}-{gen}"))
    return finished_gate(root)
