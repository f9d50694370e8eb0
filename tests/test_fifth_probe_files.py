"""The fifth probe of critpath's bounds: a launcher environment half set, integers written as
floats in the files critpath reads, the gate worker's protocol numbers and a baseline value too
small to divide by. Each refusal names the file, line and field (or variable) and exits 2."""
from __future__ import annotations

import json

import pytest

from harness.accept.profile import ProfileError, load_profile
from harness.diagnose import rules
from test_diagnose import GOOD_RULE

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
ALLREDUCE = "allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=1024,world=2"

PROFILE = f"""schema: critpath.accept/1
name: t
world: 2
nodes: 1
run:
  iters: 10
  warmup: 1
  timeout_s: 60
  cases:
    - {ALLREDUCE}
checks:
  - name: ring
    family: allreduce
    select: {{size_bytes: 1024, algo: [ring]}}
    statistic: p50_us
    max: 1000000
    source: a test
"""


# -- 2, 3: an integer field refuses a float and a bool; a number field refuses NaN ----------------

@pytest.mark.parametrize("old, new, line, field, why", [
    ("world: 2", "world: 2.0", 3, "world", "expected an integer, got 2.0"),
    ("nodes: 1", "nodes: 1.0", 4, "nodes", "expected an integer, got 1.0"),
    ("iters: 10", "iters: 5.0", 6, "run.iters", "expected an integer, got 5.0"),
    ("warmup: 1", "warmup: 1.0", 7, "run.warmup", "expected an integer, got 1.0"),
    ("timeout_s: 60", "timeout_s: .nan", 8, "run.timeout_s", "nan is not a finite number"),
    ("size_bytes: 1024,", "size_bytes: 1024.0,", 14, "checks.0.select.size_bytes",
     "1024.0 is not int: allreduce.size_bytes is declared int"),
    ("algo: [ring]", "algo: [ring, 2.0]", 14, "checks.0.select.algo.1", "2.0 is not str"),
    ("size_bytes: 1024,", "world: true,", 14, "checks.0.select.world", "True"),
])
def test_a_profile_number_of_the_wrong_kind_is_refused_at_load(tmp_path, old, new, line, field, why):
    assert old in PROFILE
    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE.replace(old, new, 1))
    with pytest.raises(ProfileError) as refused:
        load_profile(path)
    assert str(refused.value).startswith(f"{path}:{line}: field {field}: ") and why in str(refused.value)
    path.write_text(PROFILE)
    assert load_profile(path)["world"] == 2  # the profile as written loads


# the rule file test_diagnose holds as good, with counts of its own
RULES = GOOD_RULE + "    min_fleet: 2\n    min_cases: 1\n"


@pytest.mark.parametrize("old, new, line, field", [("min_fleet: 2", "min_fleet: 2.0", 9, "rules.busbw_low.min_fleet"),
                                                   ("min_cases: 1", "min_cases: 1.0", 10, "rules.busbw_low.min_cases"),
                                                   ("min_cases: 1", "min_cases: true", 10, "rules.busbw_low.min_cases")])
def test_a_rule_count_written_as_a_float_is_refused(tmp_path, old, new, line, field):
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    assert rules.load(path)  # as written, it loads
    path.write_text(RULES.replace(old, new))
    with pytest.raises(rules.RuleFileError) as refused:
        rules.load(path)
    assert str(refused.value).startswith(f"{path}:{line}: field {field}: "), str(refused.value)
    assert "expected an integer, got" in str(refused.value)


@pytest.mark.parametrize("old, new, line, field, why", [
    ("min_fleet: 2", "min_fleet: 9223372036854775807", 9, "rules.busbw_low.min_fleet", "MAX_WORLD = 65536"),
    ("min_fleet: 2", "min_fleet: 65537", 9, "rules.busbw_low.min_fleet", "MAX_WORLD = 65536"),
    ("min_cases: 1", "min_cases: 9223372036854775807", 10, "rules.busbw_low.min_cases", "MAX_RUN_CASES = 10000")])
