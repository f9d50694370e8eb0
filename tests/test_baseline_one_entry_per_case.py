"""A baseline table gives each case once: the gate's verdicts, gate.json, gate.md and the JUnit XML
are keyed by case (an A/B gate has one statistic), so a second entry of one case, under another
statistic or the same one in another unit, replaced the first's verdict (a regressed p90 hidden
behind an unchanged p50, "PASS") while Holm's adjustment counted both. Refused at load, naming
both lines, before the gate makes any worktree."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import harness.gate.cli as gate_cli
from harness.cli import main
from harness.gate.config import ConfigError, load_baselines
from harness.gate.outputs import EXIT_COULD_NOT_RUN

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
SPIN = "selftest/fault_rank=0,mode=spin,spin_iters=1000,world=1"


def _table(tmp_path: Path, *entries: tuple[str, str, float]) -> Path:
    path = tmp_path / "T.yaml"
    path.write_text("baselines:\n" + "".join(f'  - case_id: "{case}"\n    statistic: {statistic}\n    value: {value}\n'
                                            for case, statistic, value in entries))
    return path


@pytest.mark.parametrize("first, second, said", [
    (("p90_ns", 0.1), ("p50_ns", 100000),
     "one statistic per case in a table (line 2 gives p90_ns, line 5 p50_ns); gate them in two tables"),
    (("p50_ns", 30000), ("p50_us", 60), "one statistic in two units (line 2 gives p50_ns, line 5 p50_us)"),
])
def test_a_second_entry_of_one_case_is_refused_naming_both_lines(tmp_path, first, second, said):
    table = _table(tmp_path, (NOOP, *first), (NOOP, *second))
    with pytest.raises(ConfigError) as refused:
        load_baselines(table)
    message = str(refused.value)
    assert message.startswith(f"{table}:5: field baselines[1]: {NOOP}: ") and said in message, message


def test_each_case_once_still_loads(tmp_path):
    table = _table(tmp_path, (NOOP, "p90_ns", 1000), (SPIN, "p50_us", 30))
    assert [(b.case_id, b.statistic) for b in load_baselines(table)] == [(NOOP, "p90_ns"), (SPIN, "p50_us")]


def test_the_gate_refuses_such_a_table_before_any_worktree(tmp_path, capsys, monkeypatch):
    def measured(request):
        raise AssertionError("the gate was started")
    monkeypatch.setattr(gate_cli, "gate", measured)
    table = _table(tmp_path, (NOOP, "p90_ns", 0.1), (NOOP, "p50_ns", 100000))
    out = tmp_path / "G"
    assert main(["gate", "--repo", str(tmp_path), "--against", str(table), "--out", str(out)]) == EXIT_COULD_NOT_RUN
    err = capsys.readouterr().err
    assert f"{table}:5: field baselines[1]: " in err and "line 2 gives p90_ns, line 5 p50_ns" in err, err
    written = json.loads((out / "gate.json").read_text())  # the refusal's record, no case measured
    assert written["exit_code"] == EXIT_COULD_NOT_RUN and written["cases"] == [] and "p90_ns" in written["error"]
