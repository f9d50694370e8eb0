"""Node facts through NVML, with a fake ``pynvml`` in sys.modules: values where a GPU gives them,
the call and NVML's error text where it does not, and no crash either way."""
from __future__ import annotations

import sys

import fake_nvml
import pynvml as real_pynvml
import pytest

from harness.run import fingerprint, nodefacts


@pytest.fixture
def use_nvml(monkeypatch):
    def install(module):
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module
    return install


def test_every_fact_of_a_healthy_idle_h100_and_the_reasons_for_what_it_cannot_give(use_nvml):
    fake = use_nvml(fake_nvml.module([fake_nvml.h100(0)]))
    gpus = fingerprint.gpus()
    assert gpus["present"] is True and gpus["driver_version"] == "550.54.15" and gpus["count"] == 1
    d = gpus["devices"][0]
    assert d["name"] == "NVIDIA H100 80GB HBM3" and d["memory_total_bytes"] == 85520809984
    assert d["ecc_enabled"] == 1
    for name in ("ecc_corrected_volatile", "ecc_uncorrected_volatile", "ecc_corrected_aggregate", "ecc_uncorrected_aggregate"):
        assert d[name] == 0 and f"{name}_reason" not in d
    assert (d["remapped_rows_correctable"], d["remapped_rows_uncorrectable"], d["remapped_rows_pending"],
            d["remapped_rows_failure"]) == (0, 0, 0, 0)
    # A100 and newer remap rows; NVML does not support page retirement there.
    for name in ("retired_pages_sbe", "retired_pages_dbe"):
        assert d[name] is None and d[f"{name}_reason"] == "nvmlDeviceGetRetiredPages: Not Supported"
    assert d["retired_pages_pending_reason"] == "nvmlDeviceGetRetiredPagesPendingStatus: Not Supported"
    assert d["clocks_event_reasons"] == ["gpu_idle"] and d["hw_slowdown_active"] == 0
    assert (d["sm_clock_mhz"], d["sm_clock_max_mhz"], d["mem_clock_mhz"], d["mem_clock_max_mhz"]) == (345, 1980, 2619, 2619)
    assert (d["pcie_gen"], d["pcie_gen_max"], d["pcie_width"], d["pcie_width_max"]) == (1, 5, 16, 16)
    assert d["nvlink_active"] == 18 and d["nvlink_links"] == 18
    assert set(nodefacts.FACT_NAMES) <= set(d)  # every declared fact is recorded, as a value or None + reason
    assert fake.calls == {"init": 1, "shutdown": 1}


def test_unsupported_and_refused_calls_are_recorded_per_field(use_nvml):
    err = fake_nvml.error
    gpu = fake_nvml.h100(
        1,
        nvmlDeviceGetTotalEccErrors=err(),  # ECC off / not supported
        nvmlDeviceGetEccMode=err(),
        nvmlDeviceGetMaxClockInfo=err(real_pynvml.NVML_ERROR_NO_PERMISSION),
        nvmlDeviceGetRemappedRows=(2, 1, 1, 1),
        nvmlDeviceGetCurrentClocksEventReasons=real_pynvml.nvmlClocksEventReasonHwSlowdown
        | real_pynvml.nvmlClocksEventReasonSwPowerCap,
        nvlinks=err(),  # a PCIe card: no NVLink at all
    )
    use_nvml(fake_nvml.module([gpu]))
    d = fingerprint.gpus()["devices"][0]
    assert d["ecc_uncorrected_volatile"] is None
    assert d["ecc_uncorrected_volatile_reason"] == "nvmlDeviceGetTotalEccErrors: Not Supported"
    assert d["ecc_enabled_reason"] == "nvmlDeviceGetEccMode: Not Supported"
    assert d["sm_clock_max_mhz"] is None and d["sm_clock_max_mhz_reason"] == "nvmlDeviceGetMaxClockInfo: Insufficient Permissions"
    assert d["sm_clock_mhz"] == 345  # the call that works still gives its value
    assert (d["remapped_rows_correctable"], d["remapped_rows_uncorrectable"], d["remapped_rows_pending"],
            d["remapped_rows_failure"]) == (2, 1, 1, 1)
    assert d["clocks_event_reasons"] == ["sw_power_cap", "hw_slowdown"] and d["hw_slowdown_active"] == 1
    # No link answered: not "0 active", which a pin on 18 links would read as a failure.
    assert d["nvlink_active"] is None and d["nvlink_active_reason"] == "nvmlDeviceGetNvLinkState: Not Supported"


def test_an_older_nvidia_ml_py_falls_back_to_throttle_reasons_or_says_what_it_lacks(use_nvml):
    use_nvml(fake_nvml.module([fake_nvml.h100()], without=("nvmlDeviceGetCurrentClocksEventReasons",)))
    assert fingerprint.gpus()["devices"][0]["clocks_event_reasons"] == ["gpu_idle"]
    use_nvml(fake_nvml.module([fake_nvml.h100()], without=("nvmlDeviceGetCurrentClocksEventReasons",
                                                           "nvmlDeviceGetCurrentClocksThrottleReasons",
                                                           "nvmlDeviceGetRemappedRows")))
    d = fingerprint.gpus()["devices"][0]
    assert d["hw_slowdown_active"] is None
    assert "nvmlDeviceGetCurrentClocksEventReasons: module 'pynvml' has no attribute" in d["hw_slowdown_active_reason"]
    assert "nvmlDeviceGetRemappedRows: module 'pynvml' has no attribute" in d["remapped_rows_pending_reason"]


def test_without_nvml_the_fingerprint_says_why(use_nvml, monkeypatch):
    use_nvml(fake_nvml.module([], init_error=fake_nvml.error(real_pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)))
    assert fingerprint.gpus() == {"present": False, "reason": "NVML unavailable: NVML Shared Library Not Found"}
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    gpus = fingerprint.gpus()
    assert gpus["present"] is False and gpus["reason"].startswith("nvidia-ml-py not importable")
    use_nvml(fake_nvml.module([]))  # NVML runs and finds no GPU: a count of 0, not a missing one
    assert fingerprint.gpus() == {"present": False, "driver_version": "550.54.15", "count": 0, "devices": [],
                                  "reason": "NVML found no devices"}


def test_a_lost_gpu_is_a_device_with_its_reason(use_nvml):
    fake = fake_nvml.module([fake_nvml.h100(0), fake_nvml.h100(1)])
    lost = fake_nvml.error(real_pynvml.NVML_ERROR_GPU_IS_LOST)

    def handle(i):
        if i == 1:
            raise lost
        return i

    fake.nvmlDeviceGetHandleByIndex = handle
    use_nvml(fake)
    devices = fingerprint.gpus()["devices"]
    assert devices[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert devices[1] == {"index": 1, "reason": "nvmlDeviceGetHandleByIndex: GPU is lost"}


def test_the_acceptance_docs_list_every_declared_fact():
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "acceptance.md").read_text()
    table = text[text.index("| fact | unit | what |"):]
    table = table[:table.index("\n\n")]
    assert [f.name for f in nodefacts.FACTS if f"`{f.name}`" not in table] == []
