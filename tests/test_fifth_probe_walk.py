"""The fifth probe's walk, nccl-tests log, fingerprint and record defects, each held by a test
built on its own inputs under tmp_path."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import RUN_FINGERPRINT, derived_record

from harness.cli import main
from harness.core.options import UsageError
from harness.core.records import UNKNOWN_START
from harness.core.scale import MAX_CPU_COUNT, MAX_WORLD
from harness.core.store import ResultsFileError, RunDir, load_records, load_run
from harness.gate.cli import MAX_REPEATS, SIDE_DEPTH
from harness.gate.outputs import EXIT_COULD_NOT_RUN
from harness.history.asvfiles import RESULTS_DEPTH
from harness.nccltests.limits import MAX_DEVICE
from harness.run import fingerprint
from harness.run.joined import joined_rank

FIXTURES = Path(__file__).parent / "fixtures"
ASV = FIXTURES / "asv_results"
NOOP = "selftest/fault_rank=0,mode=noop,world=1"
# Past the interpreter's recursion limit (1,000), where os.walk and rglob raised RecursionError.
DEEP = 1_100


@pytest.fixture
def deep_tree():
    """Makes trees ``levels`` deep, and removes them after the test a level at a time (pytest's
    own clean-up of old temporary directories recurses, and would hit the recursion limit)."""
    made: list[Path] = []

    def make(root: Path, levels: int, name: str, data: bytes) -> None:
        made.append(root)
        _deep_file(root, levels, name, data)

    yield make
    for root in made:
        while (root / "a").is_dir():  # lift the level below "a" into its place, then drop "a"
            for entry in os.listdir(root / "a"):
                if entry != "a":
                    os.unlink(root / "a" / entry)
            if (root / "a" / "a").is_dir():
                os.rename(root / "a" / "a", root / "lifted")
            os.rmdir(root / "a")
            if (root / "lifted").is_dir():
                os.rename(root / "lifted", root / "a")


def _deep_file(root: Path, levels: int, name: str, data: bytes) -> None:
    """``name`` holding ``data``, ``levels`` directories below ``root``: each level entered in turn,
    so no path is longer than the system allows."""
    root.mkdir(parents=True, exist_ok=True)
    here = os.open(root, os.O_RDONLY)
    for _ in range(levels):
        os.mkdir("a", dir_fd=here)
        below = os.open("a", os.O_RDONLY, dir_fd=here)
        os.close(here)
        here = below
    fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=here)
    os.write(fd, data)
    os.close(fd)
    os.close(here)


def _run(root: Path, run_id: str, center: float = 1000.0, seed: int = 0) -> Path:
    samples = np.random.default_rng(seed).normal(center, center * 0.01, 200).clip(1)
    run = RunDir(root, run_id)
    run.append(derived_record(NOOP, samples, run_id=run_id, plan={"warmup": 1, "iters": len(samples)}))
    run.write_fingerprint(RUN_FINGERPRINT)  # a run writes one before its first case
    run.write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": 1})
    return root


# -- 8: deep and wide trees ---------------------------------------------------------------------

def test_an_asv_results_directory_nested_past_the_recursion_limit_is_refused_naming_the_depth(tmp_path, capsys, deep_tree):
    results = tmp_path / "deep"
    deep_tree(results, DEEP, "x.json", b"{}")
    assert main(["report", "--asv-results", str(results), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RecursionError" not in err
    assert f"more than {RESULTS_DEPTH} directories below {results}" in err


def test_an_asv_results_directory_as_asv_writes_it_is_still_read(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(ASV, results)
    assert main(["report", "--asv-results", str(results), "--out", str(tmp_path / "out")]) == 0


def test_a_machine_directory_linked_into_asv_results_is_refused_naming_the_link(tmp_path, capsys):
    """A machine's directory linked into --asv-results was passed over without a word: its
    commits were missing from the report, which said nothing of them."""
    results, elsewhere = tmp_path / "results", tmp_path / "elsewhere"
    shutil.copytree(ASV, elsewhere)
    results.mkdir()
    machine = next(p for p in elsewhere.iterdir() if p.is_dir())
    (results / machine.name).symlink_to(machine)
    assert main(["report", "--asv-results", str(results), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{results / machine.name} is a symbolic link to a directory ({machine})" in err, err


def test_a_compare_side_nested_past_the_recursion_limit_is_refused_naming_the_depth(tmp_path, capsys, deep_tree):
    base = _run(tmp_path / "base", "base-0")
    deep = tmp_path / "cmpdeep"
    deep_tree(deep, DEEP, "results.jsonl", (base / "results.jsonl").read_bytes())
    assert main(["compare", str(deep), str(base), "--out", str(tmp_path / "out")]) == EXIT_COULD_NOT_RUN
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RecursionError" not in err
    assert f"more than {SIDE_DEPTH} directories below {deep}" in err


def test_copies_of_one_run_on_a_side_are_refused_as_repeats_naming_both(tmp_path, capsys):
    side = tmp_path / "side"
    first = _run(side / "a", "run-x")
    shutil.copytree(first, side / "b")
    other = tmp_path / "other"
    for i in range(2):
        _run(other / f"r{i}", f"other-{i}", seed=i)
    assert main(["compare", str(side), str(other), "--out", str(tmp_path / "out")]) == EXIT_COULD_NOT_RUN
    err = capsys.readouterr().err
    assert f"base side {side}: run run-x is in {side / 'a'} and in {side / 'b'}; a copy of a run counts once" in err


def test_a_compare_side_of_more_runs_than_a_gate_repeats_is_refused(tmp_path, capsys):
    one = _run(tmp_path / "one", "run-x")
    side = tmp_path / "many"
    for i in range(MAX_REPEATS + 1):  # copies: the count is refused before any is read
        shutil.copytree(one, side / f"r{i}")
    other = _run(tmp_path / "other", "other-0")
    assert main(["compare", str(other), str(side), "--out", str(tmp_path / "out")]) == EXIT_COULD_NOT_RUN
    assert f"{side}: {MAX_REPEATS + 1} run directories; a compare side takes at most {MAX_REPEATS}" in \
        capsys.readouterr().err


def test_distinct_runs_on_each_side_still_compare(tmp_path):
    base, cand = tmp_path / "a", tmp_path / "b"
    for i in range(3):
        _run(base / f"r{i}", f"a-{i}", seed=i)
        _run(cand / f"r{i}", f"b-{i}", seed=10 + i)
    assert main(["compare", str(base), str(cand), "--out", str(tmp_path / "out")]) in (0, 1)


# -- 12: nccl-tests text logs read whole words, by the one integer grammar ------------------------

PUBLIC_LOG = FIXTURES / "nccl_tests" / "public" / "gcp_a3mega_allreduce_16rank_2node.txt"  # 16 ranks, 2 nodes


def _edited_log(tmp_path: Path, line: int, old: str, new: str) -> Path:
    """The public log with one field of its line ``line`` (1-based) changed."""
    lines = PUBLIC_LOG.read_text().splitlines(keepends=True)
    assert lines[line - 1].count(old) == 1, lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new)
    path = tmp_path / "all_reduce.txt"
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("line, old, new, message", [
    (55, ": 0 OK", ": 0x5 OK", "Out of bounds values: expected an integer"),
    (55, ": 0 OK", ": 1e400 OK", "Out of bounds values: expected an integer"),
    (55, ": 0 OK", ": 00 OK", "Out of bounds values: '00' has a leading zero"),
    (55, ": 0 OK", ": 0 OKAY", "Out of bounds values is '0 OKAY'; nccl-tests prints a count then OK or FAILED"),
    (55, ": 0 OK", ": 3 OK", "Out of bounds values 3 OK; nccl-tests prints FAILED exactly when the count is not 0"),
    (1, "nGpus 1 ", "nGpus 1x ", "nGpus: expected an integer"),
    (1, "iters: 20 ", "iters: 20x ", "iters: expected an integer"),
    (1, "validation: 1 ", "validation: 7 ", "validation: 7 is outside the range it may take (from 0 to 1)"),
    (24, "           8             2", "          08             2", "size (B): '08' has a leading zero"),
    (24, "           8             2", "0" * 48 + "8             2", "size (B): '" + "0" * 48 + "8' has a leading zero"),
    (19, "Rank 15 ", "Rank 16 ", "Rank 16, but the run has 16 ranks"),
    (19, "Rank 15 ", "Rank 15x ", "Rank: expected an integer"),
    (19, "device  7 ", "device 99999999 ", f"device: 99999999 is outside the range it may take (from 0 to {MAX_DEVICE})"),
])
def test_a_public_log_with_one_field_changed_is_refused_naming_the_line(tmp_path, capsys, line, old, new, message):
    path = _edited_log(tmp_path, line, old, new)
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}: {message}" in err, err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


def test_the_public_log_as_published_still_imports(tmp_path):
    path = tmp_path / "all_reduce.txt"
    shutil.copyfile(PUBLIC_LOG, path)
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 0


# -- 17: a record holds its declared fields, its count a count and its start an instant -------------

def _record_line(tmp_path: Path, edit) -> Path:
    """A run whose one record has been edited as JSON by ``edit``."""
    run = _run(tmp_path / "run", "run-r")
    data = json.loads((run / "results.jsonl").read_text())
    edit(data)
    (run / "results.jsonl").write_text(json.dumps(data) + "\n")
    return run


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["summary"].update(n=float(d["summary"]["n"])), "field summary.n: expected an integer, got 200.0"),
    (lambda d: d.update(world=2**40), f"field world: 1099511627776 is outside the range it may take (from 1 to {MAX_WORLD})"),
    (lambda d: d.update(zzz=1), "field 'zzz': not a field of a record (critpath.record/1 has schema, run_id"),
    (lambda d: d.update(started_at="last Tuesday"), "field started_at: 'last Tuesday' is not an instant"),
    (lambda d: d.update(started_at="2024-05-01T12:00:00"), "field started_at: '2024-05-01T12:00:00' is not an instant"),
    (lambda d: d.update(started_at="2024-05-01"), "field started_at: '2024-05-01' is not an instant"),
    (lambda d: d.update(started_at="2024-13-01T12:00:00+00:00"), "is not an instant as critpath writes one"),
])
def test_a_record_with_a_field_critpath_does_not_write_is_refused_naming_it(tmp_path, edit, message):
    run = _record_line(tmp_path, edit)
    with pytest.raises(ResultsFileError, match=re.escape(message)) as refused:
        load_records(run)
    assert str(refused.value).startswith(f"{run / 'results.jsonl'}:1: ")


@pytest.mark.parametrize("started_at", ["2024-05-01T12:00:00.123+00:00", "2024-05-01T14:00:00+02:00", UNKNOWN_START])
def test_a_record_as_critpath_writes_it_is_read(tmp_path, started_at):
    run = _record_line(tmp_path, lambda d: d.update(started_at=started_at))
    assert [r.started_at for r in load_records(run)] == [started_at]


def test_an_import_whose_time_has_no_zone_records_its_start_as_unknown(tmp_path):
    source = FIXTURES / "nccl_tests" / "all_reduce_h100.json"
    assert '"start_time":"2026-01-01 00:00:00"' in source.read_text().replace(": ", ":")
    assert main(["import-nccl-tests", str(source), "--out", str(tmp_path / "run")]) == 0
    assert {r.started_at for r in load_records(tmp_path / "run")} == {UNKNOWN_START}


# -- 16: fingerprint and layout numbers within the job critpath runs, and the records' world -------

def _fingerprinted(tmp_path: Path, edit, worlds=(2,), launch: str = "local") -> Path:
    """A whole run of one record per world in ``worlds``, its fingerprint as ``critpath run``
    writes it (world: the widest case) and then changed by ``edit``; for a worker, one of its rounds
    with the worker's fingerprint beside it, and no run.json, which a worker does not write."""
    run = RunDir(tmp_path / "run", "run-f")
    samples = np.random.default_rng(0).normal(1000, 10, 200).clip(1)
    for world in worlds:
        case_id = f"selftest/fault_rank=0,mode=noop,world={world}"
        run.append(derived_record(case_id, samples, run_id="run-f", plan={"warmup": 1, "iters": len(samples)}))
    if launch != "worker":
        run.write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": len(worlds)})
    data = fingerprint.collect("gloo", 1 if launch == "worker" else max(worlds), launch)  # a worker is one process
    edit(data)
    run.write_fingerprint(data)
    return tmp_path / "run"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(world=2**63 - 1), f"field world: 9223372036854775807 is outside the range it may take "
                                          f"(from 1 to {MAX_WORLD})"),
    (lambda d: d.update(cpu_count=2**63 - 1), f"field cpu_count: 9223372036854775807 is outside the range it may "
                                              f"take (from 0 to {MAX_CPU_COUNT})"),
    (lambda d: d["layout"].update(nodes=2**63 - 1), "field layout.nodes: 9223372036854775807 is outside the range"),
    (lambda d: d["layout"].update(nodes=3), "field layout.nodes: 3 nodes, but field world is 2 ranks"),
    (lambda d: d["layout"].update(local_ranks=[0, 2**40]), "field layout.local_ranks.1: 1099511627776 is outside"),
    # a layout of 3 ranks with it, so that the fingerprint holds together and only the records contradict it
    (lambda d: d.update(world=3, layout=fingerprint.collect("gloo", 3, "local")["layout"]),
     "field world: 3 ranks, but the widest of the run's records is world 2"),
])
def test_a_fingerprint_number_past_the_job_or_the_records_is_refused_naming_it(tmp_path, edit, message):
    run = _fingerprinted(tmp_path, edit)
    with pytest.raises(ResultsFileError, match=re.escape(message)) as refused:
        load_run(run)
    assert str(refused.value).startswith(f"{run / 'fingerprint.json'}: ")


