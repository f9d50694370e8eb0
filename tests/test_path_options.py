"""An empty path option or argument is refused, never read as the current directory:
``Path('')`` is ``.``, so ``--out "$UNSET"`` wrote a report over the user's own report.md."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness.cli import build_parser, main
from harness.core.options import path_option

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


def _actions():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, p in sub.choices.items():
        for action in p._actions:
            yield command, action


def test_no_option_of_any_command_takes_a_bare_path():
    bare = [f"{command} {action.dest}" for command, action in _actions() if action.type is Path]
    assert bare == []
    assert any(action.type is path_option for _, action in _actions())


@pytest.mark.parametrize("argv", [
    ["report", "--out", "", "RUN"],
    ["run", "--case", NOOP, "--iters", "5", "--out", ""],
    ["model", "--out", "", "--ranks", "8,16", "--sizes", "8,1K", "--no-plots"],
    ["show", ""],
    ["export", "RUN", "--format", "csv", "--out", ""],
    ["diagnose", "RUN", "--json", ""],
    ["gate", "--base", "HEAD", "--case", NOOP, "--out", ""],
])
def test_an_empty_path_is_refused_naming_it_and_nothing_is_written(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "report.md").write_text("my notes\n")
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "expected a path, got ''" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]
    assert (tmp_path / "report.md").read_text() == "my notes\n"
