"""The gate's between-gate term: an offset fixed for one gate, estimated from stored A/A gates and
added to the interval and the test (harness.gate.between, CaseSpec.between_sd_log)."""
from __future__ import annotations

import json
import shutil
import math

import numpy as np
import pytest

from harness.core.store import ResultsFileError
from harness.gate.between import GATE_DEPTH, from_aa_gates, gate_dirs, heterogeneity, stored
from harness.gate.sequential import CaseSpec, SequentialGate
from harness.gate.stats import Outcome

LOOKS = (20, 40, 60)  # pairs at each look; the last is the budget


def _gates(n_gates: int, offset_sd: float, term_sd: float, pair_sd: float = 0.15, seed: int = 1):
    """n_gates A/A gates, each with its own offset drawn once, through SequentialGate's looks:
    (gates that fail the build, gates whose final interval covers no change)."""
    rng = np.random.default_rng(seed)
    fails = covered = 0
    for _ in range(n_gates):
        d = rng.normal(0.0, offset_sd) + rng.normal(0.0, pair_sd, LOOKS[-1])
        gate = SequentialGate([CaseSpec("c", 0.05, "lower", term_sd)], alpha=0.01, spending="pocock")
        for k, n in enumerate(LOOKS):
            state = gate.look(n / LOOKS[-1], {"c": d[:n]}, final=k == len(LOOKS) - 1)["c"]
            if state.decided:
                break
        fails += state.outcome == Outcome.REGRESSED or state.likely_regression
        covered += state.interval_low <= 1.0 <= state.interval_high
    return fails, covered


def test_the_between_gate_term_covers_an_injected_per_gate_offset_and_holds_the_false_alarms():
    # A 4 % offset per gate (what docs/gate.md measured on the allreduce A/A gates) at 15 % noise
    # per pair: 60 pairs give a within-gate SE of about 2 %, so the offset dominates.
    gates = 150
    fails_without, covered_without = _gates(gates, 0.04, 0.0)
    fails_with, covered_with = _gates(gates, 0.04, 0.04)
    # Without the term the interval is the pairs' alone: it misses no change in about a third of
    # the gates, and the offset fails builds far more often than alpha (1 %).
    assert covered_without / gates < 0.80, covered_without
    assert fails_without / gates > 0.05, fails_without
    # With it the 95 % repeated interval covers, and the false alarms are at alpha's scale.
    assert covered_with / gates >= 0.93, covered_with
    assert fails_with <= 3, fails_with


def test_without_an_offset_the_term_costs_little_power_and_zero_changes_nothing():
    rng = np.random.default_rng(3)
    d = rng.normal(math.log(1.2), 0.1, 60)
    plain = SequentialGate([CaseSpec("c", 0.05)], spending="pocock").look(1.0, {"c": d}, final=True)["c"]
    zero = SequentialGate([CaseSpec("c", 0.05, "lower", 0.0)], spending="pocock").look(1.0, {"c": d}, final=True)["c"]
    assert plain == zero
    termed = SequentialGate([CaseSpec("c", 0.05, "lower", 0.02)], spending="pocock").look(1.0, {"c": d}, final=True)["c"]
    assert termed.outcome == Outcome.REGRESSED  # +20 % stays a regression with a 2 % term
    assert termed.interval_low < plain.interval_low and termed.interval_high > plain.interval_high
    assert abs(termed.z) < abs(plain.z)


def test_a_between_gate_sd_out_of_range_is_refused():
    for bad in (-0.01, 1.0, math.nan):
        with pytest.raises(ValueError, match="between_sd_log"):
            CaseSpec("c", 0.05, "lower", bad)


def test_heterogeneity_is_zero_for_estimates_within_their_errors_and_the_spread_beyond_them():
    same = heterogeneity([0.01, -0.01, 0.0, 0.005], [0.02] * 4)
    assert same.between_sd_log == 0.0 and same.p > 0.5 and same.gates == 4
    # Spread 0.05 against errors of 0.001: the between-gate SD is the spread's own SD.
    x = [0.05, -0.05, 0.05, -0.05, 0.0]
    spread = heterogeneity(x, [0.001] * 5)
    assert spread.between_sd_log == pytest.approx(np.std(x, ddof=1), rel=0.01) and spread.p < 1e-6
    with pytest.raises(ValueError):
        heterogeneity([0.1], [0.01])


