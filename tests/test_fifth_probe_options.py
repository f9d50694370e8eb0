"""The fifth probe's option defects: each option combination a command accepts finishes in
seconds, list options read alike, and a number or statistic name has one spelling."""
from __future__ import annotations

import argparse
import json
import re
import sys
import time

import pytest

from harness.core import registry
from harness.core.case import CaseIdError
from harness.core.numbers import NumberError, parse_float
from harness.core.options import number_in

KV_CASE = ("kv_alloc/allocator=caching,block_tokens=16,budget_gb=1,model=7b,policy=per_block,requests=1,"
           "speedup={},trace=azure_conv")


# -- 13: a number that underflows ------------------------------------------------------------------

@pytest.mark.parametrize("text", ["1e-400", "-1e-400", "1e-310", "0.0001e-305"])
def test_text_naming_a_nonzero_number_that_underflows_is_refused(text):
    with pytest.raises(NumberError, match=r"^field x: '.*' is too small to hold \(underflows\)"):
        parse_float(text, "field x")


@pytest.mark.parametrize("text, value", [("0", 0.0), ("0e-400", 0.0), ("1e-300", 1e-300),
                                         (repr(sys.float_info.min), sys.float_info.min)])
def test_zero_and_the_smallest_normal_number_still_read(text, value):
    assert parse_float(text, "field x") == value


def test_every_caller_of_the_float_grammar_refuses_an_underflow():
    with pytest.raises(CaseIdError, match="key 'speedup': '1e-400' is too small to hold"):
        registry.parse(KV_CASE.format("1e-400"))
    with pytest.raises(argparse.ArgumentTypeError, match="too small to hold"):
        number_in(0.0, 1.0)("1e-400")  # --min-effect's type
    assert number_in(0.0, 1.0)("0.05") == 0.05


def test_a_diagnose_criterion_that_underflows_names_its_file_line_and_field(tmp_path):
    from harness.diagnose import rules

    path = tmp_path / "rules.yaml"
    path.write_text("schema: critpath.diagnose/1\nrules:\n  busbw_low:\n    function: variance\n"
                    "    criteria: \"< -1e-400\"\n    verdict: suspect\n    categories: bandwidth\n"
                    "    metrics: ['.*/busbw_gbps']\n")
    with pytest.raises(rules.RuleFileError, match=rf"^{re.escape(str(path))}:5: field rules.busbw_low.criteria: '-1e-400' "
                                                  r"is too small to hold \(underflows\)"):
        rules.load(path)
    path.write_text(path.read_text().replace("-1e-400", "-0.10"))
    assert rules.load(path)[0].criteria.threshold == -0.10


# -- 14: one spelling of each percentile -----------------------------------------------------------

@pytest.mark.parametrize("name, write", [("p01_ns", "p1_ns"), ("p05_ns", "p5_ns"), ("p050_us", "p50_us"),
                                         ("p00.5_ns", "p0.5_ns"), ("p05_over_mean", "p5_over_mean")])
def test_a_percentile_with_a_leading_zero_is_no_statistic_and_says_what_to_write(name, write):
    from harness.core.figures import is_sample_statistic
    from harness.gate.values import validate_statistic

    assert not is_sample_statistic(name)
    with pytest.raises(ValueError, match=rf"leading zero; write .* \({write!r}\)"):
        validate_statistic(name)


@pytest.mark.parametrize("name", ["p0.1_ns", "p5_ns", "p0.5_ns", "p50_us", "p999_ns", "p5_over_mean"])
def test_the_one_spelling_still_names_its_statistic(name):
    from harness.core.figures import is_sample_statistic, sample_value
    from harness.gate.values import validate_statistic

    assert is_sample_statistic(name) and validate_statistic(name) == name
    assert sample_value(list(range(1, 2001)), name) > 0


def test_gate_compare_refuses_a_leading_zero_percentile_with_exit_2(tmp_path, capsys):
    from harness.cli import main

    with pytest.raises(SystemExit) as refused:
        main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--statistic", "p05_ns",
              "--out", str(tmp_path / "out")])
    assert refused.value.code == 2
    assert "--statistic: statistic 'p05_ns' writes p05 with a leading zero; write p5 ('p5_ns')" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_family_cannot_declare_a_figure_with_a_leading_zero_percentile():
    from harness.core.figures import Figure

    with pytest.raises(ValueError, match="figure rtt_p05_us: 'rtt_p05_us' writes p05 with a leading zero"):
        Figure("rtt_p05_us", "us", "lower", "the 5th percentile of round trips")


# -- 11: gate-power's --statistic is the gate's ----------------------------------------------------

RPC = "rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=tcp_nodelay"


@pytest.fixture
def gates_measured(monkeypatch):
    """What gate-power went on to measure: nothing, where it refused its options."""
    import harness.gatepower.power as power

    measured = []
    monkeypatch.setattr(power, "measure", lambda request: measured.append(request) or {})
    monkeypatch.setattr(power, "table", lambda doc: "")
    monkeypatch.setattr(power.atomic, "write_text", lambda *a, **k: None)
    return measured


