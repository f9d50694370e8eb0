"""Numbers critpath reads from text (case IDs, options, size sweeps, launcher variables) go through
the one grammar of harness.core.numbers, each within the one declaration of its range."""
from __future__ import annotations

import re

import pytest

from harness.cli import main
from harness.core import registry
from harness.core.case import CaseIdError

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
ALLREDUCE = "allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes={},world=1"


# -- case IDs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, why", [("٣", "expected an integer"), ("1_000", "expected an integer"),
                                       ("+8", "expected an integer"), ("08", "has a leading zero"),
                                       ("9" * 30, "outside the range it may take")])
def test_a_case_id_number_in_another_spelling_names_no_case(text, why):
    with pytest.raises(CaseIdError, match=rf"^case ID '.*': key 'size_bytes': .*{why}"):
        registry.parse(ALLREDUCE.format(text))


def test_a_case_id_float_is_finite_and_ascii():
    case_id = ("kv_alloc/allocator=caching,block_tokens=16,budget_gb=1,model=7b,policy=per_block,requests=1,"
               "speedup={},trace=azure_conv")
    assert registry.parse(case_id.format("2.5")).params["speedup"] == 2.5
    for text in ("1e400", "nan", "٣.5", "1_0.5"):
        with pytest.raises(CaseIdError, match="key 'speedup': "):
            registry.parse(case_id.format(text))


