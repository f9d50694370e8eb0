"""An nccl-tests header, text or -J JSON, held to its rows and to what nccl-tests can print: each
refusal is built by editing one field of a real public log (tests/fixtures/nccl_tests), and a
refused import leaves no run directory behind."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_tests"
H100_TEXT = FIXTURES / "all_reduce_h100.txt"
H100_JSON = FIXTURES / "all_reduce_h100.json"
HEADER = 3  # "# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 8(factor) ... validation: 1 ..."
FIRST_ROW = 18  # "           8             2     float     sum      -1    22.00 ..."
WRONG_COLUMNS = (8, 12)  # the words of a row that hold out-of-place and in-place #wrong


def _import(tmp_path: Path, path: Path) -> int:
    return main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")])


def _refused(tmp_path: Path, capsys, path: Path) -> str:
    assert _import(tmp_path, path) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and not (tmp_path / "run").exists(), err
    return err


def _text(tmp_path: Path, old: str = "", new: str = "", unchecked: bool = False) -> Path:
    """The H100 log with ``old`` replaced by ``new`` (once), and every #wrong N/A when ``unchecked``."""
    text = H100_TEXT.read_text()
    if old:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    if unchecked:
        lines = text.splitlines(keepends=True)
        for i, line in enumerate(lines):
            words = line.split()
            if words and words[0].isdigit():
                for column in WRONG_COLUMNS:
                    assert words[column] == "0"
                    words[column] = "N/A"
                lines[i] = "  ".join(words) + "\n"
        text = "".join(lines)
    path = tmp_path / "all_reduce.txt"
    path.write_text(text)
    return path


def _json(tmp_path: Path, edit) -> Path:
    data = json.loads(H100_JSON.read_text())
    edit(data)
    path = tmp_path / "all_reduce.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def _records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]


# 1: validation (-c) against #wrong: N/A exactly where nccl-tests does not check

def test_validation_0_beside_counted_wrong_is_refused_naming_the_header_and_the_row(tmp_path, capsys):
    path = _text(tmp_path, "validation: 1", "validation: 0")
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:{HEADER}: validation 0, but line {FIRST_ROW} prints out-of-place #wrong 0:" in err, err


def test_validation_1_beside_n_a_wrong_is_refused(tmp_path, capsys):
    # all_reduce checks both sides whenever validation is on: nccl-tests cannot print N/A there
    path = _text(tmp_path, unchecked=True)
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:{HEADER}: validation on, but line {FIRST_ROW} prints out-of-place #wrong N/A:" in err, err


def test_validation_0_with_n_a_wrong_imports_unchecked(tmp_path):
    path = _text(tmp_path, "validation: 1", "validation: 0", unchecked=True)
    assert _import(tmp_path, path) == 0
    assert [r["check"] for r in _records(tmp_path)] == [None] * 9


def test_json_validation_0_beside_counted_nwrong_is_refused(tmp_path, capsys):
    path = _json(tmp_path, lambda d: d["config"].update(validation=0))
    err = _refused(tmp_path, capsys, path)
    assert f"{path}: field config.validation: validation 0, but results[0].out_of_place.nwrong is 0:" in err, err


def test_json_validation_1_beside_null_nwrong_is_refused(tmp_path, capsys):
    def unchecked(data):
        for row in data["results"]:
            row["out_of_place"]["nwrong"] = row["in_place"]["nwrong"] = None
    path = _json(tmp_path, unchecked)
    err = _refused(tmp_path, capsys, path)
    assert f"{path}: field config.validation: validation on, but results[0].out_of_place.nwrong is null:" in err, err


def test_json_validation_0_with_null_nwrong_imports_unchecked(tmp_path):
    def unchecked(data):
        data["config"]["validation"] = 0
        for row in data["results"]:
            row["out_of_place"]["nwrong"] = row["in_place"]["nwrong"] = None
    assert _import(tmp_path, _json(tmp_path, unchecked)) == 0
    assert {r["check"] is None for r in _records(tmp_path)} == {True}


# 3: -J start_time, copied into run.json's started_at, is held to the rule run.json is read by

@pytest.mark.parametrize("start", ["yesterday", "2026-13-45 99:99:99", 20260101])
def test_a_json_start_time_no_reader_takes_is_refused_naming_the_input_and_nothing_is_written(tmp_path, capsys,
                                                                                              start):
    path = _json(tmp_path, lambda d: d.update(start_time=start))
    err = _refused(tmp_path, capsys, path)
    assert f"{path}: field start_time: " in err and "run.json" not in err, err


