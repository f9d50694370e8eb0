"""The seventh probe's outputs and completeness defects: `model` and `accept` wrote their files one
by one (a full disk left a new model.json beside the previous plots, a new acceptance.json beside
the previous report), and `model --calibrate` fitted a killed run's sweep and exited 0."""
from __future__ import annotations

import pytest

import hashlib
import os
import resource
import subprocess
import sys

import numpy as np

from conftest import ROOT, run_cli

from harness.accept.verdicts import EXIT_UNVERIFIED
from test_accept import PROFILES, _import_with_1gib_row
from test_model_calibrate import _write_run

pytestmark = pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes

FULL_AFTER_BYTES = 20 << 10  # a file limit that a small JSON passes and a plot or an HTML report does not


def _files(directory):
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _on_a_full_disk(*args: str) -> subprocess.CompletedProcess:
    """critpath ARGS in a process whose files may grow to FULL_AFTER_BYTES, as `ulimit -f` or a
    nearly full disk leaves it (Python ignores SIGXFSZ: the write fails with EFBIG)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (FULL_AFTER_BYTES, FULL_AFTER_BYTES))

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240, preexec_fn=limit)


def test_a_model_on_a_full_disk_leaves_the_previous_model_whole(tmp_path):
    out = tmp_path / "mf"
    assert run_cli("model", "--ranks", "8", "--out", str(out)).returncode == 0
    before = _files(out)
    assert {"model.json", "modelled_times.csv", "modelled_time_vs_size.png"} <= set(before)
    done = _on_a_full_disk("model", "--ranks", "8,16,32", "--out", str(out))
    assert done.returncode == 2 and "File too large" in done.stderr, done.stderr
    assert _files(out) == before  # model.json and csv the earlier model's, beside its own plots


def test_a_model_removes_the_plots_an_earlier_model_drew_and_it_did_not(tmp_path):
    run = _write_run(tmp_path / "run", np.random.default_rng(3))
    out = tmp_path / "m"
    assert run_cli("model", "--ranks", "2,4", "--sizes", "8:1M:x4", "--calibrate", str(run),
                   "--out", str(out)).returncode == 0
    assert (out / "calibration_fit.png").exists()
    assert run_cli("model", "--ranks", "2,4", "--sizes", "8:1M:x4", "--out", str(out)).returncode == 0
    assert not (out / "calibration_fit.png").exists()  # no calibration's fit beside an uncalibrated model
    assert run_cli("model", "--ranks", "2,4", "--no-plots", "--out", str(out)).returncode == 0
    assert not list(out.glob("*.png"))


def test_model_calibrate_refuses_a_run_that_is_not_whole(tmp_path):
    run = _write_run(tmp_path / "run", np.random.default_rng(3))
    lines = (run / "results.jsonl").read_text().splitlines()
    (run / "results.jsonl").write_text("\n".join(lines[:-2]) + "\n")  # a run killed before its last two cases
    done = run_cli("model", "--ranks", "8", "--no-plots", "--calibrate", str(run), "--out", str(tmp_path / "m"))
    assert done.returncode == 2, done.stdout
    assert f"{run}: incomplete: {len(lines) - 2} of {len(lines)} cases" in done.stderr.replace("\n", " "), done.stderr
    assert not (tmp_path / "m").exists()


def test_an_acceptance_on_a_full_disk_leaves_the_previous_verdict_and_report_whole(tmp_path):
    profile = str(PROFILES / "h100-8gpu.yaml")
    fast, slow, out = _import_with_1gib_row(tmp_path / "fast", 446.0), _import_with_1gib_row(tmp_path / "slow", 300.0), \
        tmp_path / "acc"
    first = run_cli("accept", "--profile", profile, "--run", str(fast), "--out", str(out))
    assert first.returncode == EXIT_UNVERIFIED, first.stdout + first.stderr  # an import holds no NVML facts
    before = _files(out)
    assert {"acceptance.json", "report.md", "report.html"} <= set(before)
    done = _on_a_full_disk("accept", "--profile", profile, "--run", str(slow), "--out", str(out))
    assert "File too large" in done.stderr, done.stdout + done.stderr
    assert _files(out) == before  # never the slow run's verdict beside the fast run's report
