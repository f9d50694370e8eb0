"""A check its own profile's run cannot satisfy (another algo, world, data type or source than
run.cases measures) is refused when the profile is read, before anything is measured; judging a
stored run (--run) keeps such a check, as the stored run may hold it, except one no run that
passes the profile's pins could hold (a wider world, another backend)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.accept import command
from harness.accept.profile import ProfileError, load_profile
from harness.accept.verdicts import EXIT_UNVERIFIED
from harness.cli import main

ROOT = Path(__file__).parent.parent
CPU_CI = ROOT / "baselines" / "profiles" / "cpu-ci.yaml"
RUN = Path(__file__).parent / "fixtures" / "run_mixed"
NATIVE_8 = "    case: allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,world=2\n"
SELECT = "select: {size_bytes: 1048576, algo: [ring, tree]}"


def _profile(tmp_path: Path, old: str, new: str) -> tuple[Path, str]:
    text = CPU_CI.read_text()
    assert old in text
    text = text.replace(old, new)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path, text


def _line_of(text: str, needle: str) -> int:
    return next(i for i, t in enumerate(text.splitlines(), 1) if needle in t)


@pytest.fixture
def nothing_measured(monkeypatch):
    def refuse(opts):
        raise AssertionError(f"measured {opts.case_ids} though the profile should have been refused")
    monkeypatch.setattr(command, "run", refuse)


@pytest.mark.parametrize("old, new, needle, field, says", [
    (NATIVE_8, NATIVE_8.replace("algo=native", "algo=ring"), "algo=ring,backend=gloo,dtype=float32,size_bytes=8",
     "checks.0.case", "no allreduce record with all of"),
    (NATIVE_8, NATIVE_8.replace("float32", "bfloat16"), "dtype=bfloat16", "checks.0.case",
     "dtype=bfloat16 (the run has float32)"),
    (SELECT, "select: {size_bytes: 1048576, algo: [ring, tree], world: 1}", "world: 1", "checks.1.select",
     "world=1 (the run has 2)"),
    (SELECT, "select: {size_bytes: 8, algo: [ring, tree]}", "size_bytes: 8,", "checks.1.select",
     "no allreduce record with all of"),
    (SELECT, "select: {size_bytes: 1048576, algo: [ring, tree]}\n    sources: [nccl-tests]", "sources:",
     "checks.1.sources", "the profile's run gives records from critpath; this check accepts only nccl-tests"),
    (SELECT, "select: {size_bytes: 1048576, algo: [ring, tree]}\n    relative_to: {algo: native, size_bytes: 4096}",
     "relative_to:", "checks.1.relative_to", "no case of run.cases is the reference"),
], ids=["algo", "dtype", "world", "size", "sources", "relative_to"])
def test_a_check_the_profiles_run_cannot_satisfy_is_refused_before_measuring(
        tmp_path, capsys, nothing_measured, old, new, needle, field, says):
    path, text = _profile(tmp_path, old, new)
    out = tmp_path / "out"
    assert main(["accept", "--profile", str(path), "--out", str(out), "--no-report"]) == EXIT_UNVERIFIED
    err = capsys.readouterr().err
    assert f"p.yaml:{_line_of(text, needle)}: field {field}: " in err, err
    assert says in err, err
    assert "run.cases measures allreduce/algo=native" in err or field == "checks.1.sources", err
    assert not out.exists()


def test_judging_a_stored_run_keeps_a_check_the_profiles_run_lacks(tmp_path, capsys):
    """The stored run may hold what the profile's own run.cases do not: judged, not refused."""
    path, _ = _profile(tmp_path, NATIVE_8, NATIVE_8.replace("size_bytes=8", "size_bytes=4096"))
    with pytest.raises(ProfileError):
        load_profile(path, measuring=True)
    load_profile(path)
    out = tmp_path / "out"
    main(["accept", "--profile", str(path), "--run", str(RUN), "--out", str(out), "--no-report"])
    verdict = json.loads((out / "acceptance.json").read_text())
    assert verdict["checks"][0]["name"] == "allreduce 8 B p99" and verdict["checks"][0]["verdict"] != "could not verify"


@pytest.mark.parametrize("old, new, needle, field, says", [
    (SELECT, "select: {size_bytes: 1048576, algo: [ring, tree], world: [4, 8]}", "world: [4, 8]",
     "checks.1.select.world", "world 4|8 is wider than the profile's world 2"),
    (NATIVE_8, NATIVE_8.replace("backend=gloo", "backend=nccl"), "backend=nccl", "checks.0.case",
     "backend nccl, but the profile pins backend gloo"),
], ids=["world", "backend"])
def test_a_check_no_run_passing_the_pins_could_hold_is_refused_when_judging_too(
        tmp_path, capsys, old, new, needle, field, says):
    path, text = _profile(tmp_path, old, new)
    out = tmp_path / "out"
    assert main(["accept", "--profile", str(path), "--run", str(RUN), "--out", str(out), "--no-report"]) == EXIT_UNVERIFIED
    err = capsys.readouterr().err
    assert f"p.yaml:{_line_of(text, needle)}: field {field}: {says}" in err, err
    assert not (out / "acceptance.json").exists()  # refused before the run was judged


def test_a_check_accepting_another_data_type_of_a_run_case_loads(tmp_path):
    path, _ = _profile(tmp_path, NATIVE_8, NATIVE_8.replace("float32", "bfloat16") + "    dtypes: [bfloat16, float32]\n")
    assert load_profile(path, measuring=True)["checks"][0]["dtypes"] == ["bfloat16", "float32"]


def test_a_profile_without_run_cases_is_refused_before_measuring(tmp_path, capsys, nothing_measured):
    text = CPU_CI.read_text()
    start, end = text.index("run:\n"), text.index("checks:\n")
    path = tmp_path / "p.yaml"
    path.write_text(text[:start] + text[end:])
    assert main(["accept", "--profile", str(path), "--no-report", "--out", str(tmp_path / "out")]) == EXIT_UNVERIFIED
    assert "p.yaml:1: field run: profile 'cpu-ci' has no run.cases" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted((ROOT / "baselines" / "profiles").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_profile_loads_to_measure_and_each_check_has_a_run_case(path):
    from harness.accept.coverage import planned_cases
    from harness.accept.match import means

    profile = load_profile(path, measuring=True)
    cases = planned_cases(profile)
    assert len(cases) == len(profile["run"]["cases"])
    for check in profile["checks"]:
        assert any(means(case, case.id, check) for case in cases), check["name"]
