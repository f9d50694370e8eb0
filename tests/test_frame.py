"""harness.frame and critpath export: stored runs as pandas frames, written as csv, json, parquet."""
from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import harness
from harness.cli import main
from harness.nccltests.importer import import_file
from harness.core.store import ResultsFileError, load_records

FIXTURES = Path(__file__).parent / "fixtures"
MIXED = FIXTURES / "run_mixed"


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nccl") / "run"
    import_file(FIXTURES / "nccl_tests" / "all_reduce_h100.txt", out)
    return out


def test_one_row_per_record_with_typed_columns_on_every_family_and_a_failed_case():
    records = load_records(MIXED)
    df = harness.frame(MIXED)
    assert len(df) == len(records)
    assert list(df["case_id"]) == [r.case_id for r in records]
    assert set(df["family"]) == {"allreduce", "rpc", "pipeline", "moe_a2a", "kv_alloc"}
    dtypes = df.dtypes.astype(str)
    for column, dtype in {"run_id": "string", "case_id": "string", "family": "string", "family_version": "int64",
                          "status": "string", "label": "string", "ok": "bool", "world": "int64",
                          "n_samples": "int64", "p50_us": "float64", "p99_us": "float64", "mean_us": "float64",
                          "busbw_gbps": "float64", "fragmentation_mean": "float64", "incomplete": "bool",
                          "param.size_bytes": "Int64", "param.algo": "string", "param.speedup": "Float64",
                          "commit": "string", "host": "string"}.items():
        assert dtypes[column] == dtype, column
    row = df.set_index("case_id").loc[records[0].case_id]
    summary = records[0].summary
    assert row["p99_us"] == summary.us("p99") and row["p50_us"] == summary.us("p50")
    assert row["n_samples"] == 200 and row["busbw_gbps"] == records[0].metrics["busbw_gbps"]
    assert row["param.size_bytes"] == 8 and row["param.algo"] == "native"
    assert row["commit"] == "0123456789abcdef0123456789abcdef01234567" and row["host"] == "fixture-host"
    assert row["run_id"] == "fixture-mixed" and row["run_dir"] == str(MIXED) and not row["incomplete"]
    # an rpc row has no busbw: NaN, not 0
    assert math.isnan(df.loc[df["family"] == "rpc", "busbw_gbps"].iloc[0])


def test_a_failed_case_is_a_row_with_its_error_and_no_statistics():
    df = harness.frame(MIXED)
    failed = df[df["label"] == "failed"]
    assert len(failed) == 1 and failed["case_id"].iloc[0].endswith("transport=grpc_unary")
    row = failed.iloc[0]
    assert not row["ok"] and row["n_samples"] == 0 and math.isnan(row["p50_us"]) and math.isnan(row["mean_us"])
    assert isinstance(row["error"], str) and row["error"]


def test_simulated_and_modelled_figures_say_so_in_attrs_and_in_the_row():
    df = harness.frame(MIXED)
    figures = df.attrs["figures"]
    assert figures["fragmentation_mean"]["source"] == "simulated" and figures["fragmentation_mean"]["families"] == ["kv_alloc"]
    assert figures["bubble_fill_drain_formula"]["source"] == "modelled"
    assert figures["busbw_gbps"] == {**figures["busbw_gbps"], "unit": "GB/s", "better": "higher", "source": "measured"}
    assert set(figures) == {name for r in load_records(MIXED) for name in r.metrics}
    kv = df[df["family"] == "kv_alloc"]["figures_not_measured"].iloc[0]
    assert "fragmentation_mean=simulated" in kv.split(",")
    assert df[df["family"] == "allreduce"]["figures_not_measured"].isna().all()


def test_an_imported_nccl_tests_run_gets_its_mean_and_no_fake_percentiles(imported):
    records = load_records(imported)
    df = harness.frame(imported)
    assert len(df) == len(records) and df["mean_only"].all()
    for stat in ("p50_us", "p90_us", "p99_us", "p999_us", "min_us", "max_us"):
        assert df[stat].isna().all(), stat
    assert list(df["mean_us"]) == [r.samples_ns[0] / 1e3 for r in records]
    assert list(df["busbw_gbps"]) == [r.metrics["busbw_gbps"] for r in records]
    assert df["commit"].isna().all() and not df["incomplete"].any()
    both = harness.frame(MIXED, imported)
    assert len(both) == len(df) + len(load_records(MIXED)) and both["run_id"].nunique() == 2


def test_an_import_keeps_nccl_tests_columns_typed_and_a_measured_run_has_none(imported):
    records = load_records(imported)
    df = harness.frame(imported)
    dtypes = df.dtypes.astype(str)
    for column, dtype in {"nccltests.count": "Int64", "nccltests.type": "string", "nccltests.redop": "string",
                          "nccltests.root": "Int64", "nccltests.check": "string",
                          "nccltests.out_of_place.time_us": "Float64", "nccltests.in_place.busbw_gbps": "Float64",
                          "nccltests.in_place.time_printed": "string", "nccltests.out_of_place.wrong": "Int64",
                          "check_wrong": "Int64"}.items():
        assert dtypes[column] == dtype, column
    last, block = df.iloc[-1], records[-1].extra["imported"]
    assert last["nccltests.out_of_place.time_us"] == block["out_of_place"]["time_us"]
    assert last["nccltests.in_place.busbw_gbps"] == block["in_place"]["busbw_gbps"]
    assert last["nccltests.count"] == block["count"] and last["check_wrong"] == records[-1].check.wrong
    mixed = harness.frame(MIXED)
    assert not [c for c in mixed if c.startswith("nccltests.")] and mixed["check_wrong"].notna().any()


