"""`critpath run` end to end: spawned gloo ranks, a valid run directory, faults as records."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from harness.core.records import Record
from harness.core.store import load_records
from conftest import ROOT

pytestmark = pytest.mark.integration

AR = "allreduce/algo={algo},backend=gloo,dtype=float32,size_bytes={size},world={world}"


def test_run_writes_a_valid_run_directory(cli, tmp_path):
    out = tmp_path / "run"
    proc = cli("run", "--families", "allreduce", "--world", "2", "--sizes", "8,4K", "--iters", "30", "--warmup", "2",
               "--out", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    records = load_records(out)
    assert sorted(r.case_id for r in records) == sorted(
        AR.format(algo=a, size=s, world=2) for a in ("native", "ring", "tree") for s in (8, 4096)
    )
    for r in records:
        assert r.ok and r.check.wrong == 0 and r.check.checked == 2 * (r.params["size_bytes"] // 4)  # summed over ranks
        assert len(r.samples_ns) == 30 and r.plan == {"warmup": 2, "iters": 30}
        assert r.reduction == "max_over_ranks" and r.timer == "perf_counter_ns"
        assert r.metrics["busbw_gbps"] == pytest.approx(r.metrics["algbw_gbps"])  # factor 1 at world 2
    fp = json.loads((out / "fingerprint.json").read_text())
    assert fp["backend"] == "gloo" and fp["world"] == 2 and fp["cpu_count"] >= 1
    assert fp["gpus"]["present"] is False and fp["gpus"]["reason"]  # absent GPU is a fact
    meta = json.loads((out / "run.json").read_text())
    assert meta["state"] == "finished" and meta["cases_ok"] == 6
    # The table names the nccl-tests columns.
    assert "busbw (GB/s)" in proc.stdout and "#wrong" in proc.stdout
    show = cli("show", str(out))
    assert show.returncode == 0 and "busbw (GB/s)" in show.stdout


@pytest.mark.slow
def test_faults_become_records_and_the_run_goes_on(cli, tmp_path):
    out = tmp_path / "run"
    ok_case = AR.format(algo="ring", size=64, world=2)
    cases = [
        "selftest/fault_rank=1,mode=raise,world=2", ok_case,
        "selftest/fault_rank=1,mode=hang,world=2", ok_case.replace("ring", "tree"),
        "selftest/fault_rank=1,mode=exit,world=2", "selftest/fault_rank=0,mode=wrong,world=2",
        ok_case.replace("ring", "native"),
    ]
    args = ["run", "--timeout", "4", "--iters", "20", "--warmup", "1", "--out", str(out)]
    for c in cases:
        args += ["--case", c]
    t0 = time.monotonic()
    proc = cli(*args)
    assert proc.returncode == 1, proc.stderr  # some cases failed: non-zero exit
    assert time.monotonic() - t0 < 120  # the hang was bounded by its timeout
    by_id = {r.case_id: r for r in load_records(out)}
    assert list(by_id) == list(dict.fromkeys(cases))
    raised = by_id[cases[0]]
    assert raised.status == "failed" and raised.error.kind == "InjectedFault" and raised.error.rank == 1
    assert by_id[cases[2]].status == "timeout" and "within 4 s" in by_id[cases[2]].error.message
    died = by_id[cases[4]]
    assert died.status == "failed" and died.error.kind == "exit" and "code 17" in died.error.message
    wrong = by_id[cases[5]]
    assert wrong.status == "failed" and wrong.check.wrong == 1 and wrong.error.kind == "check"
    for good in (ok_case, ok_case.replace("ring", "tree"), ok_case.replace("ring", "native")):
        assert by_id[good].ok, by_id[good].error
    # No rank outlives the run.
    leftover = subprocess.run(["pgrep", "-f", "critpath-rank|spawn_main"], capture_output=True, text=True)
    assert str(out) not in leftover.stdout


@pytest.mark.slow
def test_sigkill_leaves_a_loadable_results_file(tmp_path):
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--families", "allreduce", "--sizes", "8:1M:x2", "--iters", "200",
         "--out", str(out)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    results = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not results.exists() or results.read_bytes().count(b"\n") < 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    records = load_records(out)  # raises, naming file and line, if anything is half-written
    assert len(records) >= 2
    assert all(isinstance(r, Record) and r.ok for r in records)


@pytest.mark.slow
def test_truncated_results_give_file_and_line(cli, tmp_path):
    out = tmp_path / "run"
    assert cli("run", "--case", "selftest/fault_rank=0,mode=noop,world=1", "--iters", "10", "--out", str(out)).returncode == 0
    results = out / "results.jsonl"
    results.write_bytes(results.read_bytes()[:-25])
    proc = cli("show", str(out))
    assert proc.returncode == 2
    assert f"{results}:1: truncated record" in proc.stderr


def test_unknown_case_id_is_a_usage_error(cli, tmp_path):
    proc = cli("run", "--case", "allreduce/algo=ring,colour=red", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2
    assert "has no key 'colour'" in proc.stderr
    assert not (tmp_path / "x").exists()
