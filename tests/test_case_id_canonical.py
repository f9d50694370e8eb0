"""One case, one ID: a key at its default, a key that means nothing for the case, an empty or
spaced value, a grid at any world, the slowdowns named in the environment, and ``-0``."""
from __future__ import annotations

import pytest

from harness.core import registry
from harness.core.case import CaseIdError

SELFTEST = "selftest/fault_rank=0,mode=noop,world=1"


def test_a_key_at_its_default_names_the_same_case():
    assert registry.parse("selftest/fault_rank=0,mode=noop,spin_iters=0,world=1").id == SELFTEST
    assert registry.parse("selftest/world=1,mode=noop,fault_rank=0").id == SELFTEST


def test_a_key_that_means_nothing_for_the_case_is_refused_naming_it_and_what_it_needs():
    with pytest.raises(CaseIdError, match=r"key 'spin_iters' is a setting of mode=spin only; this case has mode=noop"):
        registry.parse("selftest/fault_rank=0,mode=noop,spin_iters=5,world=1")
    assert registry.parse("selftest/fault_rank=0,mode=spin,spin_iters=5,world=1").params["spin_iters"] == 5


def test_a_written_key_is_filled_in_so_the_shipped_grid_ids_stay_as_printed():
    from harness.core.family import GridOptions

    first = registry.get("moe_a2a").grid(GridOptions())[0].id
    assert ",mitigation=none," in first
    assert registry.parse(first.replace("mitigation=none,", "")).id == first
    assert registry.parse(first).id == first


def test_the_gate_config_maps_the_other_spelling_of_a_case_onto_its_grid_id(tmp_path):
    from harness.core.family import GridOptions
    from harness.gate.config import _canonical

    first = registry.get("moe_a2a").grid(GridOptions())[0].id
    assert _canonical(first.replace("mitigation=none,", "")) == first


@pytest.mark.parametrize("case_id, key", [
    ("rpc/codec=json,mode=pingpong,payload_bytes=64,preset=tool_call,transport=tcp_nodelay", "payload_bytes"),
    ("rpc/codec=raw,inflight=4,mode=pingpong,payload_bytes=64,transport=tcp_nodelay", "inflight"),
    ("rpc/codec=raw,mode=pingpong,payload_bytes=64,rate_hz=100,transport=tcp_nodelay", "rate_hz"),
    ("rpc/batch=4,codec=raw,mode=pingpong,payload_bytes=64,transport=tcp_nodelay", "batch"),
    ("rpc/codec=raw,mode=openloop,payload_bytes=64,rate_hz=100,transport=tcp_nodelay,window_us=10", "window_us"),
    ("p2p_tiers/at_once=pair,backend=gloo,size_bytes=64,tier=intra,world=2", "at_once"),
])
def test_keys_documented_for_some_cases_only_are_refused_elsewhere(case_id, key):
    with pytest.raises(CaseIdError, match=f"'{key}' is a setting of"):
        registry.parse(case_id)


def test_a_moe_capacity_key_outside_capacity_is_refused():
    from harness.core.family import GridOptions

    first = registry.get("moe_a2a").grid(GridOptions())[0].id
    with pytest.raises(CaseIdError, match="'capacity_factor' is a setting of mitigation=capacity only"):
        registry.parse(first.replace("compute=", "capacity_factor=1.5,compute="))


PIPELINE = ("pipeline/act_bytes=65536,backend=gloo,compute=sleep,compute_us=500,microbatches=8,rtt_us=0,"
            "scenario={},schedule=gpipe,world=4")


@pytest.mark.parametrize("value, why", [("", "an empty value"), ("a b", "contains a space")])
def test_an_empty_or_spaced_value_is_refused_naming_the_case_and_key(value, why):
    with pytest.raises(CaseIdError, match=f"case ID .*: key 'scenario': .*{why}"):
        registry.parse(PIPELINE.format(value))


