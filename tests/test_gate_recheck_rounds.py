"""compare on a gate's own directories holds each generation to the rounds the gate ran in it
(``extra.plan.rounds``, or ``extra.cut``), numbered round-000 on, none a copy of another, and each
side's generations to the commit gate.json says it was measured at; a gate.json missing is
explained by the gate's claim. Rounds removed or copied on both sides, or the sides swapped,
turned a verdict into another (PASS -6.2 % into FAIL +17.1 %, regressed into improved)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import RUN_FINGERPRINT, GATE_COMMITS, derived_record, finished_gate

from harness.cli import main
from harness.core.store import RESULTS, RunDir, append_record
from harness.gate.outputs import EXIT_COULD_NOT_RUN

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


def _gate(root: Path, rounds: int = 2, generations: int = 10) -> Path:
    """A finished gate of ``rounds`` rounds per generation, each round its own samples."""
    for side, center_ns in (("base", 10_000), ("candidate", 10_100)):
        for gen in range(generations):
            gen_dir = root / side / f"gen-{gen:03d}"
            RunDir(gen_dir, f"{side}-{gen}").write_fingerprint(
                {**RUN_FINGERPRINT, "git": {"commit": GATE_COMMITS[side], "dirty": False}})
            for r in range(rounds):
                (gen_dir / f"round-{r:03d}").mkdir()
                samples = [center_ns + 7 * gen + 3 * r + i for i in range(50)]
                append_record(gen_dir / f"round-{r:03d}" / RESULTS, derived_record(NOOP, samples, run_id=f"{side}-{gen}"))
    return finished_gate(root)


def _compare(gate: Path, out: Path, capsys) -> tuple[int, str]:
    code = main(["compare", str(gate / "base"), str(gate / "candidate"), "--out", str(out)])
    return code, capsys.readouterr().err


def test_a_whole_gate_of_two_rounds_rechecks(tmp_path, capsys):
    code, said = _compare(_gate(tmp_path / "G"), tmp_path / "cm", capsys)
    assert code in (0, 1), said


def test_a_round_removed_from_both_sides_is_refused(tmp_path, capsys):
    # Before: read as pairs of one round each, another estimate, no word.
    gate = _gate(tmp_path / "G")
    for side in ("base", "candidate"):
        shutil.rmtree(gate / side / "gen-003" / "round-001")
    code, said = _compare(gate, tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN
    assert "not whole: gen-003 holds 1 rounds on the base side" in said and "ran 2 (extra.plan.rounds)" in said, said


def test_a_round_missing_between_two_is_refused(tmp_path, capsys):
    gate = _gate(tmp_path / "G", rounds=3)
    for side in ("base", "candidate"):
        shutil.rmtree(gate / side / "gen-001" / "round-001")
    code, said = _compare(gate, tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN
    assert f"not whole: {gate / 'base' / 'gen-001' / 'round-002'}: expected round-001 here" in said, said


def test_a_round_copied_is_refused_even_where_gate_json_counts_it(tmp_path, capsys):
    # Before: round-000 copied as round-001 on both sides of a one-round gate read as 2 rounds per pair.
    gate = _gate(tmp_path / "G", rounds=1)
    for gen_dir in sorted(gate.glob("*/gen-*")):
        shutil.copytree(gen_dir / "round-000", gen_dir / "round-001")
    data = json.loads((gate / "gate.json").read_text())
    data["extra"]["plan"]["rounds"] = 2  # as if the gate had run two
    (gate / "gate.json").write_text(json.dumps(data))
    code, said = _compare(gate, tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN and "a round copied counts one measurement twice" in said, said


def test_more_rounds_than_the_gate_ran_are_refused(tmp_path, capsys):
    gate = _gate(tmp_path / "G", rounds=2)
    data = json.loads((gate / "gate.json").read_text())
    data["extra"]["plan"]["rounds"] = 1
    (gate / "gate.json").write_text(json.dumps(data))
    code, said = _compare(gate, tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN and "a round added, or copied, joins the pair" in said, said


def test_sides_swapped_are_refused_by_their_fingerprints(tmp_path, capsys):
    # Before: a regression read back as an improvement, exit 0.
    gate = _gate(tmp_path / "G")
    (gate / "base").rename(gate / "x")
    (gate / "candidate").rename(gate / "base")
    (gate / "x").rename(gate / "candidate")
    code, said = _compare(gate, tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN
    assert (f"not one gate: {gate / 'base' / 'gen-000' / 'fingerprint.json'} says git commit "
            f"{GATE_COMMITS['candidate']!r}") in said, said


def test_a_missing_gate_json_says_what_the_claim_shows(tmp_path, capsys):
    # Before: "did not finish (killed, or still running)" for a gate that ended on a full disk too.
    gate = _gate(tmp_path / "G")
    (gate / "gate.json").unlink()
    code, said = _compare(gate, tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN and "could not write its outputs (a full disk?" in said, said
    (gate / ".critpath-claim").write_text(json.dumps({"pid": 1, "host": "h", "command": "gate", "started_at": "x"}))
    code, said = _compare(gate, tmp_path / "cm2", capsys)
    assert code == EXIT_COULD_NOT_RUN and "did not finish: it was killed" in said, said
