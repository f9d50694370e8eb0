"""Importing nccl-tests output: text table, -J JSON (with and without per-iteration times), and
malformed input that names file and line."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.core.figures import FigureUnavailable, is_mean_only
from harness.core.figures import value as statistic
from harness.nccltests.importer import NcclTestsFormatError, import_file, nccl_version_text, parse_file
from harness.core.store import load_records

NT = Path(__file__).parent / "fixtures" / "nccl_tests"


def test_text_table_becomes_in_place_allreduce_records(tmp_path):
    records = import_file(NT / "all_reduce_h100.txt", tmp_path / "run")
    assert len(records) == 9
    big = records[-1]
    assert big.case_id == "allreduce/algo=native,backend=nccl,dtype=float32,size_bytes=134217728,world=8"
    # in-place columns of the last row: 538.62 us, 249.19 GB/s algbw, 436.08 GB/s busbw
    assert big.metrics == {"time_us": 538.62, "algbw_gbps": 249.19, "busbw_gbps": 436.08}
    assert big.samples_ns == (538620,)
    imported = big.extra["imported"]
    assert imported["samples"] == "mean_only" and imported["iters"] == 20 and imported["placement"] == "in_place"
    assert imported["out_of_place"]["time_us"] == 538.22
    assert imported["where"] == "line 26"
    assert big.check.wrong == 0 and big.ok
    # Stored and read back like any run.
    assert [r.case_id for r in load_records(tmp_path / "run")] == [r.case_id for r in records]


def test_imported_means_are_never_percentiles(tmp_path):
    record = import_file(NT / "all_reduce_h100.txt", tmp_path / "run")[0]
    assert is_mean_only(record)
    assert statistic(record, "mean_us") == pytest.approx(22.40)
    with pytest.raises(FigureUnavailable):
        statistic(record, "p99_us")


def test_json_output_gives_the_same_figures_and_the_fingerprint(tmp_path):
    text = parse_file(NT / "all_reduce_h100.txt")
    js = parse_file(NT / "all_reduce_h100.json")
    assert js.collective == text.collective == "all_reduce"
    for a, b in zip(text.rows, js.rows):
        assert a.size_bytes == b.size_bytes
        assert a.in_place["time_us"] == pytest.approx(b.in_place["time_us"], abs=0.01)
    import json

    import_file(NT / "all_reduce_h100.json", tmp_path / "run")
    fp = json.loads((tmp_path / "run" / "fingerprint.json").read_text())
    assert fp["nccl_version"] == "2.21.5" and fp["layout"] == {"nodes": 2, "ranks_per_node": 4}
    assert fp["gpus"]["devices"][7]["name"] == "NVIDIA H100 80GB HBM3"


def test_per_iteration_json_keeps_real_samples(tmp_path):
    records = import_file(NT / "all_reduce_per_iter.json", tmp_path / "run")
    assert all(r.extra["imported"]["samples"] == "per_iteration" for r in records)
    assert len(records[0].samples_ns) == 20
    # Real samples give percentiles, as far as 20 of them support: p90 yes, p99 not (n too small).
    assert statistic(records[0], "p90_us") >= statistic(records[0], "p50_us")
    with pytest.raises(FigureUnavailable, match="n too small"):
        statistic(records[0], "p99_us")


@pytest.mark.parametrize("name,where", [("malformed.txt", "malformed.txt:21: 12 columns"),
                                        ("truncated.json", "truncated.json:1: not valid JSON")])
def test_malformed_input_names_file_and_line(tmp_path, name, where, capsys):
    with pytest.raises(NcclTestsFormatError, match=where):
        parse_file(NT / name)
    assert main(["import-nccl-tests", str(NT / name), "--out", str(tmp_path / "x")]) == 2
    assert where in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_json_missing_field_is_named(tmp_path):
    path = tmp_path / "all_reduce.json"
    path.write_text('{"version": 2, "config": {"iterations": 20}, "results": [{"size": 8, "count": 2}]}')
    with pytest.raises(NcclTestsFormatError, match=r"field results\[0\].type is missing"):
        parse_file(path)


def test_not_nccl_tests_output(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("hello\n       8   2  float  sum  -1  1 1 1 0  1 1 1 0\n")
    with pytest.raises(NcclTestsFormatError, match=r"x.txt:2: a result row before"):
        parse_file(path)


def test_nccl_version_codes():
    assert nccl_version_text(22105) == "2.21.5"
    assert nccl_version_text(2708) == "2.7.8"


def test_imported_run_feeds_report_and_acceptance(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["import-nccl-tests", str(NT / "all_reduce_h100.txt"), "--out", str(run)]) == 0
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "schema: critpath.accept/1\nname: imported\nworld: 8\nnodes: 1\n"
        "fingerprint: {gpu_count: 8, gpu_name: NVIDIA H100 80GB HBM3, nccl_version: '2.21.5', pcie_gen: 5}\n"
        "checks:\n"
        "  - {name: busbw 128M, family: allreduce, select: {size_bytes: 134217728}, statistic: busbw_gbps, min: 380, source: t}\n"
        "  - {name: 8 B p99, family: allreduce, select: {size_bytes: 8}, statistic: p99_us, max: 100, source: t}\n")
    code = main(["accept", "--profile", str(profile), "--run", str(run), "--no-report"])
    out = capsys.readouterr().out
    assert "PASS              check busbw 128M: busbw_gbps 436.1 GB/s >= 380 GB/s" in out
    assert "COULD NOT VERIFY  check 8 B p99: p99_us <= 100 us:" in out and "mean only" in out
    # the import records no PCIe link: that pin could not be verified, it did not fail
    assert "COULD NOT VERIFY  pin pcie_gen: pcie_gen_max == 5: GPU 0-7: pcie_gen_max not recorded in the fingerprint" in out
    assert code == 2
