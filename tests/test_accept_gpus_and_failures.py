"""Acceptance counts GPUs, not ranks; says it cannot count what a log does not list; and fails a
run whose records of a checked family failed or gave wrong answers at a size no check selects."""
from __future__ import annotations

import json
from pathlib import Path

from harness.accept.checks import accept
from harness.accept.pins import pin_outcomes
from harness.accept.verdicts import EXIT_FAIL, FAIL, UNVERIFIED
from harness.core.store import load_run
from harness.nccltests.importer import import_file

NCCL = Path(__file__).parent / "fixtures" / "nccl_tests"
LOG = NCCL / "all_reduce_h100.txt"
SAME_GPU = NCCL / "public" / "rtx5090_broadcast_mpi_2rank_same_gpu_v2.18.0.txt"
BUSBW_128M = {"name": "busbw 128M", "family": "allreduce", "select": {"size_bytes": 134217728},
              "statistic": "busbw_gbps", "min": 380, "source": "t"}


def _pins(path: Path, tmp_path: Path, **pins) -> dict:
    import_file(path, tmp_path / "imp")
    fp = load_run(tmp_path / "imp").fingerprint
    return {o.name: o for o in pin_outcomes({"fingerprint": pins}, fp)}, fp


def test_two_ranks_on_one_gpu_are_one_gpu_named_by_the_logs_device(tmp_path):
    lines = LOG.read_text().splitlines(keepends=True)
    lines[12] = lines[12].replace("device  7 [0000:88:00]", "device  6 [0000:78:00]")  # rank 7 on rank 6's GPU
    log = tmp_path / "seven_gpus.txt"
    log.write_text("".join(lines))
    pins, fp = _pins(log, tmp_path, gpu_count=8)
    count = pins["gpu_count"]
    assert count.verdict == FAIL and count.measured == 7, count
    assert "GPU 0-6" in count.detail and "ranks 6-7 on one GPU (node01 0000:78:00)" in count.detail
    shared = fp["gpus"]["devices"][-1]
    assert (shared["index"], shared["pci"], shared["ranks"]) == (6, "0000:78:00", [6, 7])


def test_the_shipped_log_of_two_ranks_on_one_gpu_counts_one_gpu(tmp_path):
    pins, fp = _pins(SAME_GPU, tmp_path, gpu_count=2)
    assert pins["gpu_count"].verdict == FAIL and pins["gpu_count"].measured == 1
    assert [(d["index"], d["ranks"]) for d in fp["gpus"]["devices"]] == [(0, [0, 1])]


def test_a_json_log_that_lists_one_gpu_per_process_could_not_verify_the_gpus(tmp_path):
    data = json.loads(LOG.with_suffix(".json").read_text())
    data["config"]["ngpus"] = 8  # one process driving eight GPUs: -J lists its first
    data["config"]["devices"] = data["config"]["devices"][:1]
    log = tmp_path / "one_proc_8gpu.json"
    log.write_text(json.dumps(data))
    pins, _ = _pins(log, tmp_path, gpu_count=8, gpu_name="NVIDIA H100 80GB HBM3")
    for name in ("gpu_count", "gpu_name"):
        assert pins[name].verdict == UNVERIFIED, pins[name]
        assert "lists 1 GPU(s) for 8 ranks" in pins[name].detail and "first GPU of each" in pins[name].detail
    # a listed GPU of another name is still a failure
    pins, _ = _pins(log, tmp_path / "b", gpu_name="NVIDIA H200")
    assert pins["gpu_name"].verdict == FAIL


def test_a_wrong_answer_at_a_size_no_check_selects_fails_naming_the_record(tmp_path):
    lines = LOG.read_text().split("\n")
    row = lines[17].split()
    row[8] = "2"  # the 8 B row: two wrong elements out of place
    lines[17] = "  ".join(row)
    lines[26] = "# Out of bounds values : 1 FAILED"  # the trailer agrees
    log = tmp_path / "wrong_at_8B.txt"
    log.write_text("\n".join(lines))
    import_file(log, tmp_path / "imp")
    run = load_run(tmp_path / "imp")
    result = accept({"name": "p", "checks": [BUSBW_128M]}, run.records, run.fingerprint)
    assert result.checks[0].verdict != FAIL  # the check's own record is fine
    assert result.exit_code == EXIT_FAIL, result.outcomes
    (failed,) = result.records
    assert failed.verdict == FAIL and failed.measured == 1
    assert "size_bytes=8," in failed.detail and "wrong_at_8B.txt line 18 wrong: 2 wrong of" in failed.detail
