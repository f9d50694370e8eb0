"""A fingerprint.json is one critpath wrote, read as this release reads it: its schema, its fields and
its launch are refused, naming the field, where no writer of the project gives them, and its launch
is the one the directory's run.json allows. ``launch: worker`` beside world 16 in a run of world-2
records switched off the check of the world against the records: show and diagnose took it and an
acceptance pin of world 16 passed.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import numpy as np
from conftest import RUN_FINGERPRINT, derived_record

from harness.cli import main
from harness.core import fingerprintfile
from harness.core.store import FINGERPRINT, ResultsFileError, RunDir, load_run
from harness.nccltests.importer import fingerprint_of, parse_file
from harness.run import fingerprint

ROOT = Path(__file__).resolve().parent.parent
CASE = "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,world=2"
NCCL_LOG = ROOT / "tests" / "fixtures" / "nccl_tests" / "all_reduce_h100.txt"
PROFILE = ROOT / "baselines" / "profiles" / "cpu-ci.yaml"


@pytest.fixture(scope="module")
def world2_run(tmp_path_factory) -> Path:
    """A finished local run of one world-2 allreduce case, as ``critpath run`` writes it."""
    out = tmp_path_factory.mktemp("fp") / "R"
    assert main(["run", "--case", CASE, "--iters", "50", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def imported_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fp") / "I"
    assert main(["import-nccl-tests", str(NCCL_LOG), "--out", str(out)]) == 0
    return out


def _edited(run: Path, tmp_path: Path, edit) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(run, out)
    data = json.loads((out / FINGERPRINT).read_text())
    edit(data)
    (out / FINGERPRINT).write_text(json.dumps(data))
    return out


def _as_a_worker_of_16(data: dict) -> None:
    data.update(launch="worker", world=16)
    data["layout"].update(ranks_per_node=[16], local_ranks=list(range(16)), node_of_rank=[0] * 16)


def _world_16_profile(tmp_path: Path) -> Path:
    """The shipped cpu-ci profile at world 16, without its run: section, with one p99 check."""
    text = PROFILE.read_text()
    head = text[:text.index("\nrun:")].replace("\nworld: 2\n", "\nworld: 16\n")
    path = tmp_path / "p.yaml"
    path.write_text(f"{head}\nchecks:\n  - {{name: p99, case: '{CASE}', statistic: p99_us, max: 1.0e+9, source: t}}\n")
    return path


def test_a_worker_launch_does_not_excuse_a_world_the_records_refute(world2_run, tmp_path, capsys):
    run = _edited(world2_run, tmp_path, _as_a_worker_of_16)
    field = f"{run / FINGERPRINT}: field launch: 'worker'"
    for command in (["show", str(run)], ["diagnose", str(run)]):
        capsys.readouterr()
        assert main(command) == 2
        assert field in capsys.readouterr().err
    capsys.readouterr()
    assert main(["accept", "--profile", str(_world_16_profile(tmp_path)), "--run", str(run), "--no-report"]) == 2
    out = capsys.readouterr().out
    assert "PASS" not in out.replace("COULD NOT VERIFY", "") and field in out


@pytest.mark.parametrize("launch", ["worker", "imported"])
def test_a_launch_another_writer_gives_is_refused_beside_a_runs_run_json(world2_run, tmp_path, capsys, launch):
    # a worker's own fingerprint, as it writes it (world 1), holds together on its own: only the
    # run.json beside it says it is not this directory's
    own = fingerprint.collect("gloo", fingerprintfile.WORKER_WORLD, fingerprintfile.WORKER)
    run = _edited(world2_run, tmp_path, lambda d: d.update(own if launch == "worker" else {"launch": launch}))
    code = main(["show", str(run)])
    err = capsys.readouterr().err
    assert code == 2
    assert (f"{run / FINGERPRINT}: field launch: {launch!r}, but run.json is a critpath run's, whose launch is "
            "'local' or 'joined'") in err


def test_a_run_launch_is_refused_beside_an_imports_run_json(imported_run, tmp_path, capsys):
    run = _edited(imported_run, tmp_path, lambda d: d.update(launch="local"))
    assert main(["show", str(run)]) == 2
    assert (f"{run / FINGERPRINT}: field launch: 'local', but run.json is an import's, whose launch is 'imported'"
            in capsys.readouterr().err)


def test_a_workers_fingerprint_beside_its_rounds_records_is_read(tmp_path):
    """A worker's directory holds no run.json: its fingerprint (its own process, one rank) beside a
    round's records of wider cases is read, and the round, with no run.json, is not whole."""
    round_dir = RunDir(tmp_path / "round-000", "w")
    samples = np.random.default_rng(0).normal(1000, 10, 200).clip(1)
    for world in (1, 2):
        round_dir.append(derived_record(f"selftest/fault_rank=0,mode=noop,world={world}", samples, run_id="w",
                                        plan={"warmup": 1, "iters": len(samples)}))
    round_dir.write_fingerprint(fingerprint.collect("gloo", fingerprintfile.WORKER_WORLD, fingerprintfile.WORKER))
    run = load_run(tmp_path / "round-000")
    assert run.fingerprint["launch"] == "worker" and run.fingerprint["world"] == 1
    assert run.incomplete.startswith("incomplete: 2 cases and no run.json")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(schema="nonsense"), "field schema: 'nonsense' is not 'critpath.fingerprint/1'"),
    (lambda d: d.update(schema="critpath.fingerprint/2"), "field schema: 'critpath.fingerprint/2' is not"),
    (lambda d: d.update(schema=None), "field schema: None is not"),
    (lambda d: d.update(zzz=1), "field 'zzz': not a field of a critpath.fingerprint/1 fingerprint.json"),
    (lambda d: d["git"].update(zz=1), "field 'git.zz': not a field of git (it has commit, dirty, reason)"),
    (lambda d: d["layout"].update(zz=1), "field 'layout.zz': not a field of layout"),
    (lambda d: d["gpus"].update(zz=1), "field 'gpus.zz': not a field of gpus"),
    (lambda d: d.update(launch="bogus"), "field launch: 'bogus' is not a launch critpath writes (local, joined, worker, "
                                         "imported)"),
    (lambda d: d.update(launch="Local"), "field launch: 'Local' is not a launch critpath writes"),
])
def test_a_fingerprint_critpath_did_not_write_is_refused_naming_the_field(world2_run, tmp_path, capsys, edit, message):
    run = _edited(world2_run, tmp_path, edit)
    assert main(["show", str(run)]) == 2
    assert f"{run / FINGERPRINT}: {message}" in capsys.readouterr().err