def test_acceptance_refuses_a_layout_past_any_job_rather_than_failing_its_pin(tmp_path, capsys):
    run = _fingerprinted(tmp_path, lambda d: d["layout"].update(nodes=2**63 - 1))
    profile = tmp_path / "profile.yaml"
    profile.write_text("schema: critpath.accept/1\nname: t\nworld: 2\nnodes: 1\nchecks:\n"
                       f"  - {{name: p99, case: '{NOOP.replace('world=1', 'world=2')}', statistic: p99_us, max: 1000000,"
                       " source: a bound}\n")
    assert main(["accept", "--profile", str(profile), "--run", str(run), "--out", str(tmp_path / "acc")]) == 2
    shown = capsys.readouterr()
    assert "COULD NOT VERIFY" in shown.out and "FAIL" not in shown.out.replace("COULD NOT VERIFY", "")
    assert "field layout.nodes: 9223372036854775807 is outside the range" in shown.out + shown.err


def test_a_joined_job_whose_records_hold_another_world_is_refused(tmp_path):
    run = _fingerprinted(tmp_path, lambda d: None, worlds=(1, 2), launch="joined")
    with pytest.raises(ResultsFileError, match=re.escape("field world: 2 ranks, but a record of this one job is "
                                                         "world 1")):
        load_run(run)


@pytest.mark.parametrize("worlds, launch", [((1, 2), "local"), ((2,), "joined"), ((1, 2), "worker")])
def test_a_fingerprint_as_critpath_writes_it_is_read(tmp_path, worlds, launch):
    assert load_run(_fingerprinted(tmp_path, lambda d: None, worlds, launch)).fingerprint["world"] == (
        1 if launch == "worker" else max(worlds))


def test_a_local_rank_past_the_ranks_of_its_node_is_refused_naming_both_variables():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29500"}
    with pytest.raises(UsageError, match=re.escape("LOCAL_RANK=1: expected an integer in [0, 0], one of the 1 ranks "
                                                   "the launcher starts on this node (LOCAL_WORLD_SIZE)")):
        joined_rank(env)
