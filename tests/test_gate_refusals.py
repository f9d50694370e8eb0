"""What `critpath gate` and `critpath compare` refuse before they measure: an option of the other
mode, a --markdown that could not be written, a run on both sides; and how gate.md names its
sides and the statistic a compare of single runs compared. In process, on synthetic runs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import RUN_FINGERPRINT, derived_record

import harness.gate.cli as gate_cli
from harness.cli import main
from harness.core.store import RunDir
from harness.gate.outputs import EXIT_COULD_NOT_RUN
from harness.gate import request

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


def _run(root: Path, run_id: str, seed: int = 0) -> Path:
    samples = np.random.default_rng(seed).normal(1000.0, 10.0, 200).clip(1)
    run = RunDir(root, run_id)
    run.append(derived_record(NOOP, samples, run_id=run_id, plan={"warmup": 1, "iters": len(samples)}))
    run.write_fingerprint(RUN_FINGERPRINT)
    run.write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": 1})
    return root


@pytest.fixture
def no_measuring(monkeypatch):
    """A gate that gets as far as measuring fails the test: what is refused, is refused before."""
    def measured(request):
        raise AssertionError("the gate was started")
    monkeypatch.setattr(gate_cli, "gate", measured)


@pytest.fixture
def table(tmp_path) -> Path:
    path = tmp_path / "T.yaml"
    path.write_text(f'baselines:\n  - case_id: "{NOOP}"\n    statistic: p50_ns\n    value: 110\n')
    return path


# -- 1: an option of the other mode is refused, naming it, even at its default value ------------

AGAINST_IGNORED = ["--full", "--max-pairs", "1", "--window", "0.01", "--rounds", "4", "--allow-inconclusive"]


@pytest.mark.parametrize("extra, named", [
    (AGAINST_IGNORED, "--full, --rounds, --window, --max-pairs, --allow-inconclusive do not apply with --against"),
    (["--rounds", "1"], "--rounds does not apply with --against FILE"),  # the default value, given
    (["--case", NOOP], "--case does not apply with --against FILE: the cases are the table's entries"),
])
def test_an_a_b_option_given_with_a_table_is_refused_naming_it(tmp_path, capsys, table, extra, named):
    out = tmp_path / "G"
    code = main(["gate", "--repo", str(tmp_path), "--against", str(table), *extra, "--repeats", "2",
                 "--budget", "30", "--out", str(out)])
    assert code == EXIT_COULD_NOT_RUN
    assert named in capsys.readouterr().err
    assert named in json.loads((out / "gate.json").read_text())["error"]


@pytest.mark.parametrize("repeats", ["2", "10"])  # 10: the default, given
def test_repeats_given_to_an_a_b_gate_is_refused_naming_it(tmp_path, capsys, repeats):
    code = main(["gate", "--repo", str(tmp_path), "--base", "HEAD", "--case", NOOP, "--repeats", repeats,
                 "--out", str(tmp_path / "G")])
    assert code == EXIT_COULD_NOT_RUN
    assert "--repeats does not apply to an A/B gate (--base REF)" in capsys.readouterr().err


def test_full_without_families_is_refused(tmp_path, capsys):
    code = main(["gate", "--repo", str(tmp_path), "--base", "HEAD", "--case", NOOP, "--full",
                 "--out", str(tmp_path / "G")])
    assert code == EXIT_COULD_NOT_RUN
    assert "--full selects the full grid of --families" in capsys.readouterr().err


def test_every_option_of_one_mode_is_an_option_of_the_gate(capsys):
    with pytest.raises(SystemExit):
        main(["gate", "--help"])
    usage = capsys.readouterr().out
    assert [option for option in request.MODE_ONLY if option not in usage] == []
