"""Node facts through NVML (nvidia-ml-py): per GPU, the health state an acceptance holds a node to.

Each fact is declared once here (name, unit, meaning, the NVML call that gives it). Reading a GPU
gives every fact's value, or ``None`` and ``<name>_reason`` with the call and NVML's error text
where the GPU, its driver or the installed nvidia-ml-py cannot give it: retired pages on A100 and
newer (they remap rows instead), ECC counts on a GPU with ECC off, remapped rows with MIG on.
An unsupported call is a fact about the GPU, never an error here.

The facts are read when the fingerprint is taken, before the cases run: the clocks and clock event
reasons are those of a GPU at rest (``gpu_idle`` is then normal), and a PCIe link that idles at a
lower generation shows it in ``pcie_gen`` while ``pcie_gen_max`` says what the link can do.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence


@dataclass(frozen=True)
class Fact:
    name: str
    unit: str  # count, flag (0 or 1), MHz, PCIe gen, lanes
    definition: str


FACTS = (
    Fact("ecc_enabled", "flag", "ECC mode currently on (nvmlDeviceGetEccMode)"),
    Fact("ecc_corrected_volatile", "count", "corrected (single-bit) ECC errors since the driver loaded (nvmlDeviceGetTotalEccErrors)"),
    Fact("ecc_uncorrected_volatile", "count", "uncorrected (double-bit) ECC errors since the driver loaded (nvmlDeviceGetTotalEccErrors)"),
    Fact("ecc_corrected_aggregate", "count", "corrected ECC errors over the GPU's life, from its InfoROM (nvmlDeviceGetTotalEccErrors)"),
    Fact("ecc_uncorrected_aggregate", "count", "uncorrected ECC errors over the GPU's life, from its InfoROM (nvmlDeviceGetTotalEccErrors)"),
    Fact("retired_pages_sbe", "count", "pages retired after multiple single-bit ECC errors (nvmlDeviceGetRetiredPages; before A100)"),
    Fact("retired_pages_dbe", "count", "pages retired after a double-bit ECC error (nvmlDeviceGetRetiredPages; before A100)"),
    Fact("retired_pages_pending", "flag", "a page retirement waits for the next driver reload (nvmlDeviceGetRetiredPagesPendingStatus)"),
    Fact("remapped_rows_correctable", "count", "memory rows remapped after correctable errors (nvmlDeviceGetRemappedRows; A100 and newer)"),
    Fact("remapped_rows_uncorrectable", "count", "memory rows remapped after uncorrectable errors (nvmlDeviceGetRemappedRows)"),
    Fact("remapped_rows_pending", "flag", "a row remap waits for the next GPU reset (nvmlDeviceGetRemappedRows)"),
    Fact("remapped_rows_failure", "flag", "a row remap has failed in the past: NVIDIA's RMA condition (nvmlDeviceGetRemappedRows)"),
    Fact("clocks_event_reasons_mask", "bitmask", "why the clocks are below their maximum now (nvmlDeviceGetCurrentClocksEventReasons); "
         "names in clocks_event_reasons"),
    Fact("hw_slowdown_active", "flag", "a hardware slowdown holds the clocks down now: hw_slowdown, hw_thermal_slowdown or "
         "hw_power_brake_slowdown among the clock event reasons"),
    Fact("sm_clock_mhz", "MHz", "SM clock now (nvmlDeviceGetClockInfo)"),
    Fact("sm_clock_max_mhz", "MHz", "highest SM clock the GPU runs at (nvmlDeviceGetMaxClockInfo)"),
    Fact("mem_clock_mhz", "MHz", "memory clock now (nvmlDeviceGetClockInfo)"),
    Fact("mem_clock_max_mhz", "MHz", "highest memory clock (nvmlDeviceGetMaxClockInfo)"),
    Fact("pcie_gen", "PCIe gen", "PCIe link generation now (nvmlDeviceGetCurrPcieLinkGeneration); an idle GPU lowers it"),
    Fact("pcie_gen_max", "PCIe gen", "highest PCIe link generation this GPU and its slot support (nvmlDeviceGetMaxPcieLinkGeneration)"),
    Fact("pcie_width", "lanes", "PCIe link width now (nvmlDeviceGetCurrPcieLinkWidth)"),
    Fact("pcie_width_max", "lanes", "widest PCIe link this GPU and its slot support (nvmlDeviceGetMaxPcieLinkWidth)"),
)
FACT_NAMES = tuple(f.name for f in FACTS)
_BY_NAME = {f.name: f for f in FACTS}

# Clock event reasons that mean hardware forced the clocks down (not idling, not a power cap in software).
HW_SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def fact(name: str) -> Fact:
    return _BY_NAME[name]


def why(exc: BaseException, call: str) -> str:
    """The reason a call gave nothing: ``nvmlDeviceGetRetiredPages: Not Supported``."""
    text = str(exc) or type(exc).__name__
    return f"{call}: {text}"


def record_call(out: dict, names: Sequence[str], call: str, fn: Callable[[], Any]) -> None:
    """Run one NVML call that gives ``names`` (one value, or a tuple of as many); on any error,
    each name is None beside ``<name>_reason``. An nvidia-ml-py older than the call (AttributeError)
    or a driver without it (FunctionNotFound) reads the same as a GPU that does not support it."""
    try:
        values = fn()
    except Exception as exc:  # NVMLError_NotSupported, _NoPermission, _GpuIsLost, AttributeError ...
        for name in names:
            out[name] = None
            out[f"{name}_reason"] = why(exc, call)
        return
    if len(names) == 1:
        values = (values,)
    for name, value in zip(names, values):
        out[name] = value


def _reason_bits(nvml) -> dict[int, str]:
    """Bit -> name of the clock event reasons, as nvidia-ml-py declares them (``nvmlClocksEventReasonHwSlowdown``
    -> ``hw_slowdown``); older releases call them ``nvmlClocksThrottleReason*``."""
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        bits = {}
        for attr in dir(nvml):
            rest = attr[len(prefix):]
            if not attr.startswith(prefix) or rest in ("None", "All", "UserDefinedClocks"):
                continue
            value = getattr(nvml, attr)
            if isinstance(value, int) and value and value & (value - 1) == 0:  # one bit each
                bits[value] = re.sub(r"(?<!^)(?=[A-Z])", "_", rest).lower()
        if bits:
            return bits
    return {}


def _clock_event_reasons(nvml, handle) -> int:
    # nvmlDeviceGetCurrentClocksThrottleReasons was renamed ...EventReasons; the old name goes with CUDA 14.
    fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(fn(handle))


def read(nvml, handle) -> dict:
    """Every declared fact of one GPU (and ``clocks_event_reasons``, the active reasons' names)."""
    out: dict = {}

    def ecc_mode():
        current, _pending = nvml.nvmlDeviceGetEccMode(handle)
        return int(current == nvml.NVML_FEATURE_ENABLED)

    record_call(out, ["ecc_enabled"], "nvmlDeviceGetEccMode", ecc_mode)
    for kind, error_type in (("corrected", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                             ("uncorrected", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
        for counter, counter_type in (("volatile", nvml.NVML_VOLATILE_ECC), ("aggregate", nvml.NVML_AGGREGATE_ECC)):
            record_call(out, [f"ecc_{kind}_{counter}"], "nvmlDeviceGetTotalEccErrors",
                        lambda e=error_type, c=counter_type: int(nvml.nvmlDeviceGetTotalEccErrors(handle, e, c)))
    for name, cause in (("retired_pages_sbe", nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
                        ("retired_pages_dbe", nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)):
        record_call(out, [name], "nvmlDeviceGetRetiredPages",
                    lambda c=cause: len(nvml.nvmlDeviceGetRetiredPages(handle, c)))
    record_call(out, ["retired_pages_pending"], "nvmlDeviceGetRetiredPagesPendingStatus",
                lambda: int(nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == nvml.NVML_FEATURE_ENABLED))
    record_call(out, ["remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending",
                      "remapped_rows_failure"], "nvmlDeviceGetRemappedRows",
                lambda: tuple(int(v) for v in nvml.nvmlDeviceGetRemappedRows(handle)))
    record_call(out, ["clocks_event_reasons_mask"], "nvmlDeviceGetCurrentClocksEventReasons",
                lambda: _clock_event_reasons(nvml, handle))
    mask = out["clocks_event_reasons_mask"]
    if mask is None:
        for name in ("clocks_event_reasons", "hw_slowdown_active"):
            out[name] = None
            out[f"{name}_reason"] = out["clocks_event_reasons_mask_reason"]
    else:
        names = [name for bit, name in sorted(_reason_bits(nvml).items()) if mask & bit]
        out["clocks_event_reasons"] = names
        out["hw_slowdown_active"] = int(any(n in HW_SLOWDOWN_REASONS for n in names))
    for prefix, clock in (("sm", nvml.NVML_CLOCK_SM), ("mem", nvml.NVML_CLOCK_MEM)):
        record_call(out, [f"{prefix}_clock_mhz"], "nvmlDeviceGetClockInfo",
                    lambda c=clock: int(nvml.nvmlDeviceGetClockInfo(handle, c)))
        record_call(out, [f"{prefix}_clock_max_mhz"], "nvmlDeviceGetMaxClockInfo",
                    lambda c=clock: int(nvml.nvmlDeviceGetMaxClockInfo(handle, c)))
    for name, call in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"), ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                       ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"), ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
        record_call(out, [name], call, lambda c=call: int(getattr(nvml, c)(handle)))
    return out
