"""nccl-tests logs whose rows contradict themselves or the run, and real launcher output that does
not: a row's time against its size, algbw and busbw; a root against the run's ranks; the -J
per-iteration flag against the rows; Open MPI's messages written between rows. Each edit is made
to a real public log (tests/fixtures/nccl_tests/public, cited in its README.md) where one serves."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.store import load_records
from harness.nccltests.importer import NcclTestsFormatError, import_file, parse_file

NT = Path(__file__).parent / "fixtures" / "nccl_tests"
PUBLIC = NT / "public"
MPIRUN = PUBLIC / "openmpi_h100_allreduce_16rank_2node_mpirun_warnings.txt"
UNDER_1_GBPS = PUBLIC / "aws_a10g_2rank_old_nccl_info_interleaved.txt"
SIDES = ("out_of_place", "in_place")


def _edit_line(source: Path, tmp_path: Path, number: int, edit, name: str = "") -> Path:
    lines = source.read_text().splitlines(keepends=True)
    lines[number - 1] = edit(lines[number - 1])
    path = tmp_path / (name or source.name)
    path.write_text("".join(lines))
    return path


def _replace_token(line: str, index: int, new: str) -> str:
    """``line`` with its ``index``-th word (0-based) replaced, the columns kept where they were."""
    word = list(re.finditer(r"\S+", line))[index]
    return line[:word.start()] + new.rjust(word.end() - word.start()) + line[word.end():]


def _time_index(parsed, key: str) -> int:
    """The word of a row that holds a side's time: after size, count, type and the optional columns."""
    base = 3 + len(parsed.columns)
    return base if key == "out_of_place" else base + 4


def _sides(parsed):
    return [(row, key, getattr(row, key)) for row in parsed.rows for key in SIDES if getattr(row, key) is not None]


# -- a row's time against its size and algbw -----------------------------------------------------

# a text log of each kind: 2.13 and later; before 2.13 with every algbw under 1 GB/s; all_gather
# before 2.13 (its algbw once counted (n-1)/n of the size); rooted
EDITED_LOGS = ["cscs_gh200_allreduce_2rank_2node_v2.18.2.txt", "aws_a10g_2rank_old_nccl_info_interleaved.txt",
               "superbench_old_allgather.txt", "rtx5090_broadcast_mpi_2rank_same_gpu_v2.18.0.txt"]


@pytest.mark.parametrize("name", EDITED_LOGS)
def test_a_time_that_disagrees_with_size_and_algbw_is_refused_naming_line_and_column(tmp_path, name):
    parsed = parse_file(PUBLIC / name)
    edited = 0
    for row, key, side in _sides(parsed):
        # doubling the time halves algbw; only where algbw has the digits to show it (0.00 does not)
        if side["algbw_gbps"] < 4 * row.half_ulps[key][0]:
            continue
        doubled = f"{2 * side['time_us']:.{len(side['time_printed'].partition('.')[2])}f}"
        path = _edit_line(PUBLIC / name, tmp_path, row.line,
                          lambda line: _replace_token(line, _time_index(parsed, key), doubled))
        with pytest.raises(NcclTestsFormatError) as refused:
            parse_file(path)
        side_name = key.replace("_", "-")
        assert str(refused.value).startswith(f"{path}:{row.line}: column time ({side_name}) is {doubled} us"), \
            refused.value
        edited += 1
    assert edited >= 2, "the log has no side whose algbw shows a change of its time"


def test_a_time_edit_under_1_gbps_is_refused(tmp_path, capsys):
    # every algbw of this real log is under 1 GB/s, which the bus-factor evidence leaves unchecked
    parsed = parse_file(UNDER_1_GBPS)
    row, key, side = max(_sides(parsed), key=lambda s: s[2]["algbw_gbps"])
    assert side["algbw_gbps"] < 1
    path = _edit_line(UNDER_1_GBPS, tmp_path, row.line,
                      lambda line: _replace_token(line, _time_index(parsed, key), f"{side['time_us'] * 1.5:.1f}"))
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    assert f"{path}:{row.line}: column time" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_busbw_under_1_gbps_that_is_not_algbw_times_the_factor_is_refused(tmp_path):
    parsed = parse_file(UNDER_1_GBPS)
    row, key, side = max(_sides(parsed), key=lambda s: s[2]["algbw_gbps"])
    busbw = f"{side['busbw_gbps'] * 2:.2f}"
    path = _edit_line(UNDER_1_GBPS, tmp_path, row.line,
                      lambda line: _replace_token(line, _time_index(parsed, key) + 2, busbw))
    with pytest.raises(NcclTestsFormatError, match=rf":{row.line}: column busbw \({key.replace('_', '-')}\) is "):
        parse_file(path)