def test_a_family_case_with_an_empty_value_is_a_case_id_error_naming_the_key():
    with pytest.raises(CaseIdError, match="key 'scenario': an empty value"):
        registry.get("pipeline").case(act_bytes=65536, backend="gloo", compute="sleep", compute_us=500,
                                      microbatches=8, rtt_us=0, scenario="", schedule="gpipe", world=4)


def test_an_integer_negative_zero_is_refused_wherever_the_integer_grammar_reads():
    import argparse

    from harness.core.numbers import NumberError, parse_int
    from harness.core.options import integer
    from harness.gatepower.inject import SlowdownTextError, slowdowns_from_text
    from harness.run.launchenv import env_int

    with pytest.raises(NumberError, match="negative zero"):
        parse_int("-0", "x")
    assert parse_int("0", "x") == 0 and parse_int("-1", "x") == -1
    with pytest.raises(CaseIdError, match="key 'fault_rank': '-0' is a negative zero"):
        registry.parse("selftest/fault_rank=-0,mode=noop,world=1")
    with pytest.raises((argparse.ArgumentTypeError, ValueError), match="negative zero"):
        integer("-0")
    with pytest.raises(ValueError, match="WORLD_SIZE='-0'"):
        env_int({"WORLD_SIZE": "-0"}, "WORLD_SIZE", 0, 10)
    with pytest.raises(SlowdownTextError, match="negative zero"):
        slowdowns_from_text('{"selftest/fault_rank=0,mode=noop,world=1": [-0, 1]}')


# Every world a family's grid must answer for: each up to 64, each power of two and its neighbours
# up to the documented 1024 (the slow tier walks every one).
WORLDS = sorted({*range(1, 65), *(n + d for n in (2 ** k for k in range(6, 11)) for d in (-1, 0, 1)), 1000} - {1025})


def _grids(worlds):
    from harness.core.family import GridOptions

    for name in registry.FAMILIES:
        family = registry.get(name)
        for profile in ("quick", "full"):
            for backend in ("gloo", "nccl"):
                for world in worlds:
                    yield name, world, family.grid(GridOptions(profile, world, backend))


def test_every_grid_answers_at_every_world_it_may_be_asked_for():
    assert max(WORLDS) == 1024
    assert sum(1 for _ in _grids(WORLDS)) == len(registry.FAMILIES) * 4 * len(WORLDS)


@pytest.mark.slow
def test_every_grid_answers_at_every_world_from_1_to_1024():
    assert sum(1 for _ in _grids(range(1, 1025))) == len(registry.FAMILIES) * 4 * 1024


def test_a_grid_leaves_out_what_it_cannot_hold_saying_so_in_one_line(capsys):
    from harness.core.family import GridOptions

    cases = registry.get("moe_a2a").grid(GridOptions(world=512))
    err = capsys.readouterr().err
    assert len(cases) < len(registry.get("moe_a2a").grid(GridOptions(world=4)))
    assert err.count("\n") == 1 and "moe_a2a:" in err and "world=512" in err and "MAX_PLACEMENT_VALUES" in err


def test_list_at_the_largest_world_is_no_traceback():
    from conftest import run_cli

    result = run_cli("list", "--world", "1024")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "left out at world=1024" in result.stderr


def _slowed_step_ns(key: str, case_id: str) -> int:
    import importlib
    import time

    from harness.core.family import RankContext
    from harness.gatepower.inject import INJECT_ENV, from_environment

    family = from_environment(importlib.import_module("harness.families.selftest").FAMILY,
                              {INJECT_ENV: f'{{"{key}": [20000000, 1]}}'})
    state = family.setup(RankContext(0, 1, 0, "gloo", None), registry.parse(case_id))
    start = time.perf_counter_ns()
    family.step(state)
    return time.perf_counter_ns() - start


def test_a_slowdown_key_is_read_as_a_case_id_in_any_spelling(capsys):
    assert _slowed_step_ns("selftest/world=1,mode=noop,fault_rank=0,spin_iters=0", SELFTEST) >= 20_000_000
    assert "slows 1 selftest case(s)" in capsys.readouterr().err


