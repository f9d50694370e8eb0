"""compare on a gate's own directories reads them back only as all of one gate that finished:
gate.json as a gate writes it when it ends (exit code, headline and error agreeing, both sides
measured), on each side exactly the generations it counts, numbered without a gap and each holding
its gate's ID, and the pairs per case it reports; otherwise refused as not whole, exit 2, naming
what disagrees. Deleting generations, or bringing sides or a generation of another gate, would pick
which pairs decide."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import finished_gate, gate_out

from harness.cli import main
from harness.gate.outputs import EXIT_COULD_NOT_RUN
from harness.gate.schedule import GATE_ID_FILE

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
GENERATIONS = 10


def _compare(base: Path, cand: Path, out: Path, capsys) -> tuple[int, str]:
    code = main(["compare", str(base), str(cand), "--out", str(out)])
    said = capsys.readouterr().err
    if code == EXIT_COULD_NOT_RUN:
        assert json.loads((out / "gate.json").read_text())["cases"] == [], said  # no verdict read from it
    return code, said


def _edited(gate: Path, **fields) -> Path:
    data = json.loads((gate / "gate.json").read_text())
    data.update(fields)
    (gate / "gate.json").write_text(json.dumps(data))
    return gate


def test_a_whole_gate_rechecks_to_a_verdict(tmp_path, capsys):
    gate = gate_out(tmp_path / "G", GENERATIONS)
    code, said = _compare(gate / "base", gate / "candidate", tmp_path / "cm", capsys)
    assert code in (0, 1), said


@pytest.mark.parametrize("document", [{}, {"error": ""}])
def test_a_gate_json_that_is_no_gates_result_is_refused(tmp_path, capsys, document):
    # Before: read as a finished gate, exit 0 with a verdict.
    gate = gate_out(tmp_path / "G", GENERATIONS)
    (gate / "gate.json").write_text(json.dumps(document))
    code, said = _compare(gate / "base", gate / "candidate", tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN
    assert f"not whole: {gate / 'gate.json'}: schema None, expected 'critpath.gate/1'" in said, said


def test_a_stopped_gate_with_its_error_cleared_is_refused_by_its_headline(tmp_path, capsys):
    # Before: only `error` was read; exit_code 2, the unmeasured sides and the headline were not.
    gate = gate_out(tmp_path / "G", GENERATIONS)
    stopped = "interrupted by SIGTERM; worktrees and processes were removed"
    finished_gate(gate, error=stopped)
    _edited(gate, error="")
    code, said = _compare(gate / "base", gate / "candidate", tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN
    assert f"headline 'could not run: {stopped}' is not what its error and cases make ('COULD NOT RUN: no cases')" \
        in said, said


def test_an_exit_code_its_cases_do_not_make_is_refused(tmp_path, capsys):
    gate = _edited(gate_out(tmp_path / "G", GENERATIONS), exit_code=1)
    code, said = _compare(gate / "base", gate / "candidate", tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN and "exit_code 1 is not what its error and cases make (0)" in said, said


def test_a_side_the_gate_did_not_measure_is_refused(tmp_path, capsys):
    gate = gate_out(tmp_path / "G", GENERATIONS)
    _edited(gate, base={"ref": "HEAD~1", "measured": False})
    code, said = _compare(gate / "base", gate / "candidate", tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN and f"incomplete: {gate / 'gate.json'}: base " in said, said


def test_a_generation_deleted_from_both_sides_is_refused(tmp_path, capsys):
    # Before: exit 0, "9 pairs read back", another estimate, and no word of the gap.
    gate = gate_out(tmp_path / "G", GENERATIONS)
    for side in ("base", "candidate"):
        shutil.rmtree(gate / side / "gen-005")
    code, said = _compare(gate / "base", gate / "candidate", tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN
    assert (f"not whole: {gate / 'gate.json'} says extra.generations: 10, and {gate / 'base'} holds 9 generation "
            "directories: gen-005 is missing after gen-004 and before gen-006") in said, said


def test_the_last_generation_deleted_or_one_added_is_refused(tmp_path, capsys):
    gate = gate_out(tmp_path / "G", GENERATIONS)
    for side in ("base", "candidate"):
        shutil.rmtree(gate / side / "gen-009")
    code, said = _compare(gate / "base", gate / "candidate", tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN and "holds 9 generation directories: gen-009 is missing after gen-008;" in said
    for side in ("base", "candidate"):
        shutil.copytree(gate / side / "gen-008", gate / side / "gen-009")
        shutil.copytree(gate / side / "gen-008", gate / side / "gen-010")
    code, said = _compare(gate / "base", gate / "candidate", tmp_path / "cm2", capsys)
    assert code == EXIT_COULD_NOT_RUN and "holds 11 generation directories: gen-010 is not one of them" in said, said


def test_pairs_of_a_case_other_than_gate_json_reports_are_refused(tmp_path, capsys):
    gate = gate_out(tmp_path / "G", GENERATIONS)
    data = json.loads((gate / "gate.json").read_text())
    data["cases"][0]["comparison"]["n_cand"] = 11
    (gate / "gate.json").write_text(json.dumps(data))
    code, said = _compare(gate / "base", gate / "candidate", tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN
    assert f"says {NOOP} was tested on n_cand: 11, and the generations on disk give 10 pairs" in said, said


def test_the_sides_of_two_gates_are_refused(tmp_path, capsys):
    # Before: exit 0, a paired signed-rank test on pairs never measured together.
    one, two = gate_out(tmp_path / "G1", GENERATIONS), gate_out(tmp_path / "G6", GENERATIONS)
    code, said = _compare(one / "base", two / "candidate", tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN
    assert f"not one gate: {one / 'base'} and {two / 'candidate'} are not the base/ and candidate/ of one" in said
    code, said = _compare(one / "candidate", one / "base", tmp_path / "cm2", capsys)  # the sides swapped
    assert code == EXIT_COULD_NOT_RUN and "not one gate" in said, said


@pytest.mark.parametrize("what", ["a side", "a generation"])
def test_a_side_or_a_generation_of_another_gate_is_refused_by_the_gate_id(tmp_path, capsys, what):
    one, two = gate_out(tmp_path / "G1", GENERATIONS), gate_out(tmp_path / "G6", GENERATIONS)
    (two / "gate.json").write_text((two / "gate.json").read_text().replace(
        json.loads((two / "gate.json").read_text())["extra"]["gate_id"], "20260102-000000-test-ffff"))
    for held in two.glob(f"*/gen-*/{GATE_ID_FILE}"):
        held.write_text("20260102-000000-test-ffff\n")
    moved = two / "candidate" if what == "a side" else two / "candidate" / "gen-003"
    into = one / "candidate" if what == "a side" else one / "candidate" / "gen-003"
    shutil.rmtree(into)
    shutil.copytree(moved, into)
    code, said = _compare(one / "base", one / "candidate", tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN
    first = "gen-000" if what == "a side" else "gen-003"
    assert (f"not one gate: {one / 'candidate' / first / GATE_ID_FILE} names gate '20260102-000000-test-ffff' where "
            f"{one / 'gate.json'} names gate ") in said, said


def test_a_gate_from_before_gate_ids_is_held_to_its_count_only_and_a_lost_id_is_refused(tmp_path, capsys):
    gate = gate_out(tmp_path / "G", GENERATIONS)
    (gate / "base" / "gen-004" / GATE_ID_FILE).unlink()
    code, said = _compare(gate / "base", gate / "candidate", tmp_path / "cm", capsys)
    assert code == EXIT_COULD_NOT_RUN and f"{gate / 'base' / 'gen-004' / GATE_ID_FILE} is missing where" in said
    data = json.loads((gate / "gate.json").read_text())
    del data["extra"]["gate_id"]  # as a gate written before its ID writes it, with no ID in its generations
    (gate / "gate.json").write_text(json.dumps(data))
    for held in gate.glob(f"*/gen-*/{GATE_ID_FILE}"):
        held.unlink()
    code, said = _compare(gate / "base", gate / "candidate", tmp_path / "cm2", capsys)
    assert code in (0, 1), said
