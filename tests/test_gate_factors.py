"""The factors a gate draws anew per pair (environment size, hash seed), alternates (start order)
or holds equal (the checkouts' path length), what --toggle holds fixed instead, and that each
pair's draw reaches the processes of that pair and is recorded."""
from __future__ import annotations

import json
import stat
import sys
from types import SimpleNamespace

import pytest
from conftest import derived_record, run_cli

from harness.gate import schedule
from harness.gate.factors import (ENV_PAD_VAR, FACTORS, MAX_ENV_PAD_BYTES, MAX_HASH_SEED, TOGGLED_TREE_PATH_BYTES,
                                  PairFactors, SideFactors, tree_prefix)
from harness.gate.schedule import Plan, Schedule
from harness.gate.sides import RoundResult, SideError, WorkerSide
from harness.gate.trees import BASE, CANDIDATE, TREE_PREFIX, Tree

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


def test_each_side_of_each_pair_gets_its_own_environment_size_and_hash_seed():
    factors = PairFactors(seed=7)
    draws = [factors.draw(g)[1] for g in range(40)]
    pads = [d[s].env_pad_bytes for d in draws for s in (BASE, CANDIDATE)]
    seeds = [d[s].hash_seed for d in draws for s in (BASE, CANDIDATE)]
    assert all(0 <= p <= MAX_ENV_PAD_BYTES for p in pads) and all(0 <= s <= MAX_HASH_SEED for s in seeds)
    assert len(set(pads)) > 70 and len(set(seeds)) == 80  # drawn, not fixed per gate or per side
    assert [factors.pairs[g]["first"] for g in range(4)] == [BASE, CANDIDATE, BASE, CANDIDATE]
    assert factors.to_dict()["toggled"] is None
    assert PairFactors(seed=7).draw(0) == PairFactors(seed=7).draw(0)  # the gate's seed makes it repeatable


@pytest.mark.parametrize("toggle, held", [
    ("env_size", lambda d: (d[BASE].env_pad_bytes, d[CANDIDATE].env_pad_bytes) == (0, MAX_ENV_PAD_BYTES)),
    ("hash_seed", lambda d: (d[BASE].hash_seed, d[CANDIDATE].hash_seed) == (0, 1)),
])
def test_a_toggled_factor_is_held_at_one_value_per_side_for_the_whole_gate(toggle, held):
    factors = PairFactors(seed=1, toggle=toggle)
    assert all(held(factors.draw(g)[1]) for g in range(10))
    assert factors.to_dict()["handling"][toggle].endswith("(toggled)")


def test_a_toggled_start_order_starts_the_base_first_in_every_pair():
    factors = PairFactors(seed=1, toggle="start_order")
    assert {factors.draw(g)[0] for g in range(6)} == {(BASE, CANDIDATE)}


def test_an_unknown_factor_is_refused_naming_the_factors():
    with pytest.raises(ValueError, match="no such factor; the factors are env_size, hash_seed"):
        PairFactors(seed=0, toggle="moon_phase")


def test_both_checkouts_directories_are_the_same_length_unless_the_tree_path_is_toggled():
    assert len(tree_prefix(BASE, None)) == len(tree_prefix(CANDIDATE, None))
    assert tree_prefix(BASE, None).startswith(TREE_PREFIX) and tree_prefix(CANDIDATE, None).startswith(TREE_PREFIX)
    assert len(tree_prefix(CANDIDATE, "tree_path")) - len(tree_prefix(BASE, "tree_path")) == TOGGLED_TREE_PATH_BYTES
    assert tree_prefix(BASE, "env_size") == tree_prefix(BASE, None)


class _Side:
    """Records what environment each side of each pair was started with."""

    seen: list = []

    def __init__(self, tree, side, number, run_dir, run_args, extra_env=None) -> None:
        self.side, self.number, self.run_dir = side, number, run_dir
        _Side.seen.append((number, side, dict(extra_env)))

    def start(self):
        pass

    def await_ready(self, timeout_s):
        pass

    prepare = await_prepared = await_ready

    def run_round(self, number, cases, timeout_s):
        records = {c.case_id: derived_record(c.case_id, [1000 + number] * 20) for c in cases}
        return RoundResult(self.side, self.number, number, self.run_dir, 0.1, records)

    def stop(self):
        pass

    kill = stop


