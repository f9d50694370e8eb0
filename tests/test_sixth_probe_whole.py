"""A results file is judged as the run it belongs to, however it is reached: through a symlink (the
run.json beside the real file speaks), copied out of its directory (a results.jsonl is always its
directory's), or named otherwise (a bare file, still one run with each case once); a fingerprint
is one only with the fields every run's holds; report beside a run named by its results file."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.core import fingerprintfile
from harness.core.store import FINGERPRINT, RESULTS, RUN_META, load_run, load_whole, run_dir_of

RUN = Path(__file__).parent / "fixtures" / "run_mixed"


def _copy(tmp_path: Path, name: str) -> Path:
    run = tmp_path / name
    shutil.copytree(RUN, run)
    return run


def _killed(tmp_path: Path) -> Path:
    """A run stopped after its first case: run.json says running, one of its 53 records written."""
    run = _copy(tmp_path, "killed")
    first = (run / RESULTS).read_text().splitlines(keepends=True)[0]
    (run / RESULTS).write_text(first)
    meta = json.loads((run / RUN_META).read_text())
    meta.update(state="running", cases_ok=1, cases_failed=0)
    (run / RUN_META).write_text(json.dumps(meta))
    return run


def _compare(tmp_path: Path, base: Path, candidate: Path) -> int:
    return main(["compare", str(base), str(candidate), "--out", str(tmp_path / "gate")])


# -- D1: a symlink is judged where it leads -----------------------------------------------------------

def _linked_beside(tmp_path: Path) -> Path:
    link = tmp_path / "lnk.jsonl"
    link.symlink_to(_killed(tmp_path) / RESULTS)
    return link


def _linked_as_results(tmp_path: Path) -> Path:
    killed = _killed(tmp_path)
    (tmp_path / "k4").mkdir()
    link = tmp_path / "k4" / RESULTS
    link.symlink_to(os.path.relpath(killed / RESULTS, link.parent))
    return link


@pytest.mark.parametrize("linked", [_linked_beside, _linked_as_results])
def test_a_killed_runs_results_file_through_a_symlink_is_incomplete(tmp_path, capsys, linked):
    link = linked(tmp_path)
    assert run_dir_of(link) == (tmp_path / "killed").resolve()
    assert main(["show", str(link)]) == 1
    assert "incomplete: 1 of 53 cases, run.json says running" in capsys.readouterr().err
    assert _compare(tmp_path, _copy(tmp_path, "good"), link) == 2
    err = capsys.readouterr().err
    assert f"{link}: incomplete: 1 of 53 cases" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["pipeline-compare"], ["moe-report"]])
def test_the_pipeline_and_moe_commands_refuse_a_symlink_to_a_killed_run(tmp_path, capsys, command):
    assert main([*command, str(_linked_beside(tmp_path))]) == 2
    assert "incomplete: 1 of 53 cases" in capsys.readouterr().err


# -- D2: a bare results file holds each case once -----------------------------------------------------

def _bare_with_a_case_twice(tmp_path: Path) -> Path:
    lines = (RUN / RESULTS).read_text().splitlines(keepends=True)
    again = json.loads(lines[0])
    again["started_at"] = "2026-01-01T00:01:00+00:00"  # a second measurement of the same case
    bare = tmp_path / "dup.jsonl"
    bare.write_text("".join(lines) + json.dumps(again) + "\n")
    return bare


def test_a_bare_results_file_with_a_case_recorded_twice_is_not_whole(tmp_path, capsys):
    bare = _bare_with_a_case_twice(tmp_path)
    assert run_dir_of(bare) is None
    assert load_run(_copy(tmp_path, "good")).incomplete == ""
    with pytest.raises(Exception, match="not whole: a case recorded more than once"):
        load_whole(bare)
    assert _compare(tmp_path, tmp_path / "good", bare) == 2
    err = capsys.readouterr().err
    assert f"{bare}: not whole: a case recorded more than once" in err and "Traceback" not in err


def test_a_bare_results_file_of_one_run_each_case_once_is_taken_as_it_is(tmp_path):
    bare = tmp_path / "alone.jsonl"
    shutil.copy(RUN / RESULTS, bare)
    assert len(load_whole(bare).records) == 53


# -- D3: a results.jsonl is always its directory's; a fingerprint has its fields -------------------

def test_a_killed_runs_records_copied_out_of_its_directory_are_judged_as_their_directory(tmp_path, capsys):
    copied = tmp_path / "k3"
    copied.mkdir()
    shutil.copy(_killed(tmp_path) / RESULTS, copied)
    assert main(["show", str(copied)]) == 1
    by_dir = capsys.readouterr().err
    assert main(["show", str(copied / RESULTS)]) == 1
    by_file = capsys.readouterr().err
    assert "incomplete: 1 cases and no run.json" in by_dir and "incomplete: 1 cases and no run.json" in by_file


@pytest.mark.parametrize("fingerprint,lacks", [({"host": "h"}, "launch, world"),
                                               ({"launch": "local", "world": None}, "world")])
def test_a_fingerprint_without_the_fields_every_run_writes_is_none(tmp_path, capsys, fingerprint, lacks):
    run = _copy(tmp_path, "junk")
    (run / FINGERPRINT).write_text(json.dumps(fingerprint))
    why = f"incomplete: 53 cases and a {FINGERPRINT} without field {lacks}, which every run's holds"
    assert load_run(run).incomplete == why
    assert main(["show", str(run)]) == 1
    assert why in capsys.readouterr().err


def test_every_fingerprint_critpath_writes_holds_the_required_fields():
    from harness.run.fingerprint import collect

    assert fingerprintfile.lacking(collect("gloo", 1, "local")) == ()
    assert fingerprintfile.lacking(json.loads((RUN / FINGERPRINT).read_text())) == ()
    assert fingerprintfile.lacking({}) == fingerprintfile.REQUIRED


# -- D5: report of a run named by its results file ---------------------------------------------------

def test_report_of_a_runs_results_file_is_written_beside_the_run(tmp_path, capsys):
    run = _copy(tmp_path, "rep")
    assert main(["report", str(run / RESULTS)]) == 0
    err = capsys.readouterr().err
    assert "File exists" not in err and "Errno" not in err
    assert (run / "report.md").is_file() and (run / "report.html").is_file()