def _fake_gate(root, name, base_commit, cand_commit, extra=None):
    d = root / name
    (d / "base").mkdir(parents=True)
    (d / "candidate").mkdir()
    (d / "gate.json").write_text(json.dumps({"base": {"commit": base_commit}, "candidate": {"commit": cand_commit},
                                             "extra": extra or {}}))
    return d


def test_stored_gates_that_are_not_a_a_or_none_at_all_are_refused_naming_the_file(tmp_path):
    with pytest.raises(ResultsFileError, match="no stored gate"):
        from_aa_gates([tmp_path], "p50_ns")
    ab = _fake_gate(tmp_path, "g1", "a" * 40, "b" * 40)
    with pytest.raises(ResultsFileError, match=rf"{ab / 'gate.json'}: not an A/A gate"):
        from_aa_gates([tmp_path], "p50_ns")
    with pytest.raises(ResultsFileError, match="not a directory"):
        from_aa_gates([tmp_path / "nosuch"], "p50_ns")


def test_compare_reads_back_the_term_a_gate_used_and_refuses_one_out_of_range(tmp_path):
    g = _fake_gate(tmp_path, "g", "a" * 40, "a" * 40,
                   {"between_gate": {"c1": {"between_sd_log": 0.03}, "c2": None}})
    assert stored(g / "base") == {"c1": 0.03}
    bad = _fake_gate(tmp_path, "h", "a" * 40, "a" * 40, {"between_gate": {"c1": {"between_sd_log": 5}}})
    with pytest.raises(ResultsFileError, match="extra.between_gate.c1.between_sd_log"):
        stored(bad / "base")


@pytest.mark.parametrize("term, field", [
    ({"c1": {"between_sd_log": "0.03"}}, "extra.between_gate.c1.between_sd_log: expected a number"),
    ({"c1": {"between_sd_log": True}}, "extra.between_gate.c1.between_sd_log: expected a number"),
    ({"c1": {}}, "extra.between_gate.c1.between_sd_log: expected a number"),
    ({"c1": 0.03}, "extra.between_gate.c1.between_sd_log: expected a number"),
    ([0.03], "extra.between_gate: expected a mapping"),
])
def test_a_stored_term_that_is_not_a_number_is_refused_not_read_as_none(tmp_path, term, field):
    # Read as absent, it would recheck the gate's pairs with a narrower interval than the gate had.
    g = _fake_gate(tmp_path, "g", "a" * 40, "a" * 40, {"between_gate": term})
    with pytest.raises(ResultsFileError, match=rf"{g / 'gate.json'}: field {field}"):
        stored(g / "base")


def _fake_a_a(root, name, gate_id="20261206-120000-h-0001"):
    return _fake_gate(root, name, "a" * 40, "a" * 40, {"gate_id": gate_id} if gate_id else None)


def test_a_stored_gate_without_its_id_or_a_copy_of_another_is_refused_naming_both(tmp_path):
    # an ID-less gate could be a copy, and cannot be placed in time; a copy would agree with itself
    bare = _fake_a_a(tmp_path / "s1", "g", gate_id=None)
    with pytest.raises(ResultsFileError, match=rf"{bare / 'gate.json'}: field extra.gate_id: not recorded"):
        from_aa_gates([tmp_path / "s1"], "p50_ns")
    first, copy = _fake_a_a(tmp_path / "s2", "g1"), _fake_a_a(tmp_path / "s2", "g2")
    with pytest.raises(ResultsFileError, match=rf"{copy.resolve()}: the same gate as {first.resolve()} "
                                               r"\(extra.gate_id 20261206-120000-h-0001\)"):
        from_aa_gates([tmp_path / "s2"], "p50_ns")