@pytest.mark.parametrize("statistic, why", [("nonsense", "'nonsense' is not a figure that family 'rpc' declares"),
                                            ("p05_ns", "writes p05 with a leading zero")])
def test_gate_power_refuses_a_statistic_no_gate_could_run_on(tmp_path, capsys, gates_measured, statistic, why):
    from harness.cli import main

    args = ["gate-power", "--case", RPC, "--trials", "1", "--statistic", statistic, "--out", str(tmp_path / "gp")]
    try:
        code = main(args)
    except SystemExit as exc:  # argparse refuses it as the gate's option type does
        code = exc.code
    assert code == 2 and why in capsys.readouterr().err
    assert gates_measured == []


def test_gate_power_refuses_a_non_ascii_percentile(tmp_path, capsys, gates_measured):
    from harness.cli import main

    with pytest.raises(SystemExit) as refused:
        main(["gate-power", "--case", RPC, "--statistic", "p٩٩_ns", "--out", str(tmp_path / "gp")])
    assert refused.value.code == 2 and "--statistic: statistic 'p٩٩_ns'" in capsys.readouterr().err
    assert gates_measured == []


def test_gate_power_passes_a_statistic_the_gate_runs_on(tmp_path, gates_measured):
    from harness.cli import main

    assert main(["gate-power", "--case", RPC, "--trials", "1", "--statistic", "p99_ns",
                 "--out", str(tmp_path / "gp")]) == 0
    assert [r.statistic for r in gates_measured] == ["p99_ns"]


# -- 10: model's list options read as every list option does ---------------------------------------

def _model(tmp_path, *args: str) -> int:
    from harness.cli import main

    try:
        return main(["model", "--no-plots", "--out", str(tmp_path / "m"), *args])
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("args, why", [
    (("--algos", ","), "argument --algos: expected one or more comma-separated values"),
    (("--algos", ""), "argument --algos: expected one or more comma-separated values"),
    (("--algos", "ring,ring"), "argument --algos: 'ring' is given twice"),
    (("--algos", "ring,bogus"), "argument --algos: unknown 'bogus'; known: ring"),
    (("--ranks", "8,8"), "argument --ranks: ranks '8,8': '8' is given twice"),
    (("--ranks", "2,4,...,3"), "the value after '...' (3) must exceed those before it (4)"),
    (("--ranks", "2,3,8,...,64"), "the values before '...' are not one progression"),
    (("--ranks", "16,8,...,64"), "values before '...' must increase"),
])
def test_model_refuses_an_empty_repeated_or_backward_list_with_exit_2(tmp_path, capsys, args, why):
    assert _model(tmp_path, *args) == 2
    assert why in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_model_ranks_and_algos_read_as_the_doc_says(tmp_path):
    from harness.model.command import parse_ranks

    assert parse_ranks("8,16,32,...,128") == (8, 16, 32, 64, 128)  # the last value ends the list
    assert parse_ranks("2,4,6,...,10") == (2, 4, 6, 8, 10)
    assert parse_ranks("16,8,4") == (4, 8, 16)  # scales in any order
    assert _model(tmp_path, "--ranks", "8,16", "--sizes", "8,1K", "--algos", "ring,tree") == 0
    doc = json.loads((tmp_path / "m" / "model.json").read_text())
    assert doc["scales"] == [8, 16] and list(doc["modelled_time_us"]) == ["ring", "tree"]


# -- 4: model bounds its grid ----------------------------------------------------------------------

def test_model_refuses_a_grid_past_its_cap_naming_both_options(tmp_path, capsys):
    from harness.model.command import MAX_MODEL_CELLS

    # Each option within its own cap (4,096 scales, 4,096 sizes); together 80 million modelled times.
    assert _model(tmp_path, "--ranks", "2,3,...,4097", "--sizes", "1:4096:+1") == 2
    err = capsys.readouterr().err
    assert "--sizes x --ranks x --algos: 4096 sizes x 4096 scales x 5 algorithms" in err
    assert f"at most MAX_MODEL_CELLS = {MAX_MODEL_CELLS}" in err and not (tmp_path / "m").exists()


def test_model_runs_the_largest_grid_its_cap_admits(tmp_path):
    from harness.model.command import DEFAULT_RANKS, MAX_MODEL_CELLS, parse_ranks

    scales = len(parse_ranks(DEFAULT_RANKS))
    sizes = MAX_MODEL_CELLS // (scales * 5)
    assert sizes >= 4096  # every algorithm at the default scales over the largest size sweep
    assert _model(tmp_path, "--sizes", "1:4096:+1") == 0
    assert _model(tmp_path / "one_more", "--sizes", "1:4096:+1", "--ranks", f"1,2,3,...,{MAX_MODEL_CELLS // (4096 * 5) + 1}") == 2


# -- 5: moe-sim bounds each option and their combinations ------------------------------------------