@pytest.mark.parametrize("key, why", [("selftest/bogus=1", "names no case"), ("nofamily/x=1", "names no family")])
def test_a_slowdown_key_that_names_no_case_is_refused_naming_the_variable_and_key(key, why):
    from harness.gatepower.inject import SlowdownTextError

    with pytest.raises(SlowdownTextError, match=f"CRITPATH_INJECT_SLOWDOWN: key '{key}' {why}"):
        _slowed_step_ns(key, SELFTEST)


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_a_slowdown_key_that_names_no_case_exits_2_from_the_cli(tmp_path):
    from conftest import run_cli

    result = run_cli("run", "--case", SELFTEST, "--out", str(tmp_path / "r"),
                     env={"CRITPATH_INJECT_SLOWDOWN": '{"selftest/bogus=1": [1000, 1]}'})
    assert result.returncode == 2 and "key 'selftest/bogus=1' names no case" in result.stderr
    assert "Traceback" not in result.stderr


def _moe_first() -> str:
    from harness.core.family import GridOptions

    return registry.get("moe_a2a").grid(GridOptions())[0].id


def test_a_gate_config_entry_for_a_case_in_its_other_spelling_applies_to_the_case(tmp_path):
    from harness.gate.config import load_config

    path = tmp_path / "gate.yaml"
    path.write_text(f"min_effect:\n  cases:\n    {_moe_first().replace('mitigation=none,', '')}: 0.25\n")
    assert load_config(path).min_effect(_moe_first()) == 0.25


def test_a_baseline_table_listing_one_case_in_two_spellings_is_refused(tmp_path):
    from harness.gate.config import ConfigError, load_baselines

    path = tmp_path / "baselines.yaml"
    path.write_text("baselines:\n"
                    f"  - {{case_id: '{SELFTEST}', value: 100}}\n"
                    "  - {case_id: 'selftest/fault_rank=0,mode=noop,spin_iters=0,world=1', value: 100}\n")
    with pytest.raises(ConfigError, match="listed twice"):
        load_baselines(path)


def test_a_run_names_one_case_once_however_it_is_spelt():
    from harness.core.family import GridOptions
    from harness.run.plan import RunOptions, select_cases

    spellings = (SELFTEST, "selftest/fault_rank=0,mode=noop,spin_iters=0,world=1", "selftest/world=1,mode=noop,fault_rank=0")
    assert [c.id for c in select_cases(RunOptions(case_ids=spellings), GridOptions())] == [SELFTEST]


OLD_SPELLING = "selftest/fault_rank=0,mode=noop,spin_iters=0,world=1"  # its default spelt out


@pytest.fixture(scope="module")
def _one_real_run(tmp_path_factory):
    from conftest import run_cli

    out = tmp_path_factory.mktemp("real") / "r"
    assert run_cli("run", "--case", SELFTEST, "--out", str(out)).returncode == 0
    return out


@pytest.fixture
def old_spelt_run(_one_real_run, tmp_path):
    """A real run whose record names its case as a run before this release wrote it."""
    import json
    import shutil

    out = shutil.copytree(_one_real_run, tmp_path / "r")
    results = out / "results.jsonl"
    record = json.loads(results.read_text())
    record["case_id"], record["params"]["spin_iters"] = OLD_SPELLING, 0
    results.write_text(json.dumps(record) + "\n")
    return out


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_a_record_made_before_one_spelling_held_still_loads(old_spelt_run):
    from harness.core.store import load_records

    (loaded,) = load_records(old_spelt_run)
    assert loaded.case_id == OLD_SPELLING
    assert registry.parse(loaded.case_id).id == SELFTEST


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_a_gate_round_finds_a_record_a_tree_spelt_its_own_way(old_spelt_run):
    from harness.gate.sides import _read_records

    asked = "selftest/world=1,mode=noop,fault_rank=0"
    records, error = _read_records(old_spelt_run, [asked])
    assert error == "" and list(records) == [asked]
