"""An nccl-tests text log's header held to its rows: minBytes, maxBytes and step fix the size of
every row (src/common.cu, TimeTest and setupArgs), agg iters is bounded as iters is, and each
'#  Rank' line's Group and Pid are read by the one integer grammar. Each refusal is built by
editing one field of a real public log."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_fifth_probe_walk import PUBLIC_LOG, _edited_log

from harness.cli import main
from harness.core.scale import PID_MAX
from harness.nccltests.limits import MAX_AGG_ITERS, MAX_GROUP

HEADER = 1  # "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) ... agg iters: 1 ..."
RANK_0 = 4  # "#  Rank  0 Group  0 Pid   6899 on ztan-mig-235z device  0 ..."
SIZES = "minBytes 8 maxBytes 8589934592 "
SWEEP = "the sweep of line 1"
PUBLIC_JSON = PUBLIC_LOG.parent / "azure_ndv5_h100_allreduce_8rank_jsonv3_prettyprinted.json"


def _refused(tmp_path: Path, capsys, path: Path) -> str:
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and not (tmp_path / "run").exists()
    return err


@pytest.mark.parametrize("line, old, new, at, message", [
    # 1: nccl-tests refuses minBytes > maxBytes before it prints its header
    (HEADER, SIZES, "minBytes 1024 maxBytes 64 ", HEADER, "minBytes 1024 is more than maxBytes 64"),
    # 1: every row below minBytes, or above maxBytes: the first row is not the sweep's first size
    (HEADER, SIZES, "minBytes 17179869184 maxBytes 34359738368 ", 24,
     f"size (B) is 8, but {SWEEP} (minBytes 17179869184, step: 2(factor)) is at 17179869184 B here"),
    (HEADER, SIZES, "minBytes 1 maxBytes 4 ", 24,
     f"size (B) is 8, but {SWEEP} (minBytes 1, step: 2(factor)) is at 1 B"),
    (HEADER, SIZES, "minBytes 0x8 maxBytes 8589934592 ", HEADER, "minBytes: expected an integer"),
    # 2: util.cu prints "factor" only for a factor above 1; a bytes step of 0 never leaves minBytes
    (HEADER, "step: 2(factor)", "step: 0(factor)", HEADER, "step (factor): 0 is outside the range it may take (from 2"),
    (HEADER, "step: 2(factor)", "step: 1(factor)", HEADER, "step (factor): 1 is outside the range it may take (from 2"),
    (HEADER, "step: 2(factor)", "step: 0(bytes)", HEADER, "step (bytes): 0 is outside the range it may take (from 1"),
    (HEADER, "step: 2(factor)", "step: 2(percent)", HEADER, "step is '2(percent)'; nccl-tests prints a count then"),
    # 3: rows that double beside a step they cannot have come from: 8, 16, then 24, not 32
    (HEADER, "step: 2(factor)", "step: 8(bytes)", 26,
     f"size (B) is 32, but {SWEEP} (minBytes 8, step: 8(bytes)) is at 24 B here, which nccl-tests prints "
     "for all_reduce as 24"),
    (HEADER, "step: 2(factor)", "step: 4(factor)", 25,
     f"size (B) is 16, but {SWEEP} (minBytes 8, step: 4(factor)) is at 32 B"),
    # 3: one row's size changed (its count with it, so that the row's own shape still holds)
    (31, "        1024           256 ", "        1536           384 ", 31,
     f"size (B) is 1536, but {SWEEP} (minBytes 8, step: 2(factor)) is at 1024 B here"),
    # 4: agg iters bounded as iters is
    (HEADER, "agg iters: 1 ", "agg iters: 99999999999 ", HEADER,
     f"agg iters: 99999999999 is outside the range it may take (from 1 to {MAX_AGG_ITERS})"),
    (HEADER, "agg iters: 1 ", "agg iters: 0x1 ", HEADER, "agg iters: expected an integer"),
    # 5: Pid and Group by the one integer grammar, each within its bound
    (RANK_0, "Pid   6899 ", "Pid   6899x ", RANK_0, "Pid: expected an integer"),
    (RANK_0, "Pid   6899 ", "Pid      0 ", RANK_0,
     f"Pid: 0 is outside the range it may take (from 1 to {PID_MAX - 1})"),
    (RANK_0, "Pid   6899 ", f"Pid {PID_MAX} ", RANK_0, f"Pid: {PID_MAX} is outside the range it may take (from 1"),
    (RANK_0, "Pid   6899 ", "Pid  06899 ", RANK_0, "Pid: '06899' has a leading zero"),
    (RANK_0, "Group  0 ", "Group -1 ", RANK_0, "Group: -1 is outside the range it may take (from 0 to"),
    (RANK_0, "Group  0 ", "Group 0x0 ", RANK_0, "Group: expected an integer"),
    (RANK_0, "Group  0 ", f"Group {MAX_GROUP + 1} ", RANK_0,
     f"Group: {MAX_GROUP + 1} is outside the range it may take (from 0 to {MAX_GROUP})"),
])
def test_a_header_field_the_rows_or_nccl_tests_contradict_is_refused_naming_the_line(tmp_path, capsys, line, old,
                                                                                     new, at, message):
    path = _edited_log(tmp_path, line, old, new)
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:{at}: {message}" in err, err


def test_a_row_lost_from_the_middle_of_the_sweep_is_refused_at_the_row_after_it(tmp_path, capsys):
    # without the 1024 B row (line 31), the 2048 B row stands where the sweep is at 1024 B
    lines = PUBLIC_LOG.read_text().splitlines(True)
    assert lines[30].split()[0] == "1024"
    path = tmp_path / "all_reduce.txt"
    path.write_text("".join(lines[:30] + lines[31:]))
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:31: size (B) is 2048, but {SWEEP} (minBytes 8, step: 2(factor)) is at 1024 B here" in err, err


def test_maxbytes_reduced_for_memory_ends_the_sweep_there(tmp_path, capsys):
    # common.cu prints "# Reducing maxBytes to N due to memory limitation" after the header and
    # sweeps to N: rows past it are a second sweep, which must start again at minBytes
    path = _edited_log(tmp_path, 2, "#", "# Reducing maxBytes to 1073741824 due to memory limitation\n#")
    err = _refused(tmp_path, capsys, path)
    assert (f"{path}:53: size (B) is 2147483648, but {SWEEP} (minBytes 8, step: 2(factor), maxBytes reduced to "
            "1073741824 on line 2) is at 8 B here") in err, err


def test_maxbytes_reduced_above_the_header_s_is_refused(tmp_path, capsys):
    path = _edited_log(tmp_path, 2, "#", "# Reducing maxBytes to 17179869184 due to memory limitation\n#")
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:2: Reducing maxBytes to 17179869184, above the header's maxBytes 8589934592 (line 1)" in err, err


def test_a_header_asking_more_than_memory_allows_imports_with_its_reduction(tmp_path):
    # a run asked for 16 GiB and was lowered to 8 GiB, the largest row of the public log
    path = _edited_log(tmp_path, HEADER, "maxBytes 8589934592 ", "maxBytes 17179869184 ")
    lines = path.read_text().splitlines(True)
    lines.insert(1, "# Reducing maxBytes to 8589934592 due to memory limitation\n")
    path.write_text("".join(lines))
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 0


def test_a_log_cut_short_still_imports_its_rows(tmp_path, capsys):
    # a killed run: the rows stop mid-sweep, no trailer; the import notes it, as before
    lines = PUBLIC_LOG.read_text().splitlines(True)
    path = tmp_path / "all_reduce.txt"
    path.write_text("".join(lines[:40]))
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 0
    assert "no 'Avg bus bandwidth' line: the output may be cut short" in capsys.readouterr().out


def test_the_public_log_as_published_still_imports(tmp_path):
    path = tmp_path / "all_reduce.txt"
    shutil.copyfile(PUBLIC_LOG, path)
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 0


def test_json_aggregated_iterations_are_bounded_as_the_text_s_agg_iters(tmp_path, capsys):
    text = PUBLIC_JSON.read_text()
    assert text.count('"aggregated_iterations": 1,') == 1
    path = tmp_path / PUBLIC_JSON.name
    path.write_text(text.replace('"aggregated_iterations": 1,', '"aggregated_iterations": 99999999999,'))
    err = _refused(tmp_path, capsys, path)
    assert f"{path}: field config.aggregated_iterations: 1e+11 is more than {MAX_AGG_ITERS:g}" in err, err
