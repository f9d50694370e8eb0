"""An nccl-tests log that says a thing twice, or says it and critpath drops it: a second cycle, a
second trailer line, a row of another type within a sweep, -J's own bandwidth verdict and NCCL's
last error, and line numbers that count only what ends a line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main

NT = Path(__file__).parent / "fixtures" / "nccl_tests"
TEXT_LINES = (NT / "all_reduce_h100.txt").read_text().split("\n")
OOB_LINE, AVG_LINE = 27, 28  # 1-based lines of the fixture's trailer
PROFILE = ("schema: critpath.accept/1\nname: imported\nworld: 8\n"
           "checks:\n  - {name: busbw 128M, family: allreduce, select: {size_bytes: 134217728}, "
           "statistic: busbw_gbps, min: 380, source: t}\n")


def _text(tmp_path: Path, lines: list[str], name: str = "log.txt") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines))
    return path


def _json(tmp_path: Path, edit) -> Path:
    data = json.loads((NT / "all_reduce_h100.json").read_text())
    edit(data)
    path = tmp_path / "log.json"
    path.write_text(json.dumps(data))
    return path


def _refused(tmp_path: Path, capsys, path: Path) -> str:
    capsys.readouterr()
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()
    return capsys.readouterr().err


def test_a_text_log_of_two_cycles_is_refused_naming_where_the_second_starts(tmp_path, capsys):
    # Before: exit 0, and a run every reader refused as "a case recorded more than once"
    lines = list(TEXT_LINES)
    lines[26:26] = TEXT_LINES[17:26]  # nccl-tests -N 2: the whole sweep again
    path = _text(tmp_path, lines)
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:27: a second cycle starts here: 8 B of type float" in err and f"first on {path}:18" in err, err
    assert "Import a log of one cycle" in err


def test_a_json_log_listing_its_results_twice_is_refused(tmp_path, capsys):
    path = _json(tmp_path, lambda d: d.update(results=d["results"] * 2))
    err = _refused(tmp_path, capsys, path)
    assert f"{path}: results[9]: a second cycle starts here" in err and "results[0]" in err, err


@pytest.mark.parametrize("at, line, label", [(OOB_LINE - 1, "# Out of bounds values : 5 FAILED", "Out of bounds values"),
                                             (OOB_LINE, "# Out of bounds values : 5 FAILED", "Out of bounds values"),
                                             (AVG_LINE, "# Avg bus bandwidth    : 500 ", "Avg bus bandwidth")])
def test_a_second_trailer_line_is_refused_naming_both(tmp_path, capsys, at, line, label):
    # Before: the last one won, so a FAILED data check followed by an OK one imported as agreeing
    lines = list(TEXT_LINES)
    lines.insert(at, line)
    path = _text(tmp_path, lines)
    err = _refused(tmp_path, capsys, path)
    first = OOB_LINE if label.startswith("Out") else AVG_LINE
    assert f"{path}:{first + 1}: a second '# {label}' line (the first on line {first})" in err, err


@pytest.mark.parametrize("edit, field", [(lambda r: r.replace("33554432     float", "67108864      half"), "type"),
                                         (lambda r: r.replace("float", "int32"), "type"),
                                         (lambda r: r.replace(" sum ", " max "), "redop")])
def test_a_row_of_another_type_or_reduction_within_a_sweep_is_refused(tmp_path, capsys, edit, field):
    lines = list(TEXT_LINES)
    lines[25] = edit(lines[25])
    path = _text(tmp_path, lines)
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:26: {field} is " in err and f"the row before it ({path}:25)" in err, err


def test_a_json_row_of_another_reduction_within_a_sweep_is_refused(tmp_path, capsys):
    path = _json(tmp_path, lambda d: d["results"][8].update(redop="max"))
    err = _refused(tmp_path, capsys, path)
    assert f"{path}: results[8]: redop is max, but the row before it ({path}: results[7])" in err, err


def _min_bw(bound: str, okay: str):
    def edit(data):
        data["env"].append(f"NCCL_TESTS_MIN_BW={bound}")
        data["average_bus_bandwidth"]["okay"] = okay
    return edit


def test_a_json_bandwidth_check_that_failed_is_reported_and_no_reader_passes_it(tmp_path, capsys):
    # Before: exit 0, the flag dropped; accept PASS, diagnose healthy
    path = _json(tmp_path, _min_bw("1000", "false"))
    run = tmp_path / "run"
    assert main(["import-nccl-tests", str(path), "--out", str(run)]) == 1
    assert "nccl-tests' own bandwidth check of the average 102.083 GB/s against 0.9 x NCCL_TESTS_MIN_BW 1000 GB/s: " \
           "FAILED" in capsys.readouterr().err
    assert main(["show", str(run)]) == 1
    assert "FAILED: field average_bus_bandwidth.okay" in capsys.readouterr().out
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE)
    assert main(["accept", "--profile", str(profile), "--run", str(run), "--no-report",
                 "--out", str(tmp_path / "acc")]) == 2
    assert main(["diagnose", str(run)]) != 0
    assert "0 healthy" in capsys.readouterr().out
    trailer = json.loads((run / "run.json").read_text())["trailer"]
    assert trailer["avg_busbw_okay"] is False and trailer["avg_busbw_bound_gbps"] == 1000


@pytest.mark.parametrize("edit, said", [
    (lambda d: d["average_bus_bandwidth"].update(okay="false"), "but field env sets no NCCL_TESTS_MIN_BW"),
    (_min_bw("1000", "true"), "but the average 102.083 GB/s is below 0.9 x NCCL_TESTS_MIN_BW 1000"),
    (_min_bw("100", "false"), "but the average 102.083 GB/s is at or above 0.9 x NCCL_TESTS_MIN_BW 100"),
    (_min_bw("1000", "unchecked"), "sets NCCL_TESTS_MIN_BW to 1000: nccl-tests checks the average")])
def test_a_json_bandwidth_verdict_its_env_or_average_contradicts_is_refused(tmp_path, capsys, edit, said):
    path = _json(tmp_path, edit)
    err = _refused(tmp_path, capsys, path)
    assert f"{path}: field average_bus_bandwidth.okay is " in err and said in err, err


def test_a_json_bandwidth_check_that_passed_imports_and_says_so(tmp_path, capsys):
    path = _json(tmp_path, _min_bw("100", "true"))
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 0
    assert "against 0.9 x NCCL_TESTS_MIN_BW 100 GB/s: passed" in capsys.readouterr().out


def test_nccl_s_last_error_in_json_is_kept_and_shown_not_refused(tmp_path, capsys):
    # Before: type-checked, then found nowhere (run.json, show, report)
    message = "NCCL failure common.cu:1000 unhandled cuda error"
    path = _json(tmp_path, lambda d: d.update(errors=[message]))
    run = tmp_path / "run"
    assert main(["import-nccl-tests", str(path), "--out", str(run)]) == 0
    assert message in capsys.readouterr().out
    assert json.loads((run / "run.json").read_text())["trailer"]["nccl_errors"] == [message]
    assert main(["show", str(run)]) == 0
    assert message in capsys.readouterr().out
    main(["report", str(run), "--out", str(tmp_path / "rep")])
    assert message in (tmp_path / "rep" / "report.md").read_text()


@pytest.mark.parametrize("odd", ["\x0c", "\x0b", "\x1c", "\u0085", "\u2028", "\u2029"])
def test_a_line_break_only_str_splitlines_knows_does_not_shift_line_numbers(tmp_path, capsys, odd):
    lines = list(TEXT_LINES)
    lines[3] = "#" + odd
    words = lines[25].split()
    words[9] = "-538.62"
    lines[25] = "  ".join(words)
    path = _text(tmp_path, lines)
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:26: in-place time (us) is -538.62" in err, err


def test_a_lone_cr_still_ends_a_line(tmp_path, capsys):
    text = "\n".join(TEXT_LINES).replace("\n", "\r", 3)  # the first three lines ended by a lone CR
    words = text.split("\n")
    row = words[25 - 3].split()
    row[9] = "-538.62"
    words[25 - 3] = "  ".join(row)
    path = tmp_path / "cr.txt"
    path.write_text("\n".join(words), newline="")
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:26: in-place time (us) is -538.62" in err, err
