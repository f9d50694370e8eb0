"""A gate's own files (gate.json, gate.xml, gate.md beside its base/ and candidate/, and each
generation's gate-id) are written by that gate alone, and a compare's --out never overlaps a side
it reads: either would leave a result among the records it was made from, or a finished gate that
could no longer be rechecked."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import another_run, gate_out, run_with_an_unverified_figure
from harness.cli import main
from harness.gate.outputs import output_paths

GENERATIONS = 10


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    a = run_with_an_unverified_figure(tmp_path / "A", run_id="run-a")
    return a, another_run(a, tmp_path / "B", "run-b")


def _snapshot(gate: Path) -> dict:
    files = [*output_paths(gate).values(), gate / "base" / "gen-000" / "gate-id"]
    return {path: path.read_bytes() for path in files}


def _rechecks(gate: Path, tmp_path: Path, capsys) -> None:
    assert main(["compare", str(gate / "base"), str(gate / "candidate"), "--out", str(tmp_path / "recheck")]) != 2, \
        capsys.readouterr().err


@pytest.mark.parametrize("command", [
    ["compare", "{a}", "{b}", "--out", "{gate}"],  # was exit 0, gate.json replaced: the gate no longer rechecked
    ["export", "{a}", "--format", "json", "--out", "{gate}/gate.json"],
    ["export", "{a}", "--format", "csv", "--out", "{gate}/gate.md"],
    ["export", "{a}", "--format", "json", "--out", "{gate}/base/gen-000/gate-id"],
])
def test_no_other_command_writes_a_finished_gates_files(tmp_path, capsys, command):
    gate = gate_out(tmp_path / "G", GENERATIONS)
    a, b = _runs(tmp_path)
    before = _snapshot(gate)
    args = [part.format(a=a, b=b, gate=gate) for part in command]
    assert main(args) == 2
    said = capsys.readouterr().err
    assert str(gate) in said and "gate" in said and ("only that gate writes" in said or "only the gate" in said), said
    assert _snapshot(gate) == before
    _rechecks(gate, tmp_path, capsys)


def test_a_gate_file_named_outside_a_gates_directory_is_an_ordinary_output(tmp_path, capsys):
    a, _ = _runs(tmp_path)
    (tmp_path / "plain" / "base").mkdir(parents=True)  # one side only: no gate's directory
    assert main(["export", str(a), "--format", "json", "--out", str(tmp_path / "plain" / "gate.json")]) == 0
    assert json.loads((tmp_path / "plain" / "gate.json").read_text())


def test_a_gate_into_a_finished_gates_directory_is_refused_naming_the_gate(tmp_path, capsys, tmp_repo):
    gate = gate_out(tmp_path / "G", GENERATIONS)
    before = _snapshot(gate)
    assert main(["gate", "--repo", str(tmp_repo), "--base", "HEAD", "--out", str(gate)]) == 2
    said = capsys.readouterr().err
    assert f"--out {gate} is the directory of a gate" in said, said
    assert _snapshot(gate) == before


@pytest.mark.parametrize("out, how, side", [
    ("{a}", "is", "base"),  # was exit 0: gate.json, gate.xml, gate.md beside run A's records
    ("{b}/more", "lies inside", "candidate"),
    ("{gate}/base", "is", "base"),  # was exit 0: the result written inside the gate being read
    ("{gate}/candidate/gen-000", "lies inside", "candidate"),
])
def test_a_compare_out_that_overlaps_a_side_is_refused_before_anything_runs(tmp_path, capsys, out, how, side):
    gate = gate_out(tmp_path / "G", GENERATIONS)
    a, b = _runs(tmp_path)
    sides = (gate / "base", gate / "candidate") if "{gate}" in out else (a, b)
    out = Path(out.format(a=a, b=b, gate=gate))
    before = _snapshot(gate)
    assert main(["compare", str(sides[0]), str(sides[1]), "--out", str(out)]) == 2
    said = capsys.readouterr().err
    named = sides[0] if side == "base" else sides[1]
    assert f"--out {out} {how} the {side} side {named}" in said, said
    assert not any((out / name).exists() for name in ("gate.json", "gate.xml", "gate.md"))
    assert _snapshot(gate) == before


def test_a_compare_out_that_holds_a_side_is_refused(tmp_path, capsys):
    a, _ = _runs(tmp_path)
    b = another_run(a, tmp_path / "sub" / "B", "run-c")
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "sub")]) == 2
    assert f"--out {tmp_path / 'sub'} holds the candidate side {b}" in capsys.readouterr().err
    assert not (tmp_path / "sub" / "gate.json").exists()


def test_a_compare_out_beside_its_sides_is_written(tmp_path, capsys):
    a, b = _runs(tmp_path)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) in (0, 1)
    assert (tmp_path / "out" / "gate.json").is_file()
