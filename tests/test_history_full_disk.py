"""``critpath history`` after a full disk, with the real asv over a real commit of a copy of this
project: asv writes a results file in place, so a write that found the disk full leaves it empty
or cut short, and asv refuses to file that commit over it ever after."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.history.campaign import recorded_cases
from test_asv_history import _copy_project, _git

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
MACHINE = "ci-box"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of this project as a repository of one commit, and a HOME of the test's own."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    _copy_project(repo)
    return repo, _git(repo, "rev-parse", "HEAD")


def _history(repo: Path, tmp_path: Path, *extra: str) -> int:
    return main(["history", "HEAD", "--repo", str(repo), "--case", NOOP, "--out", str(tmp_path / "h"),
                 "--results", str(tmp_path / "res"), f"--machine={MACHINE}", *extra])


@pytest.mark.timeout(300)
def test_a_results_file_a_full_disk_cut_short_is_set_aside_and_the_commit_filed_again(tmp_path, capsys, project):
    """asv's result.save hit ENOSPC and left a 0-byte results file: every later history of the
    commit, --rerun too, failed with `asv run exited 1 and filed 0 of 1 cases` (asv: `Error parsing
    JSON in file`) until the file was deleted by hand."""
    repo, sha = project
    assert _history(repo, tmp_path) == 0
    filed = list((tmp_path / "res" / MACHINE).glob(f"{sha[:8]}-*.json"))
    assert len(filed) == 1
    path = filed[0]
    whole = path.read_bytes()
    capsys.readouterr()

    for n, (left, extra) in enumerate([(b"", ()), (whole[:40], ("--rerun",))], 1):
        path.write_bytes(left)  # what the write that found the disk full left
        assert _history(repo, tmp_path, *extra) == 0, capsys.readouterr().out[-2000:]
        out = capsys.readouterr().out
        aside = path.with_name(f"{path.name}.unreadable-{n}")
        assert f"  {path}:1: not valid JSON" in out and f"kept as {aside} and the commit filed anew" in out, out
        assert aside.read_bytes() == left  # renamed, never deleted
        assert recorded_cases(tmp_path / "res", MACHINE, sha) == {NOOP}
        assert "1 filed, 0 skipped, 0 could not be recorded" in out


@pytest.mark.timeout(300)
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, where every write finds the disk full")
def test_a_full_disk_in_asvs_output_is_said_as_a_full_disk(tmp_path, capsys, project):
    """A full disk while asv filed was said only as `asv run exited 1 and filed 0 of 1 cases`; the
    words for it were in asv's log alone."""
    repo, sha = project
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "benchmarks.json").symlink_to("/dev/full")  # asv rewrites it first: ENOSPC
    assert _history(repo, tmp_path) == 1
    out = capsys.readouterr().out
    assert f"[1/1] {sha[:10]} start: failed in " in out, out
    assert ("; disk full: asv could not write its results (No space left on device); free space and run the same "
            "command again; asv run exited 1 and filed 0 of 1 cases; "
            f"see {tmp_path / 'h' / 'logs' / f'{sha}.log'}\n") in out, out
