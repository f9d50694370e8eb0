"""A copy of a run whose run ID was rewritten in every record and in run.json is still the run it
copies: every command that counts runs refuses it beside the run, naming both directories, and the
ring/tree crossover counts copies once, saying so, rather than pooling them as runs that agree. A copy is known by its measurements
(``harness.core.measurement``): one case, one start, the same per-iteration samples."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_crossover_runs import _cells, _run as _crossover_run
from test_model_calibrate import _write_run

from harness.cli import main
from harness.collectives import crossover
from harness.core.store import LoadedRun, load_run
from harness.core.measurement import measurement_key
from harness.core.records import Record


def _renamed_copy(run: Path, copy: Path, run_id: str) -> Path:
    """``run`` copied to ``copy`` with ``run_id`` written over its run ID everywhere it is kept."""
    shutil.copytree(run, copy)
    results = copy / "results.jsonl"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    results.write_text("".join(json.dumps({**line, "run_id": run_id}) + "\n" for line in lines))
    meta = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**meta, "run_id": run_id}))
    return copy


@pytest.fixture(scope="module")
def run_and_copy(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("renamed")
    run = _write_run(root / "run", np.random.default_rng(5))
    copy = _renamed_copy(run, root / "copy", "renamed-copy")
    assert {r.run_id for r in load_run(copy).records} == {"renamed-copy"}  # it reads as a run of its own
    return run, copy


@pytest.mark.parametrize("command", [
    ["report", "--out", "{out}/rep"],
    ["show"],
    ["export", "--format", "csv", "--out", "{out}/t.csv"],
    ["compare", "--out", "{out}/cmp"],
    ["model", "--ranks", "2,4", "--sizes", "8:1M:x4", "--no-plots", "--out", "{out}/m", "--calibrate", "--calibrate"],
])
def test_a_copy_under_another_run_id_is_refused_naming_both(run_and_copy, tmp_path, command, capsys):
    run, copy = run_and_copy
    args = [a.format(out=tmp_path) for a in command]
    if args[0] == "model":  # each run after its own --calibrate
        args = args[:-1] + [str(run), "--calibrate", str(copy)]
    else:
        args += [str(run), str(copy)]
    assert main(args) == 2
    said = capsys.readouterr().err.replace("\n", " ")
    assert f"run renamed-copy in {copy} is run synthetic in {run} under another run ID" in said, said
    assert "hold the same samples" in said, said
    if args[0] != "compare":  # a compare writes its could-not-run verdict, for the CI that reads it
        assert list(tmp_path.iterdir()) == []  # nothing written


def test_copies_under_other_run_ids_are_not_three_runs_of_the_crossover():
    rng = np.random.default_rng(11)
    one = _crossover_run("r1", [2, 2, 2, 2, 0.5, 0.5, 0.5, 0.5], rng)  # tree faster up to 1 KiB, ring above
    copies = [LoadedRun(Path(f"copy{k}"), f"copy{k}", tuple(replace(r, run_id=f"copy{k}") for r in one.records),
                        fingerprint=one.fingerprint) for k in (2, 3)]
    [c] = crossover.ring_tree_crossovers([one, *copies])
    assert c.runs == ("r1",) and c.copies == ("copy2", "copy3")
    assert not c.established  # one run, whose copies agree with it by construction
    [cell] = _cells([one, *copies])
    assert cell["runs"] == "1"
    assert cell["crossover"].startswith("not established here (one run: one record per size"), cell
    assert cell["crossover"].endswith("; 2 runs given that are copies of another counted once (copy2, copy3)"), cell


def test_runs_measured_apart_are_runs_apart(tmp_path):
    # One case, one start, other samples: two measurements, so two runs.
    first = _write_run(tmp_path / "a", np.random.default_rng(1))
    second = _write_run(tmp_path / "b", np.random.default_rng(2))
    _renamed_copy(second, tmp_path / "c", "second")
    shutil.rmtree(second)
    assert main(["export", "--format", "csv", "--out", str(tmp_path / "t.csv"), str(first), str(tmp_path / "c")]) == 0


def test_records_without_per_iteration_samples_have_no_measurement_key():
    kept = Record("r", "selftest/fault_rank=0,mode=noop,world=1", "selftest", 1, {}, "ok", "gloo", 1,
                  "2026-12-01T00:00:00Z", 1.0, samples_ns=(5, 6))
    assert measurement_key(kept) == (kept.case_id, kept.started_at, (5, 6))
    assert measurement_key(replace(kept, samples_ns=())) is None  # a failed record's
    assert measurement_key(replace(kept, extra={"imported": {"samples": "mean_only"}})) is None