def test_a_json_time_that_disagrees_with_size_and_algbw_is_refused_naming_its_field(tmp_path):
    data = json.loads((PUBLIC / "azure_ndv5_h100_allreduce_8rank_jsonv3_prettyprinted.json").read_text())
    data["results"][0]["in_place"]["time"] *= 1.001
    path = tmp_path / "azure.json"
    path.write_text(json.dumps(data))
    with pytest.raises(NcclTestsFormatError, match=r"azure.json: results\[0\].in_place.time is "):
        parse_file(path)


@pytest.mark.parametrize("name", sorted(p.name for p in PUBLIC.iterdir() if p.suffix in (".txt", ".json")))
def test_every_side_of_every_real_log_that_imports_is_checked_and_agrees(name):
    try:
        parsed = parse_file(PUBLIC / name)
    except NcclTestsFormatError as exc:
        # the logs that cannot be imported say so for what they are, never for their figures
        assert "changed after nccl-tests wrote them" not in str(exc), exc
        return
    assert parsed.agreement.sides_checked == len(_sides(parsed)) > 0, parsed.agreement


def test_the_cputime_column_is_not_compared_with_algbw_and_the_import_says_so(tmp_path, capsys):
    # -C prints the host's time of the loop; algbw and busbw come from the other clock
    parsed = parse_file(PUBLIC / "cscs_gh200_allreduce_2rank_2node_v2.18.2.txt")
    header = parsed.columns_where.split()[-1]
    text = (PUBLIC / "cscs_gh200_allreduce_2rank_2node_v2.18.2.txt").read_text().splitlines(keepends=True)
    text[int(header) - 1] = text[int(header) - 1].replace("    time", " cputime")
    row, key, side = _sides(parsed)[0]
    text[row.line - 1] = _replace_token(text[row.line - 1], _time_index(parsed, key), f"{side['time_us'] * 3:.2f}")
    path = tmp_path / "cputime_all_reduce.txt"
    path.write_text("".join(text))
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 0
    assert "time not compared with algbw: the cputime column (-C) is the host's time" in capsys.readouterr().out


# -- a root is -1 or a rank of the run ----------------------------------------------------------

@pytest.mark.parametrize("root, refused", [("-7", "root is -7; nccl-tests prints -1 (no root) or a rank"),
                                           ("-0", "root is -0;"), ("2", "root is 2, but the run has 2 ranks"),
                                           # a rank of the run, but within a sweep of root 0
                                           ("1", "root is 1, but the row before it")])