def _moe_sim(*args: str) -> int:
    from harness.cli import main

    try:
        return main(["moe-sim", *args])
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("args, why", [
    (("--worlds", "65536", "--experts", "65536"), "argument --worlds: must be an integer in [1, 256]"),
    (("--worlds", "4096", "--experts", "4096"), "argument --worlds: must be an integer in [1, 256]"),
    (("--worlds", "8", "--spare-slots", "65536"), "argument --spare-slots: must be an integer in [0, 4096]"),
    (("--worlds", "8", "--spare-slots", "1024"), "--experts 256 + --worlds 8 x --spare-slots 1024: 8448 expert slots; "
                                                 "at most MAX_SLOTS = 4096"),
    (("--worlds", "256", "--experts", "4096", "--spare-slots", "1"), "4352 expert slots; at most MAX_SLOTS"),
    (("--worlds", "256,255,254"), "--worlds 256,255,254: 195077 rank pairs (world x world, summed); at most "
                                  "MAX_RANK_PAIRS = 131072"),
])
def test_moe_sim_refuses_what_would_not_finish_in_seconds_with_exit_2(capsys, args, why):
    assert _moe_sim(*args) == 2
    assert why in capsys.readouterr().err


def test_moe_sim_bounds_admit_the_default_worlds_and_shapes():
    from harness.moe_a2a.cli import MAX_RANK_PAIRS, MAX_SLOTS, _too_large

    assert sum(w * w for w in (8, 16, 32, 64, 128, 256)) <= MAX_RANK_PAIRS
    assert _too_large((8, 16, 32, 64, 128, 256), 256, 1) == ""  # DeepSeek-V3's 256 experts, 1 spare slot
    assert _too_large((256,), 256, (MAX_SLOTS - 256) // 256) == ""
    assert _too_large((8,), 8, (MAX_SLOTS - 8) // 8 + 1).startswith("--experts 8 + --worlds 8 x --spare-slots 512")


def test_moe_sim_runs_at_the_slot_bound(capsys):
    # 8 ranks, every slot of MAX_SLOTS placed: about a second (16,384 spare slots took 16 s).
    assert _moe_sim("--worlds", "8", "--experts", "8", "--top-k", "2", "--spare-slots", "511") == 0
    assert "MODELLED" in capsys.readouterr().out


# -- 6: gate --against honours --budget --------------------------------------------------------------

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


def _fake_process(seconds: float, clock: list, sleep: bool = False):
    """run_process as a candidate process that takes ``seconds`` (on ``clock``, or also in real time
    when ``sleep``) and writes one passing record."""
    from conftest import derived_record

    from harness.core.store import RunDir

    def run_process(tree, case_ids, run_dir, run_args, timeout_s):
        clock[0] += seconds
        if sleep:
            time.sleep(seconds)
        run = RunDir(run_dir, run_dir.name)
        run.append(derived_record(NOOP, [1000 + i for i in range(50)], run_id=run_dir.name,
                                  plan={"warmup": 1, "iters": 50}))
        run.write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": 1})
        return 0, seconds, ""
    return run_process


def test_repeats_start_none_that_would_end_past_the_budget(tmp_path, monkeypatch):
    from harness.gate import repeats

    clock = [0.0]
    monkeypatch.setattr(repeats, "run_process", _fake_process(5.6, clock))
    done = repeats.run_repeats([NOOP], tree=None, repeats=10, out=tmp_path, run_args=[], timeout_s=60,
                               progress=lambda run: None, budget_s=20.0, started_at=0.0, clock=lambda: clock[0])
    # 3 x 5.6 s = 16.8 s; a fourth would end at 22.4 s, past the 20 s budget.
    assert len(done.runs) == 3 and clock[0] == pytest.approx(16.8)
    assert done.cut == [{"repeats_run": 3, "repeats_planned": 10, "budget_s": 20.0, "elapsed_s": 16.8,
                         "next_repeat_s": 5.6}]
    unbounded = repeats.run_repeats([NOOP], None, 4, tmp_path / "all", [], 60, lambda run: None)
    assert len(unbounded.runs) == 4 and unbounded.cut == []


def test_gate_against_a_table_stops_at_the_budget_and_says_so(tmp_repo, tmp_path, monkeypatch):
    from harness.cli import main
    from harness.gate import repeats

    monkeypatch.setattr(repeats, "run_process", _fake_process(0.3, [0.0], sleep=True))
    table = tmp_path / "baselines.yaml"
    table.write_text(f"baselines:\n  - {{case_id: '{NOOP}', statistic: min_ns, value: 1.0e+9, direction: lower}}\n")
    out = tmp_path / "out"
    # The first process always runs; after it (0.3 s, and the worktree before it) a second would
    # end past a 0.5 s budget.
    main(["gate", "--repo", str(tmp_repo), "--out", str(out), "--against", str(table), "--budget", "0.5"])
    data = json.loads((out / "gate.json").read_text())
    assert len(list((out / "candidate").glob("rep-*"))) == 1 and data["repeats"] == 1
    (cut,) = data["extra"]["cut"]
    assert cut["repeats_run"] == 1 and cut["repeats_planned"] == 10 and cut["budget_s"] == 0.5
    assert any("the 0.5 s budget cut the candidate's processes at 1 of 10 repeats" in w for w in data["warnings"])
