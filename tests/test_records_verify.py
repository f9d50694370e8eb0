"""Tamper tests: a results file edited by hand is caught on read, naming file, line and field;
what cannot be recomputed is listed as unverifiable, never trusted silently."""
from __future__ import annotations

import json
import math

import pytest
from conftest import derived_record

from harness.cli import main
from harness.core.store import ResultsFileError, append_record, load_records

AR = "allreduce/algo=tree,backend=gloo,dtype=float32,size_bytes=4096,world=2"
SAMPLES = [1000, 1100, 1200, 900, 1500, 1000, 1050]


def _file(tmp_path, *records):
    path = tmp_path / "results.jsonl"
    for record in records:
        append_record(path, record)
    return path


def _edit(path, line: int, change) -> None:
    lines = path.read_text().splitlines()
    data = json.loads(lines[line - 1])
    change(data)
    lines[line - 1] = json.dumps(data)
    path.write_text("\n".join(lines) + "\n")


def test_a_record_as_the_driver_wrote_it_verifies(tmp_path):
    path = _file(tmp_path, derived_record(AR, SAMPLES))
    (record,) = load_records(path)
    assert record.unverifiable == {} and record.metrics["busbw_gbps"] > 0


@pytest.mark.parametrize("field, change, says", [
    ("metrics.time_us", lambda d: d["metrics"].update(time_us=d["metrics"]["time_us"] * 100),
     "but the samples and reports give"),
    ("metrics.busbw_gbps", lambda d: d["metrics"].pop("busbw_gbps"), "missing; the samples and reports give"),
    ("metrics.speedup", lambda d: d["metrics"].update(speedup=2.0), "is not a figure allreduce version 1 derives"),
    ("metrics.algbw_gbps", lambda d: d["metrics"].update(algbw_gbps=math.nan), "is not a finite number"),
    ("params.size_bytes", lambda d: d["params"].update(size_bytes=8), "but the case ID says 4096"),
    ("params.size_bytes", lambda d: d["params"].update(size_bytes=4096.0), "but the case ID says 4096"),
    ("family", lambda d: d.update(family="sendrecv"), "is of 'allreduce'"),
    ("family", lambda d: d.update(family="broadcast", case_id=d["case_id"].replace("allreduce", "broadcast")),
     "is not a critpath family"),
    ("case_id", lambda d: d.update(case_id=d["case_id"].replace("tree", "foo")), "algo must be one of"),
    ("world", lambda d: d.update(world=4), "but the case ID says world=2"),
    ("metrics", lambda d: d.update(status="failed", error={"kind": "E", "message": "m"}),
     "a failed record (check passed) carries figures"),
])
def test_an_edited_record_is_refused_naming_file_line_and_field(tmp_path, field, change, says):
    path = _file(tmp_path, derived_record(AR, SAMPLES), derived_record(AR, SAMPLES[::-1]))
    _edit(path, 2, change)
    with pytest.raises(ResultsFileError) as refused:
        load_records(path)
    message = str(refused.value)
    assert message.startswith(f"{path}:2: field {field}") and says in message, message


def test_what_cannot_be_recomputed_is_listed_with_the_reason(tmp_path):
    other_version = derived_record(AR, SAMPLES, family_version=7)
    no_reports = derived_record("rpc/codec=raw,mode=pingpong,payload_bytes=64,transport=uds", SAMPLES,
                                metrics={"msgs_per_s": 1.0}, extra={})
    row = {"time_us": 123.456, "algbw_gbps": 254.8, "busbw_gbps": 446.0, "wrong": None}
    imported = derived_record(AR.replace("gloo", "nccl").replace("tree", "native"), [123456],
                              metrics={k: row[k] for k in ("time_us", "algbw_gbps", "busbw_gbps")},
                              extra={"imported": {"source": "nccl-tests", "samples": "mean_only",
                                                  "placement": "in_place", "in_place": row,
                                                  "collective": "all_reduce", "redop": "sum", "root": -1,
                                                  "count": 1024, "type": "float", "ranks": 2}}, check=None)
    old, bare, log = load_records(_file(tmp_path, other_version, no_reports, imported))
    assert set(old.unverifiable) == set(old.metrics)
    assert "recorded by allreduce version 7; this critpath has version 1" in old.unverifiable["busbw_gbps"]
    assert bare.unverifiable == {"msgs_per_s": "the record has no per-rank reports to recompute it from"}
    # an import's figures, identity and check are rebuilt from the row it keeps: checked, not listed
    assert log.unverifiable == {}


def test_show_refuses_an_edited_results_file_with_exit_2(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    path = _file(run, derived_record(AR, SAMPLES))
    _edit(path, 1, lambda d: d["metrics"].update(time_us=d["metrics"]["time_us"] * 100))
    assert main(["show", str(run)]) == 2
    assert f"{path}:1: field metrics.time_us" in capsys.readouterr().err