def _joined_layout() -> dict:
    ranks = [fingerprint.rank_identity(rank, rank % 2) for rank in range(4)]
    for rank in ranks:
        rank["node"] = f"node{rank['rank'] // 2}"
    return fingerprint.node_layout(ranks)


def test_every_fingerprint_the_project_writes_is_read(imported_run, world2_run):
    written = {
        "run": json.loads((world2_run / FINGERPRINT).read_text()),
        "import": json.loads((imported_run / FINGERPRINT).read_text()),
        "import of JSON": fingerprint_of(parse_file(NCCL_LOG.with_suffix(".json")), "x.json"),
        "local": fingerprint.collect("gloo", 3, fingerprintfile.LOCAL),
        "joined": fingerprint.collect("gloo", 4, fingerprintfile.JOINED, _joined_layout()),
        "worker": fingerprint.collect("gloo", fingerprintfile.WORKER_WORLD, fingerprintfile.WORKER),
        "fixture run_mixed": json.loads((ROOT / "tests" / "fixtures" / "run_mixed" / FINGERPRINT).read_text()),
        "a test's run": RUN_FINGERPRINT,  # no schema: as run.json, an absent one is this release's
    }
    for name, data in written.items():
        try:
            fingerprintfile.check(data)
        except fingerprintfile.FingerprintError as exc:
            raise AssertionError(f"{name}: {exc}") from None
    assert {d.get("launch") for d in written.values()} == set(fingerprintfile.LAUNCHES)


def test_a_refused_fingerprint_is_refused_by_load_run_too(world2_run, tmp_path):
    run = _edited(world2_run, tmp_path, lambda d: d["git"].update(zz=1))
    with pytest.raises(ResultsFileError, match="field 'git.zz'"):
        load_run(run)
