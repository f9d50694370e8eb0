"""Acceptance: the three verdicts (pass, fail, could not verify) and each cause of "could not
verify", data types and sources a check accepts, PCIe max vs current, node facts, profile errors,
and output lines that name statistic, unit and source."""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import fake_nvml
import pytest

from harness.accept.checks import accept, evaluate_check
from harness.accept.pins import fact_outcome, pin_outcomes
from harness.accept.profile import ProfileError, load_profile
from harness.accept.verdicts import (
    EXIT_FAIL,
    EXIT_PASS,
    EXIT_UNVERIFIED,
    FAIL,
    PASS,
    UNVERIFIED,
    line,
)
from harness.cli import main
from harness.core.store import load_run
from harness.nccltests.importer import import_file
from harness.run import fingerprint

FIXTURES = Path(__file__).parent / "fixtures"
PROFILES = Path(__file__).parent.parent / "baselines" / "profiles"
RUN = FIXTURES / "run_mixed"
NCCL_LOG = FIXTURES / "nccl_tests" / "all_reduce_h100.txt"

PROFILE = {
    "schema": "critpath.accept/1", "name": "t", "world": 2, "nodes": 1,
    "checks": [
        {"name": "8 B p99", "case": "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,world=2",
         "statistic": "p99_us", "max": 1000, "source": "test bound A"},
        {"name": "1 MiB busbw", "family": "allreduce", "select": {"size_bytes": 1048576, "algo": ["ring", "tree"]},
         "statistic": "busbw_gbps", "min": 0.1, "source": "test bound B"},
    ],
}


@pytest.fixture(scope="module")
def run():
    return load_run(RUN)


def _check(**fields) -> dict:
    return {"name": "c", "source": "s", **fields}


def test_every_shipped_profile_loads_and_names_its_sources():
    names = sorted(p.name for p in PROFILES.glob("*.yaml"))
    assert names == ["cpu-ci.yaml", "h100-8gpu.yaml", "h200-8gpu.yaml"]
    for path in PROFILES.glob("*.yaml"):
        profile = load_profile(path)
        for item in profile["checks"] + profile.get("facts", []):
            assert item["source"].strip()


def test_pass_with_margins(run):
    result = accept(PROFILE, run.records, run.fingerprint)
    assert [o.verdict for o in result.checks] == [PASS, PASS]
    p99 = result.checks[0]
    assert p99.margin_pct == pytest.approx((1000 - p99.measured) / 1000 * 100)
    busbw = result.checks[1]
    # the least favourable of the two records decides, and is named
    assert busbw.detail == "worst of 2 records: allreduce/algo=tree,backend=gloo,dtype=float32,size_bytes=1048576,world=2"
    assert [(o.name, o.verdict) for o in result.pins] == [("world", PASS), ("nodes", PASS)]
    assert result.exit_code == EXIT_PASS and result.verdict == "PASS"


def test_fail_when_a_threshold_is_missed(run):
    profile = copy.deepcopy(PROFILE)
    profile["checks"][1]["min"] = 0.9  # tree at 1 MiB is ~0.48 GB/s in the fixture
    result = accept(profile, run.records, run.fingerprint)
    assert result.checks[1].verdict == FAIL and result.checks[1].margin_pct < 0
    assert result.exit_code == EXIT_FAIL and result.verdict == "FAIL"


def test_a_missing_case_could_not_be_verified_and_says_what_the_run_lacks(run):
    missing = evaluate_check(_check(family="allreduce", select={"size_bytes": 3}, statistic="p50_us", max=1), run.records)
    assert missing.verdict == UNVERIFIED and missing.measured is None
    assert missing.detail == "no allreduce record with size_bytes=3 (the run has 8 .. 1048576)"
    absent = evaluate_check(_check(family="sendrecv", statistic="p50_us", max=1), run.records)
    assert absent.verdict == UNVERIFIED and absent.detail.startswith("no sendrecv record in this run (its families: ")


