"""The nccl-tests importer on real outputs from public sources (tests/fixtures/nccl_tests/public,
each cited in its README.md): the collective found from the log alone, figures as the file
prints them, the trailer kept and checked, and refusals where the log cannot say."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.store import load_records
from harness.nccltests.evidence import collectives_in_name
from harness.nccltests.importer import NcclTestsFormatError, import_file, parse_file

PUBLIC = Path(__file__).parent / "fixtures" / "nccl_tests" / "public"

# file: collective, rows, ranks, the last row as the file prints it (size, out-of-place time,
# in-place busbw, in-place #wrong or old-style error), the trailer's Avg bus bandwidth
REAL = {
    "superbench_old_allreduce_8gpu.txt": ("all_reduce", 34, 8, (8589934592, 63896, 235.03, None), 68.4048),
    "superbench_old_allgather.txt": ("all_gather", 34, 8, (8589934592, 33646, 230.07, None), 58.2651),
    "superbench_old_alltoall.txt": ("alltoall", 34, 8, (8589934592, 33508, 226.16, None), 58.6481),
    "superbench_old_broadcast.txt": ("broadcast", 34, 8, (8589934592, 36896, 234.70, None), 64.8653),
    "superbench_old_reduce.txt": ("reduce", 34, 8, (8589934592, 37613, 228.83, None), 65.018),
    "superbench_old_reducescatter.txt": ("reduce_scatter", 34, 8, (8589934592, 32464, 231.25, None), 60.168),
    "sheffield_v100_allreduce_4gpu_ancient_error_col_indented.txt":
        ("all_reduce", 25, 4, (134217728, 21410, 9.40, 2e-07), 4.22207),
    "aws_a10g_2rank_old_nccl_info_interleaved.txt": ("all_reduce", 25, 2, (134217728, 183560, 0.77, 0.0), 0.300212),
    "gcp_a3mega_allreduce_16rank_2node.txt": ("all_reduce", 31, 16, (8589934592, 47535, 337.35, 0), 70.742),
    "cscs_gh200_allreduce_8rank_2node_indented.txt": ("all_reduce", 25, 8, (134217728, 1916.4, 123.11, 0), 19.7866),
    "cscs_gh200_allreduce_2rank_2node_v2.18.2.txt": ("all_reduce", 8, 2, (134217728, 5871.07, 22.88, 0), 14.9966),
    "rtx5090_allreduce_8gpu_1proc_v2.18.2_notrailer.txt":
        ("all_reduce", 25, 8, (134217728, 5355.16, 44.07, 0), None),
    "rtx5090_broadcast_mpi_2rank_same_gpu_v2.18.0.txt": ("broadcast", 9, 2, (67108864, 28066.8, 1.78, 0), 0.8664),
    "autodl_2080ti_reduce_1gpu_misaligned.txt": ("reduce", 28, 1, (1073741824, 4016.0, 5706839.35, 0), 202818),
    "openmpi_h100_allreduce_16rank_2node_mpirun_warnings.txt":
        ("all_reduce", 32, 16, (17179869184, 68652, 469.10, 0), 139.56),
    "azure_ndv5_h100_allreduce_8rank_jsonv3_prettyprinted.json":
        ("all_reduce", 1, 8, (17179869184, 62517.395194, 479.686103, 0), 480.294297),
}


def test_every_public_file_is_cited():
    readme = (PUBLIC / "README.md").read_text()
    files = sorted(p.name for p in PUBLIC.iterdir() if p.name != "README.md")
    assert files and all(f"`{name}`" in readme for name in files)


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_output_imports_with_its_collective_found_in_the_log(tmp_path, name):
    collective, n_rows, ranks, (size, oop_time, ip_busbw, ip_check), avg = REAL[name]
    records = import_file(PUBLIC / name, tmp_path / "run")  # no --collective
    imported = records[0].extra["imported"]
    assert imported["collective"] == collective and imported["collective_from"] == "log"
    assert len(records) == n_rows and all(r.world == ranks for r in records)
    last = records[-1].extra["imported"]
    assert records[-1].params["size_bytes"] == size
    assert last["out_of_place"]["time_us"] == oop_time and last["in_place"]["busbw_gbps"] == ip_busbw
    check = last["in_place"]["wrong"] if "wrong" in last["in_place"] and "max_error" not in last["in_place"] \
        else last["in_place"]["max_error"]
    assert check == ip_check
    trailer = imported["trailer"]
    assert trailer["avg_busbw_gbps"] == avg and trailer["problems"] == []
    if avg is not None:
        assert trailer["avg_busbw_agrees"] is True and trailer["out_of_bounds"] == 0
    else:
        assert "no 'Avg bus bandwidth' line" in " ".join(trailer["lines"])
    assert [r.case_id for r in load_records(tmp_path / "run")] == [r.case_id for r in records]


def test_old_all_gather_is_found_despite_a_misleading_file_name(tmp_path, capsys):
    misnamed = tmp_path / "reduce_results.txt"
    shutil.copy(PUBLIC / "superbench_old_allgather.txt", misnamed)
    assert main(["import-nccl-tests", str(misnamed), "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "nccltests_all_gather" in out and "collective all_gather, from the log" in out
    assert "columns 'size count type' with an 'error' column" in out


def test_a_banner_outweighs_the_file_name(tmp_path):
    misnamed = tmp_path / "all_reduce_perf.log"
    shutil.copy(PUBLIC / "rtx5090_broadcast_mpi_2rank_same_gpu_v2.18.0.txt", misnamed)
    parsed = parse_file(misnamed)
    assert parsed.collective == "broadcast" and parsed.detection.source == "log"


def test_one_rank_all_reduce_is_ambiguous_and_the_importer_asks(tmp_path, capsys):
    # At one rank all_reduce and reduce_scatter print the same table: nothing in the log tells.
    name = PUBLIC / "aws_a10g_1gpu_old_error_col.txt"
    assert main(["import-nccl-tests", str(name), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "cannot tell which collective this is; the log leaves all_reduce, reduce_scatter" in err
    assert "aws_a10g_1gpu_old_error_col.txt" in err and "(line 7)" in err
    assert "pass --collective NAME (one of all_reduce, reduce_scatter)" in err
    assert not (tmp_path / "run").exists()
    # The user says which; the log does not contradict it.
    assert main(["import-nccl-tests", str(name), "--out", str(tmp_path / "run"), "--collective", "all_reduce"]) == 0
    records = load_records(tmp_path / "run")
    assert records[0].family == "allreduce" and records[0].world == 1
    assert records[0].extra["imported"]["collective_from"] == "--collective"


def test_a_file_name_picks_only_among_what_the_log_allows(tmp_path, capsys):
    named = tmp_path / "a10g_allreduce.txt"
    shutil.copy(PUBLIC / "aws_a10g_1gpu_old_error_col.txt", named)
    parsed = parse_file(named)
    assert parsed.collective == "all_reduce" and parsed.detection.source == "file name"
    assert parsed.detection.evidence[-1].what == "the file name a10g_allreduce.txt"
    wrong = tmp_path / "broadcast_a10g.txt"
    shutil.copy(PUBLIC / "aws_a10g_1gpu_old_error_col.txt", wrong)
    with pytest.raises(NcclTestsFormatError, match="says broadcast, which the log rules out"):
        parse_file(wrong)


@pytest.mark.parametrize("name,given,against", [
    ("superbench_old_alltoall.txt", "all_gather", "redop (empty) in every row (line 16 to line 49): alltoall"),
    ("cscs_gh200_allreduce_2rank_2node_v2.18.2.txt", "sendrecv", "the test binary all_reduce_perf (line 2)"),
    ("superbench_old_broadcast.txt", "reduce", "columns 'size count type root'"),
])
def test_collective_option_contradicting_the_log_is_refused(tmp_path, capsys, name, given, against):
    assert main(["import-nccl-tests", str(PUBLIC / name), "--out", str(tmp_path / "run"),
                 "--collective", given]) == 2
    err = capsys.readouterr().err
    assert f"--collective {given} contradicts the log" in err and against in err
    assert not (tmp_path / "run").exists()


def test_several_runs_in_one_file_are_refused(tmp_path):
    with pytest.raises(NcclTestsFormatError, match=r"6 nccl-tests runs in one file \(headers on lines "
                                                   r"2, 44, 86, 129, 171, 213\)"):
        parse_file(PUBLIC / "autodl_2080ti_2gpu_session_6runs.txt")


def test_a_table_without_its_header_is_refused(tmp_path):
    with pytest.raises(NcclTestsFormatError, match=r"aws_p5_allreduce_16gpu_srun_label_prefixed.txt:3: a result row "
                                                   r"before the '# nThread \.\.\. iters:' header"):
        parse_file(PUBLIC / "aws_p5_allreduce_16gpu_srun_label_prefixed.txt")


@pytest.mark.parametrize("prefix", ["[1,0]<stdout>:", "0: "])
def test_launcher_prefixes_are_read_through(tmp_path, prefix):
    # The same real output as Open MPI --tag-output or srun --label would have printed it.
    plain = PUBLIC / "cscs_gh200_allreduce_2rank_2node_v2.18.2.txt"
    tagged = tmp_path / "tagged.txt"
    tagged.write_text("".join(prefix + line for line in plain.read_text().splitlines(keepends=True)))
    a, b = parse_file(plain), parse_file(tagged)
    assert b.collective == a.collective == "all_reduce" and b.ranks == 2
    assert [r.in_place for r in b.rows] == [r.in_place for r in a.rows]
    assert b.trailer.avg_busbw_gbps == 14.9966


def test_json_from_nccl_tests_own_format(tmp_path):
    records = import_file(PUBLIC / "azure_ndv5_h100_allreduce_8rank_jsonv3_prettyprinted.json", tmp_path / "run")
    imported = records[0].extra["imported"]
    assert imported["format"] == "json" and imported["where"] == "results[0]"
    assert imported["evidence"][0] == "the test binary all_reduce_perf (field args[0]): all_reduce"
    # config.devices holds one entry per process: 8 processes x 1 thread x 1 GPU
    assert imported["ranks_from"] == "8 processes in config.devices x nthreads 1 x ngpus 1"
    assert records[0].metrics == {"time_us": 62675.926806, "algbw_gbps": 274.106344, "busbw_gbps": 479.686103}
    assert imported["trailer"]["out_of_bounds"] == 0 and imported["trailer"]["avg_busbw_agrees"] is True
    fingerprint = json.loads((tmp_path / "run" / "fingerprint.json").read_text())
    assert fingerprint["world"] == 8 and fingerprint["nccl_version"] == "2.23.4"


def test_json_version_1_spelling_of_the_average(tmp_path):
    # nccl-tests' first JSON (version 1) spelt "average_bus_bandwidith" / "bandwidith".
    data = json.loads((PUBLIC / "azure_ndv5_h100_allreduce_8rank_jsonv3_prettyprinted.json").read_text())
    data["version"] = 1
    data["average_bus_bandwidith"] = {"bandwidith": data.pop("average_bus_bandwidth")["bandwidth"], "okay": "unchecked"}
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(data))
    assert parse_file(path).trailer.avg_busbw_gbps == 480.294297


def _edited(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = (PUBLIC / name).read_text()
    assert text.count(old) == 1
    path = tmp_path / name
    path.write_text(text.replace(old, new))
    return path


def test_a_missing_row_is_caught_by_the_average(tmp_path, capsys):
    # The last row cut out, the trailer kept: the rows left are a sweep cut short, as a killed run
    # leaves it, but the file's own Avg bus bandwidth no longer fits them. (A row cut from the
    # middle of the sweep is refused outright: tests/test_nccl_header_rows.py.)
    row = next(line for line in (PUBLIC / "cscs_gh200_allreduce_2rank_2node_v2.18.2.txt").read_text().splitlines(True)
               if line.lstrip().startswith("134217728 "))
    path = _edited(tmp_path, "cscs_gh200_allreduce_2rank_2node_v2.18.2.txt", row, "")
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "line 20: Avg bus bandwidth 14.9966 GB/s; the mean busbw of the rows (14 figures, both sides) is 13.8721" in err
    assert "rows are missing, changed, or the file was edited" in err
    assert load_records(tmp_path / "run")[0].extra["imported"]["trailer"]["avg_busbw_agrees"] is False


def test_an_edited_busbw_contradicts_the_bus_factor(tmp_path):
    path = _edited(tmp_path, "cscs_gh200_allreduce_2rank_2node_v2.18.2.txt", "22.86   22.86", "22.86   32.86")
    with pytest.raises(NcclTestsFormatError, match=r"contradicts itself(.|\n)*busbw / algbw = .* fits none of"):
        parse_file(path)


def test_wrong_results_against_out_of_bounds(tmp_path, capsys):
    path = _edited(tmp_path, "cscs_gh200_allreduce_2rank_2node_v2.18.2.txt",
                   "5.90    5.90       0   361.77", "5.90    5.90       3   361.77")
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "1 size(s) reported wrong results" in err
    assert "line 20: Out of bounds values 0, yet #wrong > 0 on 1 of 16 counted sides: the file disagrees" in err
    record = [r for r in load_records(tmp_path / "run") if r.params["size_bytes"] == 2097152][0]
    assert record.label == "wrong" and record.check.wrong == 3
    assert record.check.detail == "nccl-tests: out-of-place #wrong 3, in-place #wrong 0"


def test_show_prints_both_sides_the_trailer_and_no_percentile_of_a_mean(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["import-nccl-tests", str(PUBLIC / "cscs_gh200_allreduce_2rank_2node_v2.18.2.txt"),
                 "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "128M" in line)
    # out-of-place then in-place time, algbw, busbw, #wrong, as the file's last row
    assert [c.strip() for c in row.strip("│ ").split("│")][5:15] == [
        "5871.07", "22.86", "22.86", "0", "5867.43", "22.88", "22.88", "0", "mean only", "ok"]
    assert "p50 and p99 are not known (mean only)" in out
    assert "line 21: Avg bus bandwidth 14.9966 GB/s" in out and "agrees" in out
    assert "line 20: Out of bounds values 0" in out
    assert "the test binary all_reduce_perf (line 2): all_reduce" in out


def test_show_old_format_says_error_not_wrong(tmp_path, capsys):
    run = tmp_path / "run"
    import_file(PUBLIC / "sheffield_v100_allreduce_4gpu_ancient_error_col_indented.txt", run)
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = "\n".join(lines[1:lines.index(next(line for line in lines if " 8 │" in line))])
    assert "#wrong" not in header and header.count("error") == 2
    row = next(line for line in lines if "128M" in line)
    assert "2e-07" in row and "mean only" in row


@pytest.mark.parametrize("name,expected", [
    ("all_reduce_perf.txt", {"all_reduce"}), ("allreduce_8gpu.log", {"all_reduce"}),
    ("reduce_scatter.txt", {"reduce_scatter"}), ("nccl_reducescatter.log", {"reduce_scatter"}),
    ("all_gather.txt", {"all_gather"}), ("reduce_results.txt", {"reduce"}), ("bcast.txt", {"broadcast"}),
    ("alltoallv.txt", {"alltoallv"}), ("node7.txt", set()), ("allreduce_vs_broadcast.txt", {"all_reduce", "broadcast"}),
])
def test_collectives_a_file_name_mentions(name, expected):
    assert collectives_in_name(name) == expected