def test_the_public_json_start_time_as_nccl_tests_writes_it_imports(tmp_path):
    assert json.loads(H100_JSON.read_text())["start_time"] == "2026-01-01 00:00:00"  # strftime "%Y-%m-%d %H:%M:%S"
    assert _import(tmp_path, _json(tmp_path, lambda d: None)) == 0


# 2: -J's config held to its rows as the text header is, by the same rules

def _config(**fields):
    return lambda data: data["config"].update(fields)


def _device(index: int, **fields):
    return lambda data: data["config"]["devices"][index].update(fields)


@pytest.mark.parametrize("edit, message", [
    # the rows start at 8: not the sweep's first size
    (_config(minimum_bytes=1024), "results[0]: size (B) is 8, but the sweep of field config (minimum_bytes 1024, "
                                  "step_factor 8) is at 1024 B here"),
    # 8 and 64, then 512 where a second sweep would start again at 8
    (_config(maximum_bytes=64), "results[2]: size (B) is 512, but the sweep of field config (minimum_bytes 8, "
                                "step_factor 8) is at 8 B here"),
    (_config(minimum_bytes=1024, maximum_bytes=64),
     "field config.minimum_bytes: 1024 is more than config.maximum_bytes 64; nccl-tests refuses"),
    # util.cu writes step_factor only above 1, else step_bytes
    (_config(step_factor=1), "field config.step_factor: 1 is less than 2"),
    (lambda d: d["config"].update(step_bytes=0) or d["config"].pop("step_factor"), "field config.step_bytes: 0 is less than 1"),
    (_config(step_bytes=8), "field config: both step_factor and step_bytes"),
    (_config(step_factor=4), "results[1]: size (B) is 64, but the sweep of field config (minimum_bytes 8, "
                             "step_factor 4) is at 32 B here"),
    # the '#  Rank' rules of the text log
    (_device(1, rank=0), "field config.devices[1].rank: 0 again (config.devices[0] lists it too)"),
    (_device(1, rank=99), "field config.devices[1].rank: 99, but the run has 8 ranks (8 processes in "
                          "config.devices x nthreads 1 x ngpus 1): its ranks are 0 to 7"),
    (_device(1, pid=0), "field config.devices[1].pid: 0 is less than 1"),
    (_device(1, group=-1), "field config.devices[1].group: -1 is less than 0"),
    (_device(1, device=256), "field config.devices[1].device: 256 is more than 255"),
    # one entry per process: with 2 GPUs each, the second process's first rank is 2
    (_config(ngpus=2), "field config.devices[1].rank: 1, but -J lists the first rank of each process, a multiple of "
                       "its nthreads 1 x ngpus 2 ranks"),
])
def test_a_json_config_field_the_rows_or_nccl_tests_contradict_is_refused_naming_it(tmp_path, capsys, edit, message):
    path = _json(tmp_path, edit)
    err = _refused(tmp_path, capsys, path)
    assert f"{path}: {message}" in err, err


def test_a_json_sweep_that_ends_below_maximum_bytes_starts_the_next_at_minimum_bytes(tmp_path):
    # -J writes its config before maxBytes is lowered for memory (common.cu), and never says so: two
    # sweeps (-d float and half, say) that each stop at 4096 of a config saying 134217728 import
    def two_sweeps(data):
        first = [row for row in data["results"] if row["size"] <= 4096]
        half = json.loads(json.dumps(first))
        for row in half:
            row.update(type="half", count=row["count"] * 2)
        data["results"] = first + half
        del data["average_bus_bandwidth"]  # the mean of the whole public sweep
    assert _import(tmp_path, _json(tmp_path, two_sweeps)) == 0
    assert [r["params"]["size_bytes"] for r in _records(tmp_path)] == [8, 64, 512, 4096] * 2


# 4: the text log's '#  Rank' lines: each rank once, one Pid for the nThread x nGpus ranks of a process

def test_a_rank_listed_twice_is_refused_naming_the_duplicate_and_its_line(tmp_path, capsys):
    path = _text(tmp_path, "#  Rank  3 Group", "#  Rank  2 Group")
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:9: Rank 2 again (line 8 lists it too): nccl-tests lists each rank once" in err, err


