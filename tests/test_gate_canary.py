"""``critpath canary``: A/A gates stored on a runner, and the prediction interval that tells a
platform shift from the spread between gates (harness.gate.canary)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.gate.between import GateEstimate
from harness.gate.canary import MIN_BEFORE, judge, predict


def _gates(rng, k: int, tau: float, shift: float = 0.0) -> list[GateEstimate]:
    """k + 1 gates, each with its own offset (SD tau) and within-gate error; the last moved by shift."""
    se = rng.uniform(0.01, 0.03, k + 1)
    x = rng.normal(0.0, tau, k + 1) + rng.normal(0.0, se)
    x[-1] += shift
    return [GateEstimate(Path(f"g{i}"), f"2026120{i // 10}-{i % 10:02d}", float(x[i]), float(se[i]))
            for i in range(k + 1)]


@pytest.mark.parametrize("k, tau", [(6, 0.0), (12, 0.03)])
def test_a_steady_runner_is_called_shifted_at_most_at_alpha(k, tau):
    rng, alpha, trials = np.random.default_rng(7), 0.05, 1000
    shifted = sum(predict(g[:-1], g[-1], alpha).outside(g[-1].estimate_log)
                  for g in (_gates(rng, k, tau) for _ in range(trials)))
    # alpha plus three binomial standard errors of the trials
    assert shifted / trials <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / trials), shifted


def test_a_shift_well_beyond_the_spread_between_gates_is_found():
    rng = np.random.default_rng(8)
    found = sum(predict(g[:-1], g[-1], 0.01).outside(g[-1].estimate_log)
                for g in (_gates(rng, 12, 0.03, shift=0.30) for _ in range(200)))
    assert found >= 190, found


def test_too_few_stored_gates_predict_nothing_and_say_so():
    gates = _gates(np.random.default_rng(1), MIN_BEFORE - 1, 0.0)
    assert predict(gates[:-1], gates[-1], 0.01) is None
    lines, shifted = judge({"c": gates}, gates[-1].gate_dir, 0.01)
    assert not shifted and lines == [f"c: this gate {math.expm1(gates[-1].estimate_log) * 100:+.1f} % (SE "
                                     f"{gates[-1].se_log * 100:.1f} %); not established: {MIN_BEFORE - 1} stored "
                                     f"gate(s) before it, {MIN_BEFORE} needed"]


def test_a_shifted_gate_is_named_and_only_earlier_gates_predict_it():
    gates = _gates(np.random.default_rng(2), 8, 0.0, shift=0.5)
    lines, shifted = judge({"c": gates}, gates[-1].gate_dir, 0.01)
    assert shifted and "OUTSIDE" in lines[0] and "platform shift?" in lines[0] and "the 8 stored gates" in lines[0]
    # judged as the first, the same store predicts nothing: no gate came before it
    lines, shifted = judge({"c": gates}, gates[0].gate_dir, 0.01)
    assert not shifted and "0 stored gate(s) before it" in lines[0]


def test_canary_on_a_store_without_gates_exits_2_naming_it(tmp_path, capsys):
    assert main(["canary", "--store", str(tmp_path), "--no-gate"]) == 2
    assert f"--store: {tmp_path}: no stored gate" in capsys.readouterr().err
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "gate.json").write_text(json.dumps({"base": {"commit": "a" * 40},
                                                          "candidate": {"commit": "b" * 40}}))
    for side in ("base", "candidate"):
        (tmp_path / "a" / side).mkdir()
    assert main(["canary", "--store", str(tmp_path), "--no-gate"]) == 2
    assert "not an A/A gate" in capsys.readouterr().err


def test_canary_holds_its_gate_options_to_the_gate_s_own_bounds(tmp_path, capsys):
    # refused by the canary's parser, naming its own option, not by the gate's parser inside it
    from harness.gate.schedule import MAX_PAIRS

    with pytest.raises(SystemExit) as exc:
        main(["canary", "--store", str(tmp_path), "--max-pairs", str(MAX_PAIRS + 1)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "critpath canary: error: argument --max-pairs" in err and "critpath gate" not in err