def test_a_rule_count_no_fleet_reaches_is_refused(tmp_path, old, new, line, field, why):
    """A count above any fleet's is a rule never judged, so it is refused, not loaded idle."""
    path = tmp_path / "rules.yaml"
    path.write_text(RULES.replace(old, new))
    with pytest.raises(rules.RuleFileError) as refused:
        rules.load(path)
    message = str(refused.value)
    assert message.startswith(f"{path}:{line}: field {field}: ") and why in message, message
    assert "never be judged" in message
    path.write_text(RULES.replace(old, old.replace(" 2", " 65536").replace(" 1", " 10000")))
    assert rules.load(path)  # at the bound, it loads


def _power_doc(**trial) -> dict:
    cell = {"name": "c", "case_ids": [NOOP], "condition": "A/A", "candidate": "a", "target": None}
    row = {"cell": "c", "trial": 0, "exit_code": 0, "wall_s": 1.0, "cases": {}, **trial}
    return {"base": "0" * 40, "settings": {"budget_s": 180, "min_effect": 0.05, "statistic": None, "rounds": None,
                                           "trials": 2, "tools": [], "tool_trials": 0},
            "cells": [cell], "trials": [row], "tool_trials": [], "aa": {}, "clone": "x", "branches": {}}


@pytest.mark.parametrize("edit, field, why", [
    (lambda d: d["settings"].update(trials=1.0), "settings.trials", "expected an integer, got 1.0"),
    (lambda d: d["trials"][0].update(trial=0.0), "trials[0].trial", "expected an integer, got 0.0"),
    (lambda d: d["trials"][0].update(exit_code=2.0), "trials[0].exit_code", "expected an integer, got 2.0"),
    (lambda d: d["trials"][0].update(trial=99999), "trials[0].trial", "beyond settings.trials"),
    (lambda d: d["trials"][0].update(trial=2), "trials[0].trial", "numbered 0 to 1"),
    (lambda d: d["settings"].update(budget_s=True), "settings.budget_s", "expected a number, got True"),
])
def test_a_gate_power_measurement_with_a_float_count_or_a_trial_beyond_its_count_is_refused(
        tmp_path, edit, field, why):
    from harness.gatepower.power import _load

    path = tmp_path / "power.json"
    doc = _power_doc()
    path.write_text(json.dumps(doc))
    assert _load(path, resume=True) == doc
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError) as refused:
        _load(path, resume=True)
    assert f"{path}: not a readable gate-power measurement: field {field}: " in str(refused.value)
    assert why in str(refused.value), str(refused.value)


def test_every_file_reader_validates_with_the_one_strict_validator():
    """The five schemas' validators: 5.0 is no integer, True no number, NaN no number."""
    from harness.accept import profile
    from harness.claims import baselines
    from harness.core import records
    from harness.gatepower import power

    for validator in (power._POWER_VALIDATOR, profile._VALIDATOR, baselines._VALIDATOR, records._VALIDATOR,
                      rules._VALIDATOR):
        assert not validator.is_type(5.0, "integer") and not validator.is_type(True, "integer")
        assert not validator.is_type(True, "number") and not validator.is_type(float("nan"), "number")
        assert validator.is_type(5, "integer") and validator.is_type(0.5, "number")


# -- 1: a launcher environment half set --------------------------------------------------------------

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT")


@pytest.mark.parametrize("env, missing", [({"RANK": "1"}, "RANK is set but WORLD_SIZE is not"),
                                          ({"WORLD_SIZE": "2"}, "WORLD_SIZE is set but RANK is not")])
def test_half_a_torchrun_environment_is_no_local_run(env, missing):
    from harness.core.options import UsageError
    from harness.run.joined import joined_rank, position

    for decide in (position, joined_rank):
        with pytest.raises(UsageError, match=f"^{missing}: set both"):
            decide(env)
    assert position({}) is None
    assert position({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}).rank == 1
    assert position({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}).rank == 1


