"""An asv results row is a family's figure only under the name the suite gives it:
``bench_families.<the class its cases' family is tracked in>.track_<figure>``. A row under another
module, another family's class or no family's class is skipped alone with a warning naming its
file and field, and a commit one machine holds in two files (two environments, or the machine's
results in two directories) is no history's value."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks import bench_families
from harness.cli import main
from harness.core import registry
from harness.history.asvfiles import suite_class
from harness.history.view import load_history

ASV = Path(__file__).parent / "fixtures" / "asv_results"
P50 = "bench_families.Allreduce.track_p50_us"
SECOND = "22222222-existing-py_usr_bin_python3.json"


def _results(tmp_path: Path, name: str, row) -> tuple[Path, Path]:
    """The fixture's results, the second commit's file holding ``row`` as ``name`` too."""
    results = tmp_path / "asv"
    shutil.copytree(ASV, results)
    path = results / "ci-runner" / SECOND
    data = json.loads(path.read_text())
    data["results"][name] = row
    path.write_text(json.dumps(data))
    return results, path


def _report(tmp_path: Path, results: Path, capsys) -> tuple[str, str]:
    capsys.readouterr()
    out = tmp_path / "rep"
    assert main(["report", "--asv-results", str(results), "--out", str(out)]) == 0
    return capsys.readouterr().err, (out / "report.md").read_text()


def _series_rows(md: str) -> list[str]:
    """The report's series table: one line per machine, figure and case."""
    return [line for line in md.splitlines() if line.startswith("| ci-runner |")]


@pytest.mark.parametrize("name, why", [
    ("bench_families.Rpc.track_p99_us", ".params[0][0]: allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,"
                                        "world=2 is a case of family 'allreduce', which the suite tracks in class "
                                        "Allreduce, not Rpc"),
    ("evil_mod.Allreduce.track_p50_us", ": 'evil_mod.Allreduce.track_p50_us' is no benchmark of the families' suite"),
    ("bench_families.Nosuch.track_p50_us", ": 'Nosuch' is no family's class in bench_families"),
    ("bench_families.Allreduce.Extra.track_p50_us", ": 'bench_families.Allreduce.Extra.track_p50_us' is no benchmark"),
])
def test_a_row_under_a_name_the_suite_does_not_give_its_cases_is_skipped_naming_it(tmp_path, capsys, name, why):
    plain_err, plain = _report(tmp_path / "plain", ASV, capsys)
    results, path = _results(tmp_path, name, json.loads((ASV / "ci-runner" / SECOND).read_text())["results"][P50])
    err, md = _report(tmp_path, results, capsys)
    assert f"warning: skipped {path}: field results.{name}{why}" in err and "the row is skipped" in err, err
    assert _series_rows(md) == _series_rows(plain)  # no Rpc.p99_us of allreduce cases, no second Allreduce.p50_us
    assert not any("Rpc.p99_us" in row or "Nosuch" in row for row in _series_rows(md))
    series = load_history(results)
    assert not any(s.benchmark == name for s in series)
    for s in series:  # one value a case, figure and commit
        assert len({p.commit for p in s.points}) == len(s.points), s


def test_a_row_of_another_suite_is_skipped_alone_the_rest_of_its_file_read(tmp_path, capsys):
    startup = [[1.5], [["'list'"]], "startup-1"]  # benchmarks/bench_startup.py's row, by command
    results, path = _results(tmp_path, "bench_startup.Startup.track_wall_s", startup)
    err, md = _report(tmp_path, results, capsys)
    assert f"warning: skipped {path}: field results.bench_startup.Startup.track_wall_s: " in err, err
    ring = next(s for s in load_history(results) if s.benchmark == P50 and "algo=ring" in s.case_id)
    assert [p.commit[:8] for p in ring.points] == ["11111111", "22222222", "33333333"]


def test_a_machines_results_in_two_directories_are_no_second_value(tmp_path, capsys):
    results = tmp_path / "asv"
    shutil.copytree(ASV, results)
    shutil.copytree(results / "ci-runner", results / "ci-runner-copy")  # its machine.json names ci-runner too
    skipped: list = []
    with pytest.raises(ValueError, match="no asv track_"):
        load_history(results, skipped)
    assert len(skipped) == 6
    assert all("the machine's results are in 2 directories" in s.message for s in skipped)
    first = next(s for s in skipped if s.path == results / "ci-runner" / SECOND)
    assert f"is also in {results / 'ci-runner-copy' / SECOND}" in first.message


def test_the_suite_names_each_familys_class_as_the_reader_does():
    # The suite cannot import harness.history (it runs against older trees): the one rule both
    # sides use is held here, for every family the registry has.
    for family in registry.FAMILIES.values():
        assert bench_families._make_suite(family, []).__name__ == suite_class(family.name), family.name
    for name in bench_families.TRACKED:
        assert getattr(bench_families, suite_class(name)).__name__ == suite_class(name)


@pytest.mark.parametrize("change, why", [
    ("p50_ns", "the suite tracks no 'p50_ns' (of the samples it tracks p50_us, p99_us)"),
    ("quotes", "is no case ID"),
])
def test_a_row_the_suite_never_writes_is_skipped_naming_it(tmp_path, capsys, change, why):
    """A sample statistic the suite does not track (track_p50_ns) was read as a series; a case ID
    inside any number of quotes was read as the case (asv keeps one pair, its repr's)."""
    row = json.loads((ASV / "ci-runner" / SECOND).read_text())["results"][P50]
    if change == "p50_ns":
        name = "bench_families.Allreduce.track_p50_ns"
    else:
        row[1][0] = ["'''" + case + "'''" for case in row[1][0]]
        name = "bench_families.Allreduce.track_p99_us"
    results, path = _results(tmp_path, name, row)
    err, md = _report(tmp_path, results, capsys)
    assert f"warning: skipped {path}" in err and why in err, err
    assert not any(s.benchmark == name for s in load_history(results))
