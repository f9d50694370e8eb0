"""One run given twice to a command that pools or lists runs is refused, naming both: counted
twice it would weigh one process's evidence twice (a calibration fit, an export, a report, a
diagnosis). Given twice means the same directory under another spelling (a link, ``/.``, its
results.jsonl) or a copy of it in another directory (the same run ID)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import run_cli
from test_model_calibrate import _write_run

pytestmark = pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """One real run of critpath's own cheapest case."""
    run = tmp_path_factory.mktemp("given-twice") / "run"
    done = run_cli("run", "--case", NOOP, "--out", str(run))
    assert done.returncode == 0, done.stderr
    return run


def _spellings(run):
    """The same run directory named as a link to it, as ``run/.`` and as its results file."""
    link = run.parent / f"{run.name}-link"
    if not link.exists():
        link.symlink_to(run, target_is_directory=True)
    return [link, run / ".", run / "results.jsonl"]


def _copy(run):
    copy = run.parent / f"{run.name}-copy"
    if not copy.exists():
        shutil.copytree(run, copy)
    return copy


@pytest.mark.parametrize("command", [
    ["export", "--format", "csv", "--out", "{out}/t.csv"],
    ["report", "--out", "{out}/rep"],
    ["show"],
    ["diagnose"],
])
def test_a_run_given_twice_or_as_its_copy_is_refused_naming_both(real_run, tmp_path, command):
    args = [a.format(out=tmp_path) for a in command]
    for other in [*_spellings(real_run), _copy(real_run)]:
        done = run_cli(*args, str(real_run), str(other))
        assert done.returncode == 2, (other, done.stdout, done.stderr)
        said = done.stderr.replace("\n", " ")
        assert str(other) in said and "counts once" in said, said
    assert not (tmp_path / "t.csv").exists() and not (tmp_path / "rep").exists()


def test_one_run_beside_another_is_still_listed(real_run, tmp_path):
    second = tmp_path / "second"
    assert run_cli("run", "--case", NOOP, "--out", str(second)).returncode == 0
    done = run_cli("export", "--format", "csv", "--out", str(tmp_path / "t.csv"), str(real_run), str(second))
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "t.csv").read_text().splitlines()) == 3  # a header and one row a run


def test_model_calibrate_given_one_run_twice_is_refused_naming_both(tmp_path):
    run = _write_run(tmp_path / "run", np.random.default_rng(3))
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    for other in (run / ".", run / "results.jsonl", copy):
        done = run_cli("model", "--ranks", "2,4", "--sizes", "8:1M:x4", "--no-plots", "--out", str(tmp_path / "m"),
                       "--calibrate", str(run), "--calibrate", str(other))
        assert done.returncode == 2, done.stderr
        assert str(other) in done.stderr and "counts once" in done.stderr, done.stderr
    assert not (tmp_path / "m").exists()