def test_a_data_type_the_run_lacks_could_not_be_verified_and_dtypes_accepts_it(run):
    bf16 = _check(case="allreduce/algo=native,backend=gloo,dtype=bfloat16,size_bytes=8,world=2", statistic="p99_us", max=1000)
    o = evaluate_check(bf16, run.records)
    assert o.verdict == UNVERIFIED
    assert o.detail == ("no allreduce record with dtype=bfloat16 (the run has float32); "
                        "a check may accept float32 too: dtypes: [bfloat16, float32]")
    o = evaluate_check({**bf16, "dtypes": ["bfloat16", "float32"]}, run.records)
    assert o.verdict == PASS and "float32 accepted by the check's dtypes" in o.detail
    # family + select form: dtypes is the data-type filter
    o = evaluate_check(_check(family="allreduce", select={"size_bytes": 8, "algo": "native"}, dtypes=["float16"],
                              statistic="p99_us", max=1000), run.records)
    assert o.verdict == UNVERIFIED and "dtype=float16 (the run has float32)" in o.detail


def test_a_failed_case_fails(run):
    o = evaluate_check(_check(family="rpc", select={"transport": "grpc_unary"}, statistic="p99_us", max=1e9), run.records)
    assert o.verdict == FAIL and "server did not become ready" in o.detail


def test_an_unknown_figure_of_an_unregistered_family_could_not_be_verified(run, tmp_path):
    # nccltests_* families are not in the registry, so the profile cannot be checked for the name at load
    records = import_file(NCCL_LOG, tmp_path / "imp", collective="all_reduce")
    fake = [r.__class__(**{**r.__dict__, "family": "nccltests_sendrecv"}) for r in records[:1]]
    o = evaluate_check(_check(family="nccltests_sendrecv", statistic="busbw", min=1), fake)
    assert o.verdict == UNVERIFIED and "no figure 'busbw'" in o.detail and o.unit == ""


def _import_with_1gib_row(tmp_path: Path, busbw: float) -> Path:
    """The fixture's 8 x H100 all_reduce_perf log (float, up to 128 MiB) with one 1 GiB row added at
    ``busbw`` GB/s in place, as a run that goes to 1 GiB prints it (its header's maxBytes 1 GiB, the
    sweep's next size); imported as a user would."""
    lines = NCCL_LOG.read_text().replace("maxBytes 134217728 ", "maxBytes 1073741824 ", 1).splitlines()
    at = next(i for i, text in enumerate(lines) if text.strip().startswith("134217728")) + 1
    time_us = 2 * 7 / 8 * 1073741824 / (busbw * 1e3)
    algbw = 1073741824 / (time_us * 1e3)
    row = (f"  1073741824     268435456     float     sum      -1  {time_us:7.1f} {algbw:7.2f} {busbw:7.2f}       0  "
           f"{time_us:7.1f} {algbw:7.2f} {busbw:7.2f}       0")
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "all_reduce_1g.txt"
    log.write_text("\n".join(lines[:at] + [row] + lines[at:]) + "\n")
    out = tmp_path / "imported"
    import_file(log, out, collective="all_reduce")
    return out


