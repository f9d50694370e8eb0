import errno
import json
import os

import numpy as np
import pytest

from harness.core.family import CheckResult
from harness.core.records import ErrorInfo, Record, RecordError
from harness.core.stats import Summary
from harness.core.store import ResultsFileError, append_record, load_records


def make_record(case_id="selftest/fault_rank=0,mode=noop,world=1", samples=(100, 200, 300, 400), **kw):
    from harness.core import registry

    case = registry.parse(case_id)
    base = dict(
        run_id="r1", case_id=case_id, family="selftest", family_version=1,
        params=dict(case.params), status="ok", backend="gloo", world=case.world,
        started_at="2026-01-01T00:00:00+00:00", wall_s=0.5, samples_ns=tuple(samples),
        plan={"warmup": 1, "iters": len(samples)}, timer="perf_counter_ns",
        metrics={"loop_overhead_ns": 250.0}, check=CheckResult(0, 1),
    )
    base.update(kw)
    return Record(**base)


def test_summary_from_samples():
    s = Summary.of([1, 2, 3, 4, 100])
    assert (s.n, s.min_ns, s.p50_ns, s.max_ns, s.mean_ns) == (5, 1, 3, 100, 22)
    assert s.p99_ns == pytest.approx(np.percentile([1, 2, 3, 4, 100], 99))
    with pytest.raises(ValueError):
        Summary.of([])


def test_record_round_trips_through_json():
    record = make_record()
    again = Record.from_dict(json.loads(record.to_json()))
    assert again == record
    assert again.summary.p50_ns == 250


def test_tampered_summary_is_caught():
    data = json.loads(make_record().to_json())
    data["summary"]["p50_ns"] = 1.0
    with pytest.raises(RecordError, match="summary.p50_ns"):
        Record.from_dict(data, "x.jsonl:3")


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.pop("case_id"), "case_id"),
        (lambda d: d.update(status="weird"), "status"),
        (lambda d: d.update(samples_ns=[1, -2]), "samples_ns.1"),
        (lambda d: d.update(world=0), "world"),
        (lambda d: d["check"].pop("wrong"), "check"),
    ],
)
def test_schema_errors_name_the_field(mutate, field):
    data = json.loads(make_record().to_json())
    mutate(data)
    with pytest.raises(RecordError) as err:
        Record.from_dict(data, "f.jsonl:7")
    assert "f.jsonl:7" in str(err.value)
    assert field.split(".")[0] in str(err.value)


def test_failed_record_needs_an_error_and_ok_needs_samples():
    with pytest.raises(RecordError, match="error"):
        make_record(status="failed").to_json()
    with pytest.raises(RecordError, match="samples"):
        make_record(samples=(), plan=None).to_json()
    failed = make_record(status="timeout", samples=(), plan=None, error=ErrorInfo("timeout", "too slow"), check=None)
    assert Record.from_dict(json.loads(failed.to_json())) == failed
    assert not failed.ok


def test_append_then_load(tmp_path):
    path = tmp_path / "results.jsonl"
    records = [make_record(case_id=f"selftest/fault_rank=0,mode=spin,spin_iters={i},world=1") for i in range(1, 4)]
    for r in records:
        append_record(path, r)
    assert load_records(path) == records
    assert load_records(tmp_path) == records  # a run directory works too


def test_truncated_file_names_file_and_line(tmp_path):
    path = tmp_path / "results.jsonl"
    for _ in range(2):
        append_record(path, make_record())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # cut into the second record
    with pytest.raises(ResultsFileError, match=r"results.jsonl:2: truncated"):
        load_records(path)
    skipped = []
    assert len(load_records(path, skip_invalid=True, skipped=skipped)) == 1
    assert [s.line for s in skipped] == [2]


def test_corrupt_line_names_file_and_line(tmp_path):
    path = tmp_path / "results.jsonl"
    append_record(path, make_record())
    with open(path, "a") as f:
        f.write("{not json\n")
    append_record(path, make_record())
    with pytest.raises(ResultsFileError, match=r"results.jsonl:2: not valid JSON"):
        load_records(path)


def test_full_disk_leaves_the_file_valid(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    append_record(path, make_record())
    before = path.read_bytes()
    real_write = os.write

    def half_then_enospc(fd, data):
        real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_enospc)
    with pytest.raises(OSError, match="could not append"):
        append_record(path, make_record())
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert len(load_records(path)) == 1