def test_each_pair_starts_its_sides_with_that_pairs_draw_and_the_result_records_it(monkeypatch, tmp_path):
    monkeypatch.setattr(schedule, "WorkerSide", _Side)
    _Side.seen = []
    undecided = SimpleNamespace(outcome=None)
    plan = Plan(budget_s=1e6, max_pairs=3, toggle=None)
    result = Schedule([NOOP], {BASE: None, CANDIDATE: None}, "worker", plan, tmp_path, "mean_ns",
                      lambda tau, pairs, final: {c: undecided for c in pairs}).run()
    pairs = result.summary()["factors"]["pairs"]
    assert [p["generation"] for p in pairs] == [0, 1, 2]
    for number, side, env in _Side.seen:
        drawn = pairs[number][side]
        assert env == SideFactors(drawn["env_pad_bytes"], drawn["hash_seed"]).env()
    assert [s for n, s, _ in _Side.seen if n == 1] == [CANDIDATE, BASE]  # the second pair starts the candidate first


def test_the_draw_reaches_the_process_a_side_starts(tmp_path):
    """A real process: the side's interpreter is a script that writes its environment down."""
    dump = tmp_path / "env.json"
    script = tmp_path / "python"
    script.write_text(f"#!{sys.executable}\nimport json, os\njson.dump(dict(os.environ), open({str(dump)!r}, 'w'))\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    drawn = SideFactors(env_pad_bytes=123, hash_seed=42)
    side = WorkerSide(Tree(BASE, "HEAD", tmp_path, None), BASE, 0, tmp_path / "gen", {"timeout_s": 5.0},
                      python=str(script), extra_env=drawn.env())
    side.start()
    with pytest.raises(SideError):
        side.await_ready(10.0)  # it exits without the worker's ready line
    side.kill()
    env = json.loads(dump.read_text())
    assert env[ENV_PAD_VAR] == "x" * 123 and env["PYTHONHASHSEED"] == "42"


def test_the_gate_refuses_a_toggle_it_cannot_apply(tmp_path):
    done = run_cli("gate", "--base", "HEAD", "--toggle", "tree_path", "--case", NOOP, "--out", str(tmp_path / "g"))
    assert done.returncode == 2 and "--toggle tree_path: the candidate must be a ref" in done.stderr, done.stderr
    done = run_cli("gate", "--base", "HEAD", "--toggle", "moon_phase", "--case", NOOP)
    assert done.returncode == 2 and "invalid choice: 'moon_phase'" in done.stderr
    assert set(FACTORS) == {"env_size", "hash_seed", "start_order", "tree_path"}
    done = run_cli("gate-power", "--case", NOOP, "--toggles", "env_size,moon_phase", "--out", str(tmp_path / "p"))
    assert done.returncode == 2 and "no such factor: moon_phase" in done.stderr, done.stderr
    assert not (tmp_path / "p").exists()


def _doc(offset_log: float, gates: int = 6, seed: int = 3) -> dict:
    """A measurement of A/A gates of one case, nothing toggled and env_size toggled; the toggled
    gates' estimates moved by ``offset_log``; each gate's estimate drawn from its own SE."""
    import numpy as np

    from harness.gatepower.power import AA

    rng = np.random.default_rng(seed)
    cells = [{"name": f"c: {AA}, {t or 'nothing'} toggled", "case_ids": [NOOP], "condition": AA, "candidate": "x",
              "target": None, "rounds": None, "toggle": t, "measure_only": True} for t in (None, "env_size")]
    trials = []
    for cell, shift in zip(cells, (0.0, offset_log)):
        for trial in range(gates):
            noise, pairs = 0.10, 100  # SE of the estimate about 1 %
            estimate = shift + rng.normal(0, noise / np.sqrt(pairs))
            trials.append({"cell": cell["name"], "trial": trial, "exit_code": 0, "wall_s": 1.0,
                           "cases": {NOOP: {"ratio": float(np.exp(estimate)), "noise_per_pair": noise,
                                            "n_pairs": pairs}}})
    return {"cells": cells, "trials": trials}


@pytest.mark.parametrize("offset, excludes_zero", [(0.0, False), (0.05, True)])
def test_a_factor_that_moves_a_whole_gate_is_told_from_one_that_does_not(offset, excludes_zero):
    from harness.gatepower.power import toggle_effects

    (row,) = toggle_effects(_doc(offset))
    low, high = row["ci"]
    assert (not low <= 0.0 <= high) == excludes_zero, row
    assert low <= offset <= high and row["gates"] == [6, 6]


def test_a_toggle_with_too_few_gates_is_not_established():
    from harness.gatepower.power import _toggle_table, toggle_effects

    doc = _doc(0.05, gates=1)
    assert toggle_effects(doc)[0]["difference"] is None
    assert "not established: fewer than 2 gates on a side" in "\n".join(_toggle_table(doc, {NOOP: "C1"}))