IMPOSSIBLE = f"""schema: critpath.accept/1
name: impossible
world: 1
run:
  iters: 5
  warmup: 1
  cases:
    - {NOOP}
checks:
  - name: noop
    case: "{NOOP}"
    statistic: p50_us
    max: 0.000001
    source: a test
"""


@pytest.mark.parametrize("env", [{"RANK": "1"}, {"WORLD_SIZE": "1"}])
def test_a_failing_acceptance_under_half_a_launcher_environment_exits_2_not_0(tmp_path, monkeypatch, capsys, env):
    from harness.cli import main

    profile = tmp_path / "profile.yaml"
    profile.write_text(IMPOSSIBLE)
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(["accept", "--profile", str(profile), "--out", str(tmp_path / "out"), "--no-report"])
    assert code == 2 and "is set but" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything ran


# -- 7: the gate worker's protocol numbers ------------------------------------------------------------

@pytest.mark.parametrize("edit, why", [
    ({"cases": [{"id": NOOP, "iters": 1_000_000_000_000}]}, "field cases[0].iters: 1000000000000 is outside the range"),
    ({"round": 2.9}, "field round: expected an integer, got 2.9"),
    ({"round": "٣"}, "field round: expected an integer"),
    ({"round": True}, "field round: expected an integer, got True"),
    ({"round": -1}, "field round: -1 is outside the range"),
    ({"warmup": -5}, "field warmup: -5 is outside the range"),
    ({"warmup": "abc"}, "field warmup: expected an integer"),
    ({"target_s": float("nan")}, "field target_s: nan is not a finite number"),
    ({"target_s": 0}, "field target_s: 0 is no window"),
])
def test_a_worker_round_with_a_number_out_of_its_grammar_or_range_is_a_protocol_error(edit, why):
    from harness.run.rounds import MAX_ITERS, ProtocolError, _parse_round

    good = {"round": 3, "cases": [{"id": NOOP, "iters": MAX_ITERS}], "warmup": 0, "target_s": 0.3}
    number, cases, warmup, target_s = _parse_round(good)
    assert (number, cases[0][1], warmup, target_s) == (3, MAX_ITERS, 0, 0.3)
    with pytest.raises(ProtocolError) as refused:
        _parse_round({**good, **edit})
    assert str(refused.value).startswith(why), str(refused.value)


def test_the_worker_exits_2_on_a_bad_round_and_makes_no_round_directory(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    request = json.dumps({"cmd": "round", "round": -1, "cases": [{"id": NOOP}]})
    done = subprocess.run([sys.executable, "-m", "harness", "worker", "--out", str(tmp_path / "w")], cwd=ROOT,
                          input=request + "\n", capture_output=True, text=True, timeout=120)
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 2 and replies[-1]["event"] == "error", done.stdout + done.stderr
    assert replies[-1]["message"].startswith("field round: -1 is outside the range")
    assert not list((tmp_path / "w").glob("round-*"))


# -- 15: a gate baseline value too small to divide by -------------------------------------------------

@pytest.mark.parametrize("value", ["1e-320", "1e-200", "1e200"])
def test_a_gate_baseline_value_outside_its_declared_range_is_refused(tmp_path, value):
    from harness.gate.config import BASELINE_VALUE_RANGE, ConfigError, load_baselines

    path = tmp_path / "table.yaml"
    table = f"baselines:\n  - case_id: '{NOOP}'\n    statistic: p50_ns\n    value: {{}}\n"
    for edge in BASELINE_VALUE_RANGE:
        path.write_text(table.format(edge))
        assert load_baselines(path)[0].value == edge
    path.write_text(table.format(value))
    with pytest.raises(ConfigError) as refused:
        load_baselines(path)
    if value == "1e-320":  # a subnormal: refused by the YAML reader itself, as every file's float that underflows
        assert str(refused.value).startswith(f"{path}:4: '1e-320' is too small to hold (underflows)")
    else:
        assert str(refused.value).startswith(f"{path}:4: field baselines.0.value: ") and "outside the range" in str(refused.value)