def test_a_root_that_is_no_rank_of_the_run_is_refused_naming_the_line(tmp_path, capsys, root, refused):
    # a real broadcast log: root 0 in every row, 2 ranks listed
    parsed = parse_file(PUBLIC / "rtx5090_broadcast_mpi_2rank_same_gpu_v2.18.0.txt")
    row = parsed.rows[len(parsed.rows) // 2]
    root_index = 3 + parsed.columns.index("root")
    path = _edit_line(PUBLIC / "rtx5090_broadcast_mpi_2rank_same_gpu_v2.18.0.txt", tmp_path, row.line,
                      lambda line: _replace_token(line, root_index, root))
    code = main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{path}:{row.line}: " in err and refused in err, err
    assert not (tmp_path / "run").exists()


def test_a_root_of_minus_7_in_every_row_of_an_all_reduce_log_is_refused_naming_the_first(tmp_path):
    # every row alike, so that no evidence of the collective contradicts another: only the root itself
    source = PUBLIC / "cscs_gh200_allreduce_2rank_2node_v2.18.2.txt"
    parsed = parse_file(source)
    root_index = 3 + parsed.columns.index("root")
    lines = source.read_text().splitlines(keepends=True)
    for row in parsed.rows:
        lines[row.line - 1] = _replace_token(lines[row.line - 1], root_index, "-7")
    path = tmp_path / source.name
    path.write_text("".join(lines))
    with pytest.raises(NcclTestsFormatError, match=rf"{source.name}:{parsed.rows[0].line}: root is -7; "):
        parse_file(path)


def test_a_json_root_that_is_no_rank_of_the_run_is_refused_naming_the_field(tmp_path):
    for root, said in (("    -7", r"results\[3\].root: root is -7"), ("     8", r"results\[3\].root: root is 8, but")):
        data = json.loads((NT / "all_reduce_h100.json").read_text())
        data["results"][3]["root"] = root
        path = tmp_path / "all_reduce.json"
        path.write_text(json.dumps(data))
        with pytest.raises(NcclTestsFormatError, match=said):
            parse_file(path)


# -- -J: config.per_iter_timing against the rows ------------------------------------------------

def _with_flag(tmp_path: Path, source: Path, value) -> Path:
    data = json.loads(source.read_text())
    data["config"]["per_iter_timing"] = value
    path = tmp_path / source.name
    path.write_text(json.dumps(data))
    return path


_NOT_A_FLAG = r'field config.per_iter_timing: .* is not a flag as nccl-tests writes one \("true" or "false"\)'


@pytest.mark.parametrize("source, value, refused", [
    *[("all_reduce_per_iter.json", value, r"results\[0\].out_of_place_per_iter holds per-iteration times, "
       r'but field config.per_iter_timing is "false"') for value in ("false", False)],
    ("all_reduce_h100.json", "true",
     r'results\[0\].out_of_place_per_iter is missing, but field config.per_iter_timing is "true"'),
    *[("all_reduce_per_iter.json", value, _NOT_A_FLAG) for value in ("False", "0", 0, 1, "yes", [True])],
])
def test_a_per_iter_timing_flag_that_contradicts_the_rows_or_is_no_flag_is_refused(tmp_path, source, value, refused):
    with pytest.raises(NcclTestsFormatError, match=refused):
        parse_file(_with_flag(tmp_path, NT / source, value))


def test_the_flag_as_nccl_tests_writes_it_agrees_with_its_rows(tmp_path):
    # nccl-tests' jsonBool writes the string; the real -J file holds "false" and no per-iteration rows
    assert json.loads((NT / "all_reduce_per_iter.json").read_text())["config"]["per_iter_timing"] == "true"
    assert len(import_file(NT / "all_reduce_per_iter.json", tmp_path / "run")) > 0
    real = PUBLIC / "azure_ndv5_h100_allreduce_8rank_jsonv3_prettyprinted.json"
    assert json.loads(real.read_text())["config"]["per_iter_timing"] == "false"
    assert len(import_file(real, tmp_path / "real")) > 0


# -- Open MPI's messages between rows ------------------------------------------------------------

def _launcher_lines(path: Path) -> tuple[list[str], list[str]]:
    """The real log's Open MPI messages (its xpmem warning block and help-aggregation lines), and the
    rest of its lines."""
    lines = path.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("-----"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("-----")) + 1
    aggregated = [line for line in lines if line.startswith("[bm-h100-01:")]
    messages = lines[start:end] + aggregated
    return messages, [line for i, line in enumerate(lines) if not start <= i < end and line not in aggregated]


def _between_rows(tmp_path: Path, source: Path, messages: list[str], rest: list[str], spoil=None) -> Path:
    rows = [i for i, line in enumerate(rest) if re.match(r"\s*\d+\s+\d+\s+\w+", line)]
    middle = rows[len(rows) // 2]
    if spoil:
        rest = rest[:middle] + [spoil(rest[middle])] + rest[middle + 1:]
    path = tmp_path / source.name
    path.write_text("".join(rest[:middle] + messages + rest[middle:]))
    return path


def test_open_mpi_messages_between_rows_of_a_real_mpirun_log_are_read_past(tmp_path, capsys):
    # Open MPI prints its help-aggregation lines when its timer fires: in the real log before the
    # table, as well between two of its rows
    messages, rest = _launcher_lines(MPIRUN)
    printed = [line for line in messages if line.strip()]  # blank lines are read past uncounted
    assert len(printed) > 2
    path = _between_rows(tmp_path, MPIRUN, messages, rest)
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert f"read past {len(printed)} lines in the table that hold no row" in out, out
    moved = load_records(tmp_path / "run")
    assert main(["import-nccl-tests", str(MPIRUN), "--out", str(tmp_path / "real")]) == 0
    real = load_records(tmp_path / "real")
    assert [(r.case_id, r.metrics) for r in moved] == [(r.case_id, r.metrics) for r in real]


@pytest.mark.parametrize("prefix", ["+", "x", "\x00"])
def test_a_spoilt_row_among_open_mpi_messages_is_still_refused(tmp_path, capsys, prefix):
    messages, rest = _launcher_lines(MPIRUN)
    path = _between_rows(tmp_path, MPIRUN, messages, rest, spoil=lambda line: prefix + line.lstrip())
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    assert "in the results table is neither a result row" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_log_that_cannot_tell_its_collective_still_asks_with_open_mpi_messages_between_rows(tmp_path, capsys):
    # one rank: all_reduce and reduce_scatter print the same table
    source = PUBLIC / "aws_a10g_1gpu_old_error_col.txt"
    messages, _ = _launcher_lines(MPIRUN)
    path = _between_rows(tmp_path, source, messages, source.read_text().splitlines(keepends=True))
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    assert "cannot tell which collective this is" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
