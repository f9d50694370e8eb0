"""A stand-in for nvidia-ml-py's ``pynvml`` module, for machines without a GPU.

It keeps the real module's constants and error class (nvidia-ml-py is a dependency, and its
``NVMLError(NVML_ERROR_NOT_SUPPORTED)`` prints "Not Supported" as on a real GPU), and answers each
device call from a per-GPU table: a value, a function of the call's arguments, or an exception to
raise, as NVML does for a call a GPU does not support.
"""
from __future__ import annotations

import types
from types import SimpleNamespace

import pynvml as real

DEVICE_CALLS = (
    "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows", "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth",
)


def error(code: int = real.NVML_ERROR_NOT_SUPPORTED) -> Exception:
    return real.NVMLError(code)


def h100(index: int = 0, **overrides) -> dict:
    """One healthy, idle H100 SXM as NVML describes it: link at Gen1 now, Gen5 at most; rows remapped
    instead of pages retired (page retirement is not supported from A100 on)."""
    clocks = {real.NVML_CLOCK_SM: 345, real.NVML_CLOCK_MEM: 2619}
    clocks_max = {real.NVML_CLOCK_SM: 1980, real.NVML_CLOCK_MEM: 2619}
    spec = {
        "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": f"GPU-00000000-0000-0000-0000-00000000000{index}",
        "nvmlDeviceGetMemoryInfo": SimpleNamespace(total=85520809984),
        "nvmlDeviceGetEccMode": (real.NVML_FEATURE_ENABLED, real.NVML_FEATURE_ENABLED),
        "nvmlDeviceGetTotalEccErrors": lambda error_type, counter: 0,
        "nvmlDeviceGetRetiredPages": error(),
        "nvmlDeviceGetRetiredPagesPendingStatus": error(),
        "nvmlDeviceGetRemappedRows": (0, 0, 0, 0),
        "nvmlDeviceGetCurrentClocksEventReasons": real.nvmlClocksEventReasonGpuIdle,
        "nvmlDeviceGetCurrentClocksThrottleReasons": real.nvmlClocksThrottleReasonGpuIdle,
        "nvmlDeviceGetClockInfo": clocks.__getitem__,
        "nvmlDeviceGetMaxClockInfo": clocks_max.__getitem__,
        "nvmlDeviceGetCurrPcieLinkGeneration": 1,
        "nvmlDeviceGetMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        "nvlinks": 18,  # active links, or an exception for a GPU without NVLink
    }
    spec.update(overrides)
    return spec


def module(gpus: list[dict], driver: str = "550.54.15", init_error: Exception | None = None,
           without: tuple[str, ...] = ()) -> types.ModuleType:
    """A ``pynvml`` whose devices are ``gpus``; ``without`` names calls an older nvidia-ml-py lacks."""
    fake = types.ModuleType("pynvml")
    for name in dir(real):
        if name.startswith(("NVML_", "nvmlClocks")) or name == "NVMLError":
            setattr(fake, name, getattr(real, name))
    calls = {"init": 0, "shutdown": 0}
    fake.calls = calls

    def init():
        calls["init"] += 1
        if init_error is not None:
            raise init_error

    fake.nvmlInit = init
    fake.nvmlShutdown = lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1)
    fake.nvmlSystemGetDriverVersion = lambda: driver
    fake.nvmlDeviceGetCount = lambda: len(gpus)
    fake.nvmlDeviceGetHandleByIndex = lambda i: i

    def answer(name):
        def call(handle, *args):
            got = gpus[handle][name]
            if isinstance(got, Exception):
                raise got
            return got(*args) if callable(got) else got
        return call

    for name in DEVICE_CALLS:
        if name not in without:
            setattr(fake, name, answer(name))

    def nvlink_state(handle, link):
        links = gpus[handle]["nvlinks"]
        if isinstance(links, Exception):
            raise links
        if link >= links:
            raise error(real.NVML_ERROR_INVALID_ARGUMENT)
        return real.NVML_FEATURE_ENABLED

    fake.nvmlDeviceGetNvLinkState = nvlink_state
    return fake
