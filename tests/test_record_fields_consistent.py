"""A record's fields agree with its case and its own samples, or `critpath show` refuses the file.

Each edit is made on a real run's first record (one `critpath run` of the cheap self-test case, one
of a small allreduce on two ranks), and each is refused with exit 2, naming the file, line and field:
a check that counts more results than the case holds, a plan of more iterations than samples, a
backend critpath does not run or that is not the case's, a clock the run did not time with, a
reduction that is not the driver's at that world, a wall time shorter than the samples it holds,
and a start outside the run's own start and end. The runs as written are shown (exit 0).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

from harness.cli import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # seconds of real processes: the slow tier keeps the quick one under 5 minutes

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
AR = "allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=1024,world=2"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    made = {}
    for name, case, more in (("noop", NOOP, ()), ("allreduce", AR, ("--iters", "50"))):
        out = root / name
        proc = run_cli("run", "--case", case, *more, "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        made[name] = out
    return made


def _edited(source: Path, to: Path, edit) -> Path:
    """A copy of the run ``source`` whose first record ``edit`` (given it and run.json) changed."""
    shutil.copytree(source, to)
    results = to / "results.jsonl"
    records = [json.loads(line) for line in results.read_text().splitlines()]
    edit(records[0], json.loads((to / "run.json").read_text()))
    results.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return to


def _set(path: str, value):
    """An edit setting the record's field ``path`` (dotted) to ``value``."""
    *parents, name = path.split(".")

    def edit(record, meta):
        for key in parents:
            record = record[key]
        record[name] = value
    return edit


@pytest.mark.parametrize("run", ["noop", "allreduce"])
def test_the_runs_as_written_are_shown(runs, run, capsys):
    assert main(["show", str(runs[run])]) == 0, capsys.readouterr().err


EDITS = [
    # 512 is right: 256 float32 elements a rank, two ranks
    ("allreduce", "check.checked", 10**12),
    ("noop", "check.checked", 2),  # one answer a rank, one rank
    ("allreduce", "plan.iters", 51),  # 50 samples held
    ("noop", "plan.iters", 1),
    ("allreduce", "backend", "mpi"),
    ("allreduce", "backend", "nccl"),  # the case says backend=gloo
    ("noop", "backend", "mpi"),  # a case without a backend key still ran over one critpath runs
    ("allreduce", "timer", "cuda_events"),
    ("allreduce", "timer", "cuda_event"),  # CUDA events time only NCCL ranks, which have a GPU
    ("noop", "timer", "family-owned loop (selftest)"),  # selftest owns no loop
    ("allreduce", "reduction", "single_rank"),  # world 2: max over ranks
    ("noop", "reduction", "max_over_ranks"),
    ("allreduce", "wall_s", 1e-9),  # its samples add up to tens of ms
    ("noop", "wall_s", 1e-9),
]


@pytest.mark.parametrize("run, field, value", EDITS, ids=[f"{r}-{f}={v}" for r, f, v in EDITS])
def test_an_edited_field_is_refused_naming_it(runs, tmp_path, capsys, run, field, value):
    edited = _edited(runs[run], tmp_path / "run", _set(field, value))
    assert main(["show", str(edited)]) == 2
    assert f"{edited / 'results.jsonl'}:1: field {field}:" in capsys.readouterr().err


@pytest.mark.parametrize("run", ["noop", "allreduce"])
@pytest.mark.parametrize("started_at", ["9999-12-31T23:59:59.999+00:00", "2000-01-01T00:00:00.000+00:00"])
def test_a_record_that_starts_outside_its_run_is_refused(runs, tmp_path, capsys, run, started_at):
    edited = _edited(runs[run], tmp_path / "run", _set("started_at", started_at))
    assert main(["show", str(edited)]) == 2
    err = capsys.readouterr().err
    assert f"{edited / 'results.jsonl'}:1: field started_at: {started_at} is" in err and "run.json" in err


def test_a_record_may_start_within_the_second_its_run_finished(runs, tmp_path, capsys):
    """run.json's times are whole seconds, truncated: a case begun at 12:00:00.854 of a run that
    finished in that second reads 'finished_at 12:00:00'."""
    def edit(record, meta):
        record["started_at"] = meta["finished_at"].replace("+00:00", ".999+00:00")
    assert main(["show", str(_edited(runs["noop"], tmp_path / "run", edit))]) == 0, capsys.readouterr().err