def test_samples_frame_is_long_one_row_per_sample(imported):
    records = load_records(MIXED)
    long = harness.frame(MIXED, samples=True)
    assert len(long) == sum(len(r.samples_ns) for r in records)
    assert list(long.columns) == ["run_id", "case_id", "iteration", "sample_ns", "mean_only"]
    assert str(long["sample_ns"].dtype) == "int64" and str(long["iteration"].dtype) == "int64"
    first = long[long["case_id"] == records[0].case_id]
    assert list(first["sample_ns"]) == list(records[0].samples_ns) and list(first["iteration"]) == list(range(200))
    assert harness.samples_frame(imported)["mean_only"].all()


def test_an_incomplete_run_is_marked_not_dropped(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(MIXED, run)
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "state": "running", "cases_total": 60}))
    part = harness.frame(run)  # alone: beside MIXED, its copy, it would count one run twice
    assert len(part) == 53 and part["incomplete"].all()
    assert set(part["incomplete_reason"]) == {"incomplete: 53 of 60 cases, run.json says running"}
    assert not harness.frame(MIXED)["incomplete"].any()


def test_a_record_that_fails_verification_is_an_error_naming_file_and_line(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(MIXED, run)
    lines = (run / "results.jsonl").read_text().splitlines()
    bad = json.loads(lines[2])
    bad["summary"]["p99_ns"] += 1000  # a hand-edited percentile its samples contradict
    lines[2] = json.dumps(bad)
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ResultsFileError, match=r"results\.jsonl:3"):
        harness.frame(run)
    out = tmp_path / "x.csv"
    assert main(["export", str(run), "--format", "csv", "--out", str(out)]) == 2
    assert "results.jsonl:3" in capsys.readouterr().err and not out.exists()


def _export(tmp_path, fmt: str, *runs: Path) -> Path:
    out = tmp_path / f"runs.{fmt}"
    assert main(["export", *map(str, runs), "--format", fmt, "--out", str(out)]) == 0
    return out


def test_csv_export_round_trips(tmp_path, imported):
    df = harness.frame(MIXED, imported)
    back = pd.read_csv(_export(tmp_path, "csv", MIXED, imported), dtype=df.dtypes.astype(str).to_dict())
    pd.testing.assert_frame_equal(back, df)


def test_json_export_round_trips_with_types_and_figure_declarations(tmp_path, imported):
    df = harness.frame(MIXED, imported)
    text = _export(tmp_path, "json", MIXED, imported).read_text()
    back = pd.read_json(io.StringIO(text), orient="table")
    pd.testing.assert_frame_equal(back, df)
    doc = json.loads(text)
    assert doc["figures"] == df.attrs["figures"] and [r["run_id"] for r in doc["runs"]] == list(df["run_id"].unique())


def test_samples_export_round_trips(tmp_path):
    out = tmp_path / "s.csv"
    assert main(["export", str(MIXED), "--samples", "--format", "csv", "--out", str(out)]) == 0
    long = harness.samples_frame(MIXED)
    pd.testing.assert_frame_equal(pd.read_csv(out, dtype=long.dtypes.astype(str).to_dict()), long)


def test_parquet_without_pyarrow_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    out = tmp_path / "x.parquet"
    assert main(["export", str(MIXED), "--format", "parquet", "--out", str(out)]) == 2
    assert "pip install pyarrow" in capsys.readouterr().err and not out.exists()


def test_parquet_export_round_trips_when_pyarrow_is_installed(tmp_path):
    pytest.importorskip("pyarrow")
    df = harness.frame(MIXED)
    back = pd.read_parquet(_export(tmp_path, "parquet", MIXED))
    pd.testing.assert_frame_equal(back, df)
    assert back.attrs["figures"] == df.attrs["figures"]


@pytest.mark.integration
def test_import_harness_does_not_import_pandas():
    code = "import sys, harness; print('pandas' in sys.modules, callable(harness.frame), 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[1])
    assert out.stdout.split() == ["False", "True", "False"]  # only building a frame loads it


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_an_unverified_figure_is_marked_in_every_export(tmp_path, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    from conftest import run_with_an_unverified_figure

    run = run_with_an_unverified_figure(tmp_path / "run")
    honest, edited = load_records(run)
    out = _export(tmp_path, fmt, run)
    back = {"csv": pd.read_csv, "parquet": pd.read_parquet,
            "json": lambda p: pd.read_json(io.StringIO(p.read_text()), orient="table")}[fmt](out)
    rows = {r["case_id"]: r for r in back.to_dict("records")}
    assert pd.isna(rows[honest.case_id]["figures_unverified"]) and pd.isna(rows[honest.case_id]["unverified_reason"])
    assert rows[edited.case_id]["figures_unverified"] == ",".join(sorted(edited.unverifiable))
    assert "busbw_gbps" in edited.unverifiable  # the rewritten figure, beside it the reason
    assert rows[edited.case_id]["unverified_reason"] == edited.unverifiable["busbw_gbps"]


def test_frames_derived_from_a_frame_share_its_declarations_rather_than_copy_them():
    # pandas deep-copies attrs into every row and slice it derives; copying the figure declarations
    # for each row took half of a two-run report's build (harness/tables/frame.py).
    df = harness.frame(MIXED)
    row = df.iloc[0]
    part = df[df["family"] == df["family"].iloc[0]]
    for derived in (row, part, df.copy()):
        assert derived.attrs["figures"] is df.attrs["figures"] and derived.attrs["runs"] is df.attrs["runs"]
    assert json.loads(json.dumps(df.attrs)) == {"figures": dict(df.attrs["figures"]), "runs": list(df.attrs["runs"])}
