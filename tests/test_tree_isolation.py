"""Refs are checked as refs: no user text reaches git where git reads an option."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import git as _git

from harness.cli import main
from harness.gate.trees import TreeError, resolve


@pytest.fixture
def tiny_repo(tmp_path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "tiny"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "README").write_text("x\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    return repo


# -- refs are refs ------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["--output={out}", "--output={out}..HEAD", "HEAD..--output={out}"])
def test_a_history_range_that_is_an_option_is_refused_and_git_writes_nothing(tiny_repo, tmp_path, capsys, spec):
    written = tmp_path / "written-by-git"
    spec = spec.format(out=written)
    code = main(["history", "--repo", str(tiny_repo), "--out", str(tmp_path / "h"), "--", spec])
    err = capsys.readouterr().err
    assert code == 2
    assert not written.exists()  # git log --output=FILE wrote here before
    assert "is not a ref" in err and "--output=" in err


def test_an_unknown_ref_in_a_history_range_is_one_line_naming_it(tiny_repo, tmp_path, capsys):
    code = main(["history", "--repo", str(tiny_repo), "--out", str(tmp_path / "h"), "nosuch..HEAD"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0, err  # git's advice ("Use '--' to separate paths") was printed under it
    assert "'nosuch' does not name a commit" in err


@pytest.mark.parametrize("ref", ["--output=FILE", "-q", "", "HEAD --output=FILE"])
def test_a_ref_that_git_could_read_as_an_option_names_no_commit(tiny_repo, ref):
    with pytest.raises(TreeError, match="not a ref|does not name a commit"):
        resolve(tiny_repo, ref.replace("FILE", str(tiny_repo / "written")))
    assert not (tiny_repo / "written").exists()
    assert len(resolve(tiny_repo, "HEAD")) == 40
