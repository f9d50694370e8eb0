"""gate-power's arithmetic and its injected slowdowns (the measurement itself is a long benchmark,
run by ``critpath gate-power``; its real gates are in tests/test_gate_cli.py)."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from harness.core.case import Param
from harness.core.family import CheckResult, Family
from harness.gatepower import inject
from harness.gatepower.power import AA, analyse, clopper_pearson, table
from harness.gatepower.tools import _asv_verdict

RPC = "rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=tcp_nodelay"


def _trial(cell, trial, code, outcome, ratio, likely=False, wall=100.0, other=None):
    cases = {RPC: {"outcome": outcome, "likely_regression": likely, "ratio": ratio, "n_pairs": 30, "mde": 0.06}}
    if other:
        cases["kv_alloc/x=1"] = other
    return {"cell": cell, "trial": trial, "exit_code": code, "wall_s": wall, "cases": cases}


def _doc(trials, cells):
    return {"base": "0" * 40, "settings": {"budget_s": 180, "min_effect": 0.05, "statistic": None, "rounds": None},
            "cells": cells, "trials": trials, "tool_trials": []}


def test_rates_count_the_watched_case_and_carry_exact_intervals():
    cells = [{"name": f"{RPC}: {AA}", "case_ids": [RPC], "condition": AA, "candidate": "a", "target": None},
             {"name": f"{RPC}: uniform +10 %", "case_ids": [RPC], "condition": "uniform +10 %", "candidate": "b",
              "target": RPC}]
    trials = [_trial(cells[0]["name"], t, 0, "unchanged", 1.0) for t in range(19)]
    trials.append(_trial(cells[0]["name"], 19, 1, "inconclusive", 1.06, likely=True))
    trials += [_trial(cells[1]["name"], t, 1, "regressed", 1.10) for t in range(18)]
    trials += [_trial(cells[1]["name"], 18, 0, "unchanged", 1.02), _trial(cells[1]["name"], 19, 2, "could_not_run", None)]
    rows = {r["condition"]: r for r in analyse(_doc(trials, cells))}
    aa, slow = rows[AA], rows["uniform +10 %"]
    assert (aa["trials"], aa["counted"], aa["rate"]) == (20, 1, 0.05)
    assert aa["ci95"] == pytest.approx(clopper_pearson(1, 20)) and aa["ci95"][0] < 0.05 < aa["ci95"][1]
    assert (slow["counted"], slow["could_not_run"]) == (18, 1)
    assert abs(slow["effect_median"] - 0.10) < 1e-9
    text = table(_doc(trials, cells))
    assert "false alarms: 1" in text and "detected: 18" in text and "[0.1 %, 24.9 %]" in text


def test_clopper_pearson_matches_known_values():
    # 0 of 20: the upper end is 1 - 0.025 ** (1 / 20) = 16.8 %; 20 of 20: the lower end is 83.2 %.
    assert clopper_pearson(0, 20)[1] == pytest.approx(1 - 0.025 ** (1 / 20), rel=1e-6)
    assert clopper_pearson(20, 20)[0] == pytest.approx(0.025 ** (1 / 20), rel=1e-6)


def test_a_multi_case_gate_counts_alarms_on_the_cases_not_slowed():
    cell = {"name": "2 cases: uniform +10 %", "case_ids": [RPC, "kv_alloc/x=1"], "condition": "uniform +10 %",
            "candidate": "b", "target": RPC}
    trials = [_trial(cell["name"], 0, 1, "regressed", 1.1, other={"outcome": "regressed", "ratio": 1.07}),
              _trial(cell["name"], 1, 1, "regressed", 1.1, other={"outcome": "unchanged", "ratio": 1.0})]
    (row,) = analyse(_doc(trials, [cell]))
    assert row["counted"] == 2 and row["other_case_alarms"] == 1


def _family(step_calls):
    def setup(ctx, case):
        return {"id": case.id}

    def step(state):
        step_calls.append(state["id"])

    return Family("rpc", 1, "test", [Param("transport", str)], lambda o: [], setup, step,
                  lambda c, s, r: {}, lambda s: CheckResult(0, 1))


def test_an_injected_slowdown_waits_on_its_case_only_and_partial_hits_one_step_in_ten():
    source = inject.module_source([inject.Slowdown("rpc/transport=a", "partial", 1.0, 200_000.0)])
    namespace = {}
    exec(compile(source, "injected", "exec"), namespace)
    calls = []
    family = namespace["wrap"](_family(calls))
    slowed = family.setup(None, family.case(transport="a"))
    other = family.setup(None, family.case(transport="b"))
    timings = []
    for _ in range(20):
        t0 = time.perf_counter_ns()
        family.step(slowed)
        timings.append(time.perf_counter_ns() - t0)
    long = [i for i, t in enumerate(timings) if t >= 2_000_000]  # 10 x 200 us
    assert long == [9, 19]
    t0 = time.perf_counter_ns()
    family.step(other)
    assert time.perf_counter_ns() - t0 < 1_000_000
    family.teardown(slowed)
    assert len(calls) == 21  # the real step ran every time


def test_the_slowdown_sizes_and_the_refusals():
    uniform = inject.Slowdown(RPC, "uniform", 0.10, 70_000.0)
    partial = replace(uniform, kind="partial")
    assert (uniform.wait_ns, uniform.every) == (7_000, 1)
    assert (partial.wait_ns, partial.every) == (70_000, inject.PARTIAL_EVERY)
    with pytest.raises(ValueError):
        inject.Slowdown(RPC, "sometimes", 0.1, 1.0)


def test_asv_compare_rows_are_read_as_asv_decides_them():
    worse = "| +        | 63.8±3μs   | 71.1±2μs   |    1.11 | bench_step.Step.time_step |"
    same = "|          | 63.8±3μs   | 64.8±3μs   |    1.02 | bench_step.Step.time_step |"
    assert _asv_verdict(worse, 1.1).fails and _asv_verdict(worse, 1.1).ratio == 1.11
    assert not _asv_verdict(same, 1.1).fails


def test_between_gate_spread_flags_gates_that_differ_by_more_than_their_pairs_explain():
    cells = [{"name": f"{RPC}: {AA}", "case_ids": [RPC], "condition": AA, "candidate": "a", "target": None}]

    def trials(ratios):
        out = []
        for t, r in enumerate(ratios):
            record = _trial(cells[0]["name"], t, 0, "unchanged", r)
            record["cases"][RPC].update(noise_per_pair=0.10, n_pairs=100)  # SE of each estimate: 1.05 %
            out.append(record)
        return out

    from harness.gatepower.power import between_gates
    alike = between_gates(_doc(trials([1.0, 1.01, 0.99, 1.005, 0.995]), cells))[0]
    apart = between_gates(_doc(trials([1.0, 1.10, 0.96, 1.05, 0.97]), cells))[0]
    assert alike["p"] > 0.5 and alike["between_sd"] == 0.0
    assert apart["p"] < 0.001 and 0.03 < apart["between_sd"] < 0.08
    assert "between-gate spread" in table(_doc(trials([1.0, 1.10, 0.96, 1.05, 0.97]), cells))


def test_a_group_splits_only_where_another_case_id_begins():
    from harness.gatepower.power import _case_ids

    a, b = RPC, "allreduce/algo=tree,backend=gloo,dtype=float32,size_bytes=8,world=2"
    assert _case_ids(f"{a},{b}") == (a, b)
    with pytest.raises(Exception, match="two or more case IDs"):
        _case_ids(a)



def test_bad_input_is_named_and_nothing_stored_is_overwritten(tmp_path, capsys):
    import json

    from harness.cli import main

    for bad, why in (("uniform:ten", "the fraction 'ten' is not a number"), ("sometimes:0.1", "expected KIND:FRACTION")):
        with pytest.raises(SystemExit) as exit_:
            main(["gate-power", "--case", RPC, "--slowdowns", bad])
        assert exit_.value.code == 2 and why in capsys.readouterr().err
    corrupt = tmp_path / "power.json"
    corrupt.write_text("{")
    # --resume needs no --case: the cells are the stored ones (the documented command).
    assert main(["gate-power", "--resume", "--out", str(tmp_path)]) == 2
    assert f"{corrupt}: not a readable gate-power measurement" in capsys.readouterr().err
    assert corrupt.read_text() == "{"  # refused, not rewritten
    # A replay reads every real gate first: a corrupt one is named and the stored file is kept as it was.
    cell = {"name": f"{RPC}: {AA}", "case_ids": [RPC], "condition": AA, "candidate": "a", "target": None}
    doc = {**_doc([_trial(cell["name"], 0, 0, "unchanged", 1.0)], [cell]), "branches": {}}
    stored = tmp_path / "measured.json"
    stored.write_text(json.dumps(doc))
    gate = tmp_path / "gates" / "cell-00" / "trial-00" / "gate.json"
    gate.parent.mkdir(parents=True)
    gate.write_text("garbage")
    assert main(["gate-power", "--report", str(stored), "--resample", "5"]) == 2
    assert f"{gate}: not a readable gate result" in capsys.readouterr().err
    assert json.loads(stored.read_text()) == doc
    # A good one: the replay goes into the file that was read, whatever its name.
    gate.write_text(json.dumps({"cases": [{"case_id": RPC, "detail": {"pairs": [0.01, -0.01, 0.0, 0.02] * 5}}],
                                "extra": {"generation_s": [2.0] * 20, "measure_wall_s": 45.0}}))
    assert main(["gate-power", "--report", str(stored), "--resample", "5"]) == 0
    assert json.loads(stored.read_text())["resampled"]["gates_per_cell"] == 5
    assert corrupt.read_text() == "{"  # the other file is untouched


def test_report_refuses_every_measuring_option_and_reads_nothing(tmp_path, capsys):
    import json

    from harness.cli import main

    stored = tmp_path / "power.json"
    stored.write_text(json.dumps({**_doc([], []), "branches": {}}))
    argv = ["gate-power", "--report", str(stored), "--case", RPC, "--trials", "3", "--budget", "5",
            "--out", str(tmp_path / "elsewhere"), "--tools", "bogus"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert ("--case, --trials, --budget, --tools and --out shape a measurement, and --report prints one stored; "
            "leave --case, --trials, --budget, --tools and --out out") in err, err
    assert not (tmp_path / "elsewhere").exists()
    # And the other way: --resample, which replays a stored measurement, without --report.
    assert main(["gate-power", "--case", RPC, "--resample", "5", "--out", str(tmp_path / "elsewhere")]) == 2
    assert "--resample replays the gates of a stored measurement; give --report POWER_JSON too" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere").exists()


def test_resume_carries_on_the_named_cells_and_refuses_a_name_it_does_not_hold(tmp_path, capsys):
    import json

    from harness.cli import main

    other = "allreduce/algo=tree,backend=gloo,dtype=float32,size_bytes=8,world=2"
    cells = [{"name": f"{cid}: {AA}", "case_ids": [cid], "condition": AA, "candidate": "a", "target": None}
             for cid in (RPC, other)]
    doc = {**_doc([], cells), "branches": {}, "aa": "a", "clone": str(tmp_path / "clone")}
    doc["settings"].update(trials=1, tools=[], tool_trials=0)  # what --resume needs of a measurement
    (tmp_path / "power.json").write_text(json.dumps(doc))
    uds = RPC.replace("tcp_nodelay", "uds")
    assert main(["gate-power", "--resume", "--case", uds, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"has no cells for {uds}" in err and RPC in err and other in err
    assert json.loads((tmp_path / "power.json").read_text()) == doc  # nothing measured, nothing rewritten

    from argparse import Namespace

    from harness.gatepower.power import Cell, _chosen

    stored = [Cell(**{**c, "case_ids": tuple(c["case_ids"])}) for c in cells]
    assert [c.case_ids for c in _chosen(stored, Namespace(case_ids=[other], groups=[]), tmp_path)] == [(other,)]
    assert _chosen(stored, Namespace(case_ids=[], groups=[]), tmp_path) == stored


def test_an_interrupt_before_the_first_trial_does_not_promise_a_resume(tmp_path, monkeypatch, capsys):
    """SIGTERM while gate-power prepared said the trials were in power.json and --resume carried
    on; there was no power.json, and --resume then failed."""
    import harness.gatepower.power as power
    from harness.cli import main

    def interrupted(request):
        raise KeyboardInterrupt

    monkeypatch.setattr(power, "measure", interrupted)
    code = main(["gate-power", "--case", RPC, "--trials", "1", "--out", str(tmp_path / "gp")])
    err = capsys.readouterr().err
    assert code == 128 + 2 and "nothing to resume" in err and "--resume carries on" not in err