def test_critpath_run_refuses_such_a_case_id_with_exit_2_naming_the_key(tmp_path, capsys):
    assert main(["run", "--case", ALLREDUCE.format("1_024"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "key 'size_bytes': expected an integer" in err and "'1_024'" in err
    assert not (tmp_path / "run").exists()


def _bytes_keys():
    """Every family's keys of bytes a case allocates, as (family, key)."""
    return [(family.name, param.name) for family in registry.FAMILIES.values() for param in family.params
            if param.name in ("size_bytes", "act_bytes", "expert_bytes")]


def test_a_case_id_asks_for_no_more_bytes_than_sizes_allows():
    from harness.core.sizes import MAX_RUN_SIZE_BYTES

    keys = _bytes_keys()
    assert {"allreduce", "sendrecv", "allreduce_tiers", "p2p_tiers", "pipeline", "moe_a2a"} <= {f for f, _ in keys}
    for family, key in keys:
        assert registry.get(family).declared[key].high == MAX_RUN_SIZE_BYTES, (family, key)
    assert registry.parse(ALLREDUCE.format(MAX_RUN_SIZE_BYTES)).params["size_bytes"] == MAX_RUN_SIZE_BYTES
    with pytest.raises(CaseIdError, match=rf"size_bytes={MAX_RUN_SIZE_BYTES + 4} is not allowed; size_bytes must be "
                                          rf"in \[1, {MAX_RUN_SIZE_BYTES}\]"):
        registry.parse(ALLREDUCE.format(MAX_RUN_SIZE_BYTES + 4))


def test_critpath_run_refuses_a_case_past_the_size_cap_before_it_allocates(tmp_path, capsys):
    assert main(["run", "--case", ALLREDUCE.format(17179869188), "--out", str(tmp_path / "run")]) == 2
    assert "size_bytes=17179869188 is not allowed" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# -- command-line options --------------------------------------------------------------------------

@pytest.mark.parametrize("option, text", [
    (["run", "--world"], "1_000"), (["run", "--world"], " 5"), (["run", "--iters"], "+5"), (["run", "--warmup"], "08"),
    (["run", "--timeout"], "1_0"), (["run", "--timeout"], " 5"), (["run", "--timeout"], "+5"),
    (["gate", "--alpha"], " 0.01"), (["moe-sim", "--bytes-per-elem"], " 2"), (["moe-sim", "--hot-factor"], "1_7"),
    (["gate-power", "--trials"], "+3"),
])
def test_a_number_option_takes_the_one_grammar(option, text, capsys):
    from harness.cli import _modules_for, build_parser

    argv = [*option, text]
    with pytest.raises(SystemExit) as exit_:  # parsed only: nothing runs, even where it was accepted
        build_parser(_modules_for(argv)).parse_args(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"argument {option[1]}: invalid" in err and repr(text) in err


def test_an_option_in_the_grammar_still_reads_as_before():
    from harness.core.options import at_least, integer, number_in, seconds

    assert at_least(1, 10)("10") == 10 and seconds("0.5") == 0.5 and seconds("1e3") == 1000.0
    assert number_in(-1.0, 1.0)("-0.25") == -0.25 and integer("4") == 4


# -- size sweeps -----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, message", [("8,8", "size 8 given twice (as 8 and 8)"),
                                           ("8,1K,1024", "size 1024 given twice (as 1K and 1024)"),
                                           ("1M, 1024K", "size 1048576 given twice (as 1M and 1024K)")])
def test_a_size_given_twice_is_refused_naming_both_spellings(spec, message, capsys):
    from harness.cli import _modules_for, build_parser

    argv = ["list", "--sizes", spec]
    with pytest.raises(SystemExit) as exit_:
        build_parser(_modules_for(argv)).parse_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_size_or_factor_with_a_leading_zero_is_refused():
    from harness.core.sizes import parse_sizes

    with pytest.raises(ValueError, match="size '08': '08' has a leading zero"):
        parse_sizes("08,16")
    with pytest.raises(ValueError, match="factor 'x02' must be x2 to x999999"):
        parse_sizes("8:64:x02")
    assert parse_sizes("8, 1K") == (8, 1024) and parse_sizes("8:64:x4") == (8, 32)


# -- critpath model --ranks -------------------------------------------------------------------------

@pytest.mark.parametrize("text, why", [("8,16,...,99999999999999999999999", "is outside the range it may take"),
                                       ("8,65537", "65537 is outside the range it may take (from 1 to 65536)"),
                                       ("٣", "expected an integer"), ("1_000", "expected an integer"),
                                       ("8,16,...," + "9" * 5000, "expected an integer")])
def test_model_ranks_are_held_to_the_largest_job(text, why, capsys):
    from harness.cli import _modules_for, build_parser

    argv = ["model", "--ranks", text]
    with pytest.raises(SystemExit) as exit_:
        build_parser(_modules_for(argv)).parse_args(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "argument --ranks: ranks " in err and why in err
    assert len(err.splitlines()[-1]) < 400  # the input is echoed cut short


def test_model_ranks_up_to_the_largest_job_are_modelled():
    from harness.core.scale import MAX_WORLD
    from harness.model.command import parse_ranks

    assert parse_ranks("8,16,32,...,16384")[-1] == 16384 and parse_ranks(f"1,{MAX_WORLD}") == (1, MAX_WORLD)


# -- a local run's world -----------------------------------------------------------------------------

def test_a_local_run_spawns_no_more_ranks_than_one_host_holds():
    from harness.core.options import UsageError
    from harness.core.scale import MAX_WORLD
    from harness.run.local import local_plan
    from harness.run.plan import MAX_LOCAL_WORLD, RunOptions

    assert MAX_LOCAL_WORLD < MAX_WORLD
    with pytest.raises(UsageError, match=rf"^--world {MAX_WORLD}: a local run spawns at most MAX_LOCAL_WORLD = "
                                         rf"{MAX_LOCAL_WORLD} ranks"):
        local_plan(RunOptions(families=("selftest",), world=MAX_WORLD, backend="gloo"))
    wide = f"selftest/fault_rank=0,mode=noop,world={MAX_LOCAL_WORLD + 1}"
    with pytest.raises(UsageError, match=rf"case {wide} needs world {MAX_LOCAL_WORLD + 1}: a local run spawns"):
        local_plan(RunOptions(case_ids=(wide,), backend="gloo"))
    at_cap = f"selftest/fault_rank=0,mode=noop,world={MAX_LOCAL_WORLD}"
    assert local_plan(RunOptions(case_ids=(at_cap,), backend="gloo")).worlds == [MAX_LOCAL_WORLD]


def test_the_gates_worker_spawns_no_more_ranks_than_a_local_run():
    from harness.run.plan import MAX_LOCAL_WORLD
    from harness.run.rounds import ProtocolError, _parse_round

    wide = f"selftest/fault_rank=0,mode=noop,world={MAX_LOCAL_WORLD + 1}"
    with pytest.raises(ProtocolError, match=f"needs world {MAX_LOCAL_WORLD + 1}: a local run spawns at most"):
        _parse_round({"round": 0, "cases": [{"id": wide}]})


# -- the launcher's environment ----------------------------------------------------------------------

JOB = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("name, text", [("RANK", " 1"), ("RANK", "+1"), ("RANK", "01"), ("WORLD_SIZE", "2_0"),
                                        ("LOCAL_RANK", "1e0"), ("MASTER_PORT", "２９５００")])
def test_a_launcher_variable_takes_the_one_grammar(name, text):
    from harness.core.options import UsageError
    from harness.run.joined import joined_rank

    with pytest.raises(UsageError, match=rf"^{name}={re.escape(repr(text))}: expected an integer in \["):
        joined_rank({**JOB, name: text})


@pytest.mark.parametrize("name, text, range_", [("GROUP_RANK", "٣", "[0, 65535]"), ("SLURM_NODEID", "+1", "[0, 65535]"),
                                                ("GROUP_RANK", "65536", "[0, 65535]"),
                                                ("LOCAL_WORLD_SIZE", "٣", "[1, 65536]"),
                                                ("LOCAL_WORLD_SIZE", "²", "[1, 65536]"),
                                                ("SLURM_NTASKS_PER_NODE", "0", "[1, 65536]")])
def test_the_node_variables_are_refused_before_the_ranks_meet(name, text, range_):
    from harness.core.options import UsageError
    from harness.run import fingerprint
    from harness.run.joined import joined_rank

    message = rf"^{name}={re.escape(repr(text))}: expected an integer in {re.escape(range_)}$"
    with pytest.raises(UsageError, match=message):
        joined_rank({**JOB, name: text})
    with pytest.raises(UsageError, match=message):  # and never read as a number where they are used
        fingerprint.rank_identity(0, 0, {name: text})


def test_the_node_variables_in_the_grammar_describe_the_node():
    from harness.run import fingerprint

    ident = fingerprint.rank_identity(0, 0, {"SLURM_NODEID": "2", "GROUP_RANK": "", "SLURM_NTASKS_PER_NODE": "8"})
    assert ident["node_rank"] == 2 and ident["local_world_size"] == 8 and ident["node"].endswith("#SLURM_NODEID=2")


@pytest.mark.parametrize("value, expected", [
    ('{"x/y=1": [' + "9" * 5000 + ", 1]}", "expected an integer"), ('{"x/y=1": [NaN, 1]}', "NaN is not a number"),
    ('{"x/y=1": [1, -Infinity]}', "-Infinity is not a number"), ('{"x/y=1": [1e400, 1]}', "is not a finite number"),
])
def test_a_slowdown_variable_names_itself_for_every_number_it_holds(value, expected):
    from harness.core.options import UsageError
    from harness.gatepower.inject import INJECT_ENV, slowdowns_from_text

    with pytest.raises(UsageError) as err:
        slowdowns_from_text(value)
    assert str(err.value).startswith(f"{INJECT_ENV}: ") and expected in str(err.value) and len(str(err.value)) < 300
    assert slowdowns_from_text('{"x/y=1": [5, 2]}') == {"x/y=1": (5, 2)}


def test_accept_refuses_a_rank_variable_that_is_no_rank(tmp_path, monkeypatch, capsys):
    profile = tmp_path / "profile.yaml"
    profile.write_text(f"schema: critpath.accept/1\nname: t\nworld: 1\nrun:\n  iters: 10\n  cases:\n    - {NOOP}\n"
                       f'checks:\n  - name: noop\n    case: "{NOOP}"\n    statistic: p50_us\n    max: 1000000\n'
                       "    source: a test\n")
    for name in ("WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "x")  # no WORLD_SIZE: a local run, and then whose turn to judge it
    assert main(["accept", "--profile", str(profile), "--out", str(tmp_path / "out"), "--no-report"]) == 2
    assert "RANK='x': expected an integer in [0, 65535]" in capsys.readouterr().err


def test_a_percentile_statistic_is_named_in_ascii_digits_only():
    from harness.core.figures import is_sample_statistic

    assert is_sample_statistic("p99_ns") and is_sample_statistic("p99.9_us") and is_sample_statistic("p999_ns")
    assert not is_sample_statistic("p٩٩_ns") and not is_sample_statistic("p９９_ns") and not is_sample_statistic("p99.٩_us")