@pytest.mark.parametrize("damage", ["no gate.json", "gate.json a directory", "no candidate"])
def test_a_stored_gate_killed_or_damaged_is_refused_not_left_out(tmp_path, damage):
    _fake_a_a(tmp_path, "whole")
    hurt = _fake_a_a(tmp_path, "hurt", gate_id="20261206-120001-h-0002")
    if damage == "no candidate":
        (hurt / "candidate").rmdir()
    else:
        (hurt / "gate.json").unlink()
        if damage == "gate.json a directory":
            (hurt / "gate.json").mkdir()
    with pytest.raises(ResultsFileError, match=rf"{hurt}: not a whole gate"):
        gate_dirs([tmp_path])


def test_stored_gates_are_found_a_bounded_depth_below_the_directory_given(tmp_path):
    deep = tmp_path
    for _ in range(GATE_DEPTH - 1):
        deep = deep / "x"
    near = _fake_gate(deep, "near", "a" * 40, "a" * 40)  # GATE_DEPTH levels below tmp_path
    _fake_gate(near / "x", "far", "a" * 40, "a" * 40)  # one deeper: not read
    assert gate_dirs([tmp_path]) == [near.resolve()]


@pytest.mark.slow
@pytest.mark.integration
def test_real_a_a_gates_give_the_next_gate_its_term_and_compare_tests_with_it_again(tmp_repo, tmp_path, capsys):
    from harness.cli import main

    noop = "selftest/fault_rank=0,mode=noop,world=1"
    common = ["gate", "--repo", str(tmp_repo), "--base", "HEAD", "--case", noop, "--budget", "60", "--max-pairs", "8"]
    for i in range(3):
        assert main([*common, "--out", str(tmp_path / "aa" / f"g{i}")]) in (0, 1)
    found, dirs = from_aa_gates([tmp_path / "aa"], "mean_ns")
    assert len(dirs) == 3 and found[noop].gates == 3
    capsys.readouterr()
    out = tmp_path / "with"
    assert main([*common, "--between-gates", str(tmp_path / "aa"), "--out", str(out)]) in (0, 1)
    said = json.loads((out / "gate.json").read_text())
    recorded, expected = said["extra"]["between_gate"][noop], found[noop].to_dict()
    assert recorded["spread"] == pytest.approx(expected.pop("spread"))
    assert {k: v for k, v in recorded.items() if k != "spread"} == pytest.approx(expected)
    assert f"{noop}: between-gate SD" in capsys.readouterr().err
    assert stored(out / "base") == {noop: pytest.approx(found[noop].between_sd_log)}
    # without --between-gates the gate says nothing of it and records none
    plain = json.loads((tmp_path / "aa" / "g0" / "gate.json").read_text())
    assert "between_gate" not in plain["extra"]
    # a directory of no gates is refused before any worktree, naming the option
    assert main([*common, "--between-gates", str(tmp_path / "aa" / "g0" / "base"), "--out", str(tmp_path / "bad")]) == 2
    assert "--between-gates" in json.loads((tmp_path / "bad" / "gate.json").read_text())["error"]
    # a term written into a gate that had none is not the gate's: compare refuses it, naming the
    # field, where it turned a regressed gate's recheck into a pass
    source = next(g for g in (tmp_path / "aa").iterdir()
                  if abs(json.loads((g / "gate.json").read_text())["cases"][0]["detail"].get("z") or 0) > 0)
    planted = tmp_path / "planted"
    shutil.copytree(source, planted)
    said = json.loads((planted / "gate.json").read_text())
    said["extra"]["between_gate"] = {noop: {"between_sd_log": 0.5}}
    (planted / "gate.json").write_text(json.dumps(said))
    capsys.readouterr()
    assert main(["compare", str(planted / "base"), str(planted / "candidate"), "--out", str(tmp_path / "c1")]) == 2
    assert "field extra.between_gate: not the term the gate tested with" in capsys.readouterr().err
    # and the gate's own term reads back and tests as the gate did
    assert main(["compare", str(out / "base"), str(out / "candidate"), "--out", str(tmp_path / "c2")]) in (0, 1)