@pytest.mark.parametrize("old, new, per_process", [("nGpus 1", "nGpus 2", "nThread 1 x nGpus 2"),
                                                   ("nThread 1", "nThread 4", "nThread 4 x nGpus 1")])
def test_ranks_of_one_process_with_another_pid_each_are_refused(tmp_path, capsys, old, new, per_process):
    path = _text(tmp_path, old, new)
    err = _refused(tmp_path, capsys, path)
    assert (f"{path}:7: Pid 4101, but line 6 (rank 0) has Pid 4100: ranks 0 to {int(new[-1]) - 1} are one process of "
            f"{per_process} (line 3) ranks") in err, err


def test_a_process_of_several_gpus_printing_one_pid_imports(tmp_path):
    # one process driving all 8 GPUs (nGpus 8) prints 8 lines with its one Pid
    text = H100_TEXT.read_text().replace("nGpus 1", "nGpus 8")
    for rank in range(8):
        text = text.replace(f"Pid   {4100 + rank} ", "Pid   4100 ")
    path = tmp_path / "all_reduce.txt"
    path.write_text(text)
    assert _import(tmp_path, path) == 0


# 4: the banner and the footer name one program; -u is an int whose padding (8 x unalign) an int holds

def test_a_test_concluded_other_than_the_one_started_is_refused(tmp_path, capsys):
    path = _text(tmp_path, "concluded: all_reduce_perf", "concluded: broadcast_perf")
    err = _refused(tmp_path, capsys, path)
    assert (f"{path}:30: Collective test concluded: broadcast_perf, but line 2 says starting: all_reduce_perf"
            in err), err


@pytest.mark.parametrize("unalign", ["-1", "268435456", "0x1"])
def test_an_unalign_nccl_tests_cannot_run_with_is_refused(tmp_path, capsys, unalign):
    path = _text(tmp_path, "unalign: 0", f"unalign: {unalign}")
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:{HEADER}: unalign: " in err, err


def test_an_unalign_nccl_tests_runs_with_imports(tmp_path):
    # -u 99: each buffer starts 99 elements in, its allocation padded by 8 x 99 bytes (common.cu)
    assert _import(tmp_path, _text(tmp_path, "unalign: 0", "unalign: 99")) == 0


# 4: a -J file is known by its first character, past a byte order mark and white space

BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("source", [H100_JSON, H100_TEXT], ids=["json", "text"])
def test_an_output_after_a_byte_order_mark_imports_as_it_does_without_one(tmp_path, source):
    marked = tmp_path / f"marked{source.suffix}"
    marked.write_bytes(BOM + b"\n " + source.read_bytes())
    assert _import(tmp_path / "plain", source) == 0
    assert _import(tmp_path / "marked", marked) == 0
    plain, with_bom = (_records(tmp_path / side) for side in ("plain", "marked"))
    assert [r["summary"] for r in with_bom] == [r["summary"] for r in plain] and len(plain) == 9


@pytest.mark.parametrize("text", ["[]", "\n  [1, 2]\n", "\ufeff[]"])
def test_a_json_array_gets_the_json_readers_word_not_the_text_logs(tmp_path, capsys, text):
    path = tmp_path / "all_reduce.json"
    path.write_text(text, encoding="utf-8")
    err = _refused(tmp_path, capsys, path)
    assert f"{path}:1: the JSON output of nccl-tests is an object" in err and "nThread" not in err, err


@pytest.mark.parametrize("first", [
    "[bm-h100-01:29250] 15 more processes have sent help message help-mpi-btl-base.txt / btl:no-nics\n",
    "[1712345678.123456] [bm-h100-01:29250:0]          parser.c:2033 UCX  WARN  unused environment variable\n",
], ids=["open-mpi-message", "ucx-warning"])
def test_a_text_log_whose_first_line_opens_with_a_bracket_is_read_as_the_log_it_is(tmp_path, first):
    # Open MPI prints "[host:pid] ..." before the program's output: a first character of "[" is an
    # array only when the whole file parses as JSON.
    log = tmp_path / "first.txt"
    log.write_text(first + H100_TEXT.read_text())
    assert _import(tmp_path / "plain", H100_TEXT) == 0
    assert _import(tmp_path / "first", log) == 0
    assert [r["summary"] for r in _records(tmp_path / "first")] == [r["summary"] for r in _records(tmp_path / "plain")]