def test_an_nccl_tests_float_import_is_judged_by_the_shipped_h100_busbw_check(tmp_path, capsys):
    run_dir = _import_with_1gib_row(tmp_path, 446.0)
    code = main(["accept", "--profile", str(PROFILES / "h100-8gpu.yaml"), "--run", str(run_dir), "--no-report"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    nvls = next(t for t in lines if "NCCL's choice (NVLS)" in t)
    assert nvls.strip().startswith("PASS") and "busbw_gbps 446 GB/s >= 380 GB/s (margin +17.4 %;" in nvls
    assert "from nccl-tests all_reduce_1g.txt line 27; float32 accepted by the check's dtypes" in nvls
    assert "threshold: NVIDIA/nccl-tests issue #212" in nvls
    ring = next(t for t in lines if "busbw, ring" in t)
    assert ring.strip().startswith("COULD NOT VERIFY") and "accepts records from critpath; this run's come from nccl-tests" in ring
    p99 = next(t for t in lines if "8 B p99" in t)
    assert p99.strip().startswith("COULD NOT VERIFY")
    # the import records no PCIe, NVLink or NVML facts: could not verify, never "fail"
    assert "FAIL" not in out.replace("COULD NOT VERIFY", "")
    assert "pin pcie_gen: pcie_gen_max == 5: GPU 0-7: pcie_gen_max not recorded in the fingerprint (nccl-tests text output" in out
    assert "fact no failed row remap: remapped_rows_failure <= 0: GPU 0-7:" in out
    assert out.splitlines()[0] == f"acceptance h100-8gpu: COULD NOT VERIFY ({run_dir})"
    assert code == EXIT_UNVERIFIED
    # the same node at 300 GB/s fails the check that could be judged
    slow = _import_with_1gib_row(tmp_path / "slow", 300.0)
    assert main(["accept", "--profile", str(PROFILES / "h100-8gpu.yaml"), "--run", str(slow), "--no-report"]) == EXIT_FAIL


def test_sources_limit_where_records_may_come_from(tmp_path):
    records = import_file(NCCL_LOG, tmp_path / "imp", collective="all_reduce")
    check = _check(family="allreduce", select={"size_bytes": 134217728}, statistic="busbw_gbps", min=380)
    assert evaluate_check(check, records).verdict == PASS  # no sources: any
    o = evaluate_check({**check, "sources": ["critpath"]}, records)
    assert o.verdict == UNVERIFIED and o.detail == "the check accepts records from critpath; this run's come from nccl-tests"
    o = evaluate_check({**check, "sources": ["nccl-tests"]}, records)
    assert o.verdict == PASS and o.detail.endswith("from nccl-tests all_reduce_h100.txt line 26")
    mean_only = evaluate_check(_check(family="allreduce", select={"size_bytes": 8}, statistic="p99_us", max=100), records)
    assert mean_only.verdict == UNVERIFIED and "imported with its mean only; no p99_us" in mean_only.detail


def _h100_fp(**device_fields) -> dict:
    return {
        "world": 8, "backend": "nccl", "launch": "joined", "layout": {"nodes": 1, "ranks_per_node": [8]},
        "nccl_version": "2.21.5",
        "host": "node07", "gpus": {"present": True, "driver_version": "550.54.15", "count": 8, "devices": [
            {"index": i, "name": "NVIDIA H100 80GB HBM3", "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16,
             "pcie_width_max": 16, "nvlink_active": 18, **device_fields} for i in range(8)]},
    }


def _h100_profile() -> dict:
    profile = load_profile(PROFILES / "h100-8gpu.yaml")
    profile["fingerprint"].update(driver_version="550.54.15", nccl_version="2.21.5")
    return profile


def test_every_pin_a_profile_can_give_has_a_rule_and_a_pin_without_one_says_it_is_a_broken_invariant():
    from harness.accept.pins import DEVICE_PINS, MACHINE_PINS, _machine_value
    from harness.accept.profile import PROFILE_SCHEMA

    fingerprint_keys = set(PROFILE_SCHEMA["properties"]["fingerprint"]["properties"])
    assert fingerprint_keys == (set(MACHINE_PINS) - {"world", "backend", "nodes", "ranks_per_node"}) | {
        pin.key for pin in DEVICE_PINS}
    for key in MACHINE_PINS:
        have, why = _machine_value(key, {})  # each has a rule: nothing recorded, and why
        assert have is None and why, key
    with pytest.raises(AssertionError, match="internal invariant broken: machine pin 'zzz' has no rule"):
        _machine_value("zzz", {})


def test_pins_pass_fail_and_name_what_differs():
    profile = _h100_profile()
    assert {o.verdict for o in pin_outcomes(profile, _h100_fp())} == {PASS}
    degraded = _h100_fp()
    degraded["gpus"]["devices"][3]["pcie_width_max"] = 8
    degraded["gpus"]["devices"][5]["nvlink_active"] = 17
    degraded["nccl_version"] = "2.18.1"
    degraded["gpus"]["driver_version"] = "535.104.05"
    failed = {o.name: o for o in pin_outcomes(profile, degraded) if o.verdict == FAIL}
    assert sorted(failed) == ["driver_version", "nccl_version", "nvlink_active", "pcie_width"]
    assert failed["pcie_width"].measured == 8 and failed["pcie_width"].detail.startswith("GPU 3 8 lanes; GPU 0-2,4-7 as pinned")
    assert failed["nvlink_active"].detail.startswith("GPU 5 17; GPU 0-4,6-7 as pinned")
    assert failed["nccl_version"].measured == "2.18.1" and failed["driver_version"].measured == "535.104.05"
    assert "pin nccl_version: nccl_version 2.18.1 == 2.21.5 (node07;" in line(failed["nccl_version"])


def test_pcie_pins_judge_the_maximum_and_show_the_current_link():
    profile = _h100_profile()
    idle = _h100_fp(pcie_gen=1)  # an idle Gen5 GPU drops its link to Gen1
    gen = next(o for o in pin_outcomes(profile, idle) if o.name == "pcie_gen")
    assert gen.verdict == PASS and gen.statistic == "pcie_gen_max"
    assert gen.detail == "GPU 0-7; current 1 on GPU 0-7"
    assert "pin pcie_gen: pcie_gen_max 5 == 5 (GPU 0-7; current 1 on GPU 0-7; threshold: pinned by the profile" in line(gen)
    gen4 = _h100_fp(pcie_gen=1)
    gen4["gpus"]["devices"][2]["pcie_gen_max"] = 4  # a Gen4 slot caps this GPU's link
    gen = next(o for o in pin_outcomes(profile, gen4) if o.name == "pcie_gen")
    assert gen.verdict == FAIL and gen.detail.startswith("GPU 2 4; GPU 0-1,3-7 as pinned")
    old = _h100_fp()  # a fingerprint from before the maximum was recorded: current only
    for d in old["gpus"]["devices"]:
        del d["pcie_gen_max"]
    gen = next(o for o in pin_outcomes(profile, old) if o.name == "pcie_gen")
    assert gen.verdict == UNVERIFIED and "pcie_gen_max not recorded in the fingerprint" in gen.detail
    assert "current 5 on GPU 0-7" in gen.detail


def test_a_machine_without_nvml_could_not_verify_its_gpu_pins_and_facts(run):
    profile = _h100_profile()
    outcomes = {o.name: o for o in pin_outcomes(profile, run.fingerprint)}
    assert outcomes["world"].verdict == FAIL and outcomes["world"].measured == 2
    assert outcomes["gpu_count"].verdict == UNVERIFIED and outcomes["gpu_count"].detail == "NVML unavailable: fixture"
    assert outcomes["pcie_gen"].verdict == UNVERIFIED and outcomes["nccl_version"].verdict == UNVERIFIED
    fact = fact_outcome(profile["facts"][0], run.fingerprint)
    assert fact.verdict == UNVERIFIED and fact.detail == "NVML unavailable: fixture"
    # NVML ran and found no GPU: that is a recorded count, and it fails a pin on 8
    none = {"world": 8, "gpus": {"present": False, "count": 0, "devices": [], "reason": "NVML found no devices"}}
    count = next(o for o in pin_outcomes(profile, none) if o.name == "gpu_count")
    assert count.verdict == FAIL and count.measured == 0


def test_node_facts_from_nvml_pass_fail_or_could_not_verify_per_gpu(monkeypatch):
    err = fake_nvml.error
    gpus = [fake_nvml.h100(i) for i in range(8)]
    gpus[6]["nvmlDeviceGetRemappedRows"] = (0, 1, 1, 0)  # an uncorrectable error's row waits for a reset
    gpus[2]["nvmlDeviceGetTotalEccErrors"] = err()
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.module(gpus))
    fp = {**_h100_fp(), "gpus": fingerprint.gpus()}
    facts = {f["fact"]: fact_outcome(f, fp) for f in _h100_profile()["facts"]}
    pending = facts["remapped_rows_pending"]
    assert pending.verdict == FAIL and pending.measured == 1 and pending.detail == "GPU 6 1"
    assert line(pending).startswith("FAIL              fact no row remap waiting for a GPU reset: remapped_rows_pending 1 <= 0 (GPU 6 1; threshold: NVIDIA GPU Memory Error Management")
    ecc = facts["ecc_uncorrected_volatile"]
    assert ecc.verdict == UNVERIFIED and ecc.detail == "GPU 2: nvmlDeviceGetTotalEccErrors: Not Supported"
    assert facts["remapped_rows_failure"].verdict == PASS and facts["remapped_rows_failure"].detail == "GPU 0-7"
    assert facts["hw_slowdown_active"].verdict == PASS
    # the idle link at Gen1 passes the Gen5 pin, and says so
    pins = {o.name: o for o in pin_outcomes(_h100_profile(), fp)}
    assert pins["pcie_gen"].verdict == PASS and "current 1 on GPU 0-7" in pins["pcie_gen"].detail
    result = accept(_h100_profile(), [], fp)
    assert result.exit_code == EXIT_FAIL  # the pending remap fails; the unverified ECC count does not hide it


def test_verdict_precedence_and_an_incomplete_run(run):
    profile = copy.deepcopy(PROFILE)
    profile["checks"].append(_check(family="allreduce", select={"size_bytes": 3}, statistic="p50_us", max=1))
    assert accept(profile, run.records, run.fingerprint).exit_code == EXIT_UNVERIFIED
    profile["checks"][1]["min"] = 0.9
    assert accept(profile, run.records, run.fingerprint).exit_code == EXIT_FAIL
    result = accept(PROFILE, run.records, run.fingerprint, incomplete="12 of 33 cases")
    assert result.exit_code == EXIT_UNVERIFIED and result.verdict == "COULD NOT VERIFY"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def _line_of(text: str, needle: str) -> int:
    return next(i for i, t in enumerate(text.splitlines(), 1) if needle in t)


def test_profile_errors_name_file_line_and_field(tmp_path):
    base = (PROFILES / "cpu-ci.yaml").read_text()
    select_dtype = base.replace("select: {size_bytes: 1048576,", "select: {dtype: float32, size_bytes: 1048576,")
    cases = [  # (profile text, text on the line named, field, what the message says)
        (base.replace("statistic: busbw_gbps", "statistic: [busbw_gbps]"), "[busbw_gbps]", "checks.1.statistic",
         "expected a string (a statistic's name), got a list"),
        (base.replace("    min: 0.01\n", "    min: 0.01\n    sources: [nccl_tests]\n"), "sources:", "checks.1.sources.0",
         "'nccl_tests' is not one of ['critpath', 'nccl-tests']"),
        (select_dtype.replace("    min: 0.01\n", "    min: 0.01\n    dtypes: [float32]\n"), "dtypes:", "checks.1.dtypes",
         "give the data types once: in dtypes, or in select.dtype, not both"),
        (base.replace("    max: 20000\n", "    max: 20000\n    dtypes: [bfloat16]\n"), "dtypes:", "checks.0.dtypes",
         "the case is in float32, which dtypes ['bfloat16'] leaves out; list the case's own data type too"),
        (base.replace("statistic: busbw_gbps", "statistic: busbw"), "statistic: busbw", "checks.1.statistic",
         "family 'allreduce' declares no figure 'busbw'; it declares "),
        (base + "facts:\n  - {name: x, fact: ecc_errors, max: 0, source: s}\n", "ecc_errors", "facts.0.fact",
         "'ecc_errors' is not one of ['ecc_enabled', "),
    ]
    for text, needle, field, message in cases:
        path = _write(tmp_path, text)
        with pytest.raises(ProfileError) as info:
            load_profile(path)
        assert f"p.yaml:{_line_of(text, needle)}: field {field}: " in str(info.value), str(info.value)
        assert message in str(info.value)
    assert main(["accept", "--profile", str(path), "--run", str(RUN)]) == EXIT_UNVERIFIED


def test_cli_lines_name_statistic_unit_and_source_and_json_is_v2(tmp_path, capsys):
    profile = _write(tmp_path, json.dumps(PROFILE))  # JSON is YAML
    out = tmp_path / "out"
    assert main(["accept", "--profile", str(profile), "--run", str(RUN), "--out", str(out)]) == EXIT_PASS
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"acceptance t: PASS ({RUN})"
    p99 = next(t for t in lines if "8 B p99" in t)
    assert p99.startswith("  PASS              check 8 B p99: p99_us ") and " us <= 1000 us (margin +" in p99
    assert p99.endswith("; threshold: test bound A)")
    busbw = next(t for t in lines if "1 MiB busbw" in t)
    assert " GB/s >= 0.1 GB/s (margin +" in busbw and busbw.endswith("threshold: test bound B)")
    assert "  PASS              pin world: world 2 == 2 (fixture-host; threshold: pinned by the profile (world))" in lines
    assert lines[-2] == "4 pass, 0 fail, 0 could not verify: PASS, exit 0"
    data = json.loads((out / "acceptance.json").read_text())
    assert data["schema"] == "critpath.acceptance/2" and data["verdict"] == "PASS"
    assert data["counts"] == {"pass": 4, "fail": 0, "could not verify": 0}
    assert [c["unit"] for c in data["checks"]] == ["us", "GB/s"] and data["checks"][0]["statistic"] == "p99_us"
    assert (data["checks"][0]["op"], data["checks"][0]["bound"], data["checks"][0]["threshold"]) == ("<=", 1000, "<= 1000 us")
    assert [p["name"] for p in data["pins"]] == ["world", "nodes"] and data["facts"] == []
    report = (out / "report.md").read_text()
    assert "## Acceptance: t — PASS" in report and "threshold source" in report


def test_acceptance_pins_the_sha256_of_each_file_it_judged(tmp_path, capsys):
    import hashlib
    import shutil

    from harness.core.store import RUN_FILES

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "fingerprint.json").unlink()  # a file the run lacks is said to be absent, not skipped
    profile = _write(tmp_path, json.dumps(PROFILE))
    capsys.readouterr()
    main(["accept", "--profile", str(profile), "--run", str(run), "--no-report"])
    printed = capsys.readouterr().out.splitlines()
    data = json.loads((run / "acceptance.json").read_text())
    real = {name: hashlib.sha256((run / name).read_bytes()).hexdigest() if (run / name).exists() else None
            for name in RUN_FILES}
    assert real["results.jsonl"] and real["run.json"] and real["fingerprint.json"] is None
    assert data["judged_sha256"] == real
    for name, digest in real.items():
        assert f"  judged {name} sha256 {digest or '(absent)'}" in printed, printed


def test_a_run_file_that_changes_while_it_is_read_is_not_judged(tmp_path, capsys, monkeypatch):
    import shutil

    from harness.accept import command

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    real_load = command.load_run

    def load_then_write(path):
        loaded = real_load(path)
        with open(path / "run.json", "a") as f:  # a writer between the read and the second digest
            f.write("\n")
        return loaded

    monkeypatch.setattr(command, "load_run", load_then_write)
    capsys.readouterr()
    code = main(["accept", "--profile", str(_write(tmp_path, json.dumps(PROFILE))), "--run", str(run), "--no-report"])
    out = capsys.readouterr().out
    assert code == EXIT_UNVERIFIED and "run.json changed while the run was read" in out, out
    assert not (run / "acceptance.json").exists()


@pytest.mark.integration
def test_cpu_ci_profile_passes_here(tmp_path):
    """The shipped CPU profile runs its cases through the runner and passes (CI runs this)."""
    out = tmp_path / "run"
    code = main(["accept", "--profile", str(PROFILES / "cpu-ci.yaml"), "--out", str(out), "--no-report"])
    assert code == EXIT_PASS, (out / "acceptance.json").read_text()
