"""Acceptance: pass and fail per check with margins, fingerprint pins, profile errors, exit codes."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness.accept import (CANNOT, EXIT_CANNOT, EXIT_FAIL, EXIT_PASS, FAIL, PASS, ProfileError, accept,
                            fingerprint_problems, load_profile)
from harness.cli import main
from harness.report.run import load_run

FIXTURES = Path(__file__).parent / "fixtures"
PROFILES = Path(__file__).parent.parent / "baselines" / "profiles"
RUN = FIXTURES / "run_mixed"

PROFILE = {
    "schema": "critpath.accept/1", "name": "t", "world": 2, "nodes": 1,
    "checks": [
        {"name": "8 B p99", "case": "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,world=2",
         "statistic": "p99_us", "max": 1000, "source": "test"},
        {"name": "1 MiB busbw", "family": "allreduce", "select": {"size_bytes": 1048576, "algo": ["ring", "tree"]},
         "statistic": "busbw_gbps", "min": 0.1, "source": "test"},
    ],
}


@pytest.fixture(scope="module")
def run():
    return load_run(RUN)


def test_every_shipped_profile_loads():
    names = sorted(p.name for p in PROFILES.glob("*.yaml"))
    assert names == ["cpu-ci.yaml", "h100-8gpu.yaml", "h200-8gpu.yaml"]
    for path in PROFILES.glob("*.yaml"):
        profile = load_profile(path)
        for check in profile["checks"]:
            assert check["source"].strip()


def test_pass_with_margins(run):
    result = accept(PROFILE, run.records, run.fingerprint)
    assert [o.verdict for o in result.outcomes] == [PASS, PASS]
    p99 = result.outcomes[0]
    assert p99.margin_pct == pytest.approx((1000 - p99.measured) / 1000 * 100)
    busbw = result.outcomes[1]
    assert busbw.detail == "worst of 2 records"
    assert result.exit_code == EXIT_PASS


def test_fail_when_a_threshold_is_missed(run):
    profile = copy.deepcopy(PROFILE)
    profile["checks"][1]["min"] = 0.9  # tree at 1 MiB is ~0.48 GB/s in the fixture
    result = accept(profile, run.records, run.fingerprint)
    assert result.outcomes[1].verdict == FAIL and result.outcomes[1].margin_pct < 0
    assert result.exit_code == EXIT_FAIL


def test_missing_record_could_not_run_and_failed_case_fails(run):
    profile = copy.deepcopy(PROFILE)
    profile["checks"] = [
        {"name": "absent", "family": "allreduce", "select": {"size_bytes": 3}, "statistic": "p50_us", "max": 1, "source": "t"},
    ]
    result = accept(profile, run.records, run.fingerprint)
    assert result.outcomes[0].verdict == CANNOT and result.exit_code == EXIT_CANNOT
    profile["checks"].append({"name": "grpc", "family": "rpc", "select": {"transport": "grpc_unary"},
                              "statistic": "p99_us", "max": 1e9, "source": "t"})
    result = accept(profile, run.records, run.fingerprint)
    assert result.outcomes[1].verdict == FAIL and "server did not become ready" in result.outcomes[1].detail
    assert result.exit_code == EXIT_FAIL


H100_FP = {
    "world": 8, "launch": "joined", "layout": {"nodes": 1, "ranks_per_node": 8}, "nccl_version": "2.21.5",
    "gpus": {"present": True, "driver_version": "550.54.15", "devices": [
        {"index": i, "name": "NVIDIA H100 80GB HBM3", "pcie_gen": 5, "pcie_width": 16, "nvlink_active": 18}
        for i in range(8)]},
}


def test_fingerprint_pins_name_what_differs():
    profile = load_profile(PROFILES / "h100-8gpu.yaml")
    profile["fingerprint"].update(driver_version="550.54.15", nccl_version="2.21.5")
    assert fingerprint_problems(profile, H100_FP) == []
    degraded = copy.deepcopy(H100_FP)
    degraded["gpus"]["devices"][3]["pcie_width"] = 8
    degraded["gpus"]["devices"][5]["nvlink_active"] = 17
    degraded["nccl_version"] = "2.18.1"
    degraded["gpus"]["driver_version"] = "535.104.05"
    problems = fingerprint_problems(profile, degraded)
    assert "GPU 3: pcie_width is 8, the profile pins 16" in problems
    assert "GPU 5: nvlink_active is 17, the profile pins 18" in problems
    assert "NCCL 2.18.1, the profile pins 2.21.5" in problems
    assert "driver 535.104.05, the profile pins 550.54.15" in problems
    assert len(problems) == 4


def test_fingerprint_on_a_cpu_machine_fails_a_gpu_profile(run):
    profile = load_profile(PROFILES / "h100-8gpu.yaml")
    problems = fingerprint_problems(profile, run.fingerprint)
    assert any(p.startswith("0 GPU(s) (NVML unavailable: fixture), the profile pins 8") for p in problems)
    assert any("world size is 2, the profile pins 8" in p for p in problems)


def test_profile_error_names_file_line_and_field(tmp_path):
    text = (PROFILES / "cpu-ci.yaml").read_text().replace("statistic: busbw_gbps", "statistic: [busbw_gbps]")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "[busbw_gbps]" in l)
    assert f"p.yaml:{line}: field checks.1.statistic" in str(info.value)
    assert main(["accept", "--profile", str(path), "--run", str(RUN)]) == EXIT_CANNOT


def test_cli_on_a_stored_run_writes_report_and_json(tmp_path, capsys):
    profile = tmp_path / "p.yaml"
    profile.write_text(json.dumps(PROFILE))  # JSON is YAML
    out = tmp_path / "out"
    assert main(["accept", "--profile", str(profile), "--run", str(RUN), "--out", str(out)]) == EXIT_PASS
    text = capsys.readouterr().out
    assert "acceptance t: PASS" in text and "margin" in text
    data = json.loads((out / "acceptance.json").read_text())
    assert data["verdict"] == "PASS" and len(data["checks"]) == 2
    assert "## Acceptance: t — PASS" in (out / "report.md").read_text()


@pytest.mark.integration
def test_cpu_ci_profile_passes_here(tmp_path):
    """The shipped CPU profile runs its cases through the runner and passes (CI runs this)."""
    out = tmp_path / "run"
    code = main(["accept", "--profile", str(PROFILES / "cpu-ci.yaml"), "--out", str(out), "--no-report"])
    assert code == EXIT_PASS, (out / "acceptance.json").read_text()
