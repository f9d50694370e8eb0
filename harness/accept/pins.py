"""The machine side of acceptance: pins on what the machine is, and bounds on node facts.

A pin holds a property of the run's fingerprint to the profile's value (GPU count and name,
driver, NCCL, PCIe link, active NVLinks, world, backend and node layout). A fact bound holds a per-GPU node
fact (harness.run.nodefacts: ECC errors, remapped rows, clock slowdowns ...) to a ``max`` or ``min``.
A property the fingerprint does not hold (an import from nccl-tests output, a machine without
NVML, a GPU that does not support the call) could not be verified; it is not a failure.

PCIe pins compare the link's maximum generation and width: a GPU at rest lowers its current link
speed (Gen5 drops to Gen1), so the current one is shown beside the maximum, never judged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from harness.accept.verdicts import FAIL, PASS, UNVERIFIED, Outcome, show_value
from harness.core.fingerprintfile import LOCAL
from harness.run import nodefacts


@dataclass(frozen=True)
class DevicePin:
    key: str  # the profile's fingerprint key
    field: str  # the device field judged
    unit: str
    current: Optional[str] = None  # a field shown beside it, never judged


DEVICE_PINS = (
    DevicePin("gpu_name", "name", ""),
    DevicePin("pcie_gen", "pcie_gen_max", "PCIe gen", current="pcie_gen"),
    DevicePin("pcie_width", "pcie_width_max", "lanes", current="pcie_width"),
    DevicePin("nvlink_active", "nvlink_active", "count"),
)


def gpu_list(indices: Sequence[Any]) -> str:
    """``GPU 0-3,5``: consecutive indices as ranges."""
    nums = sorted(i for i in indices if isinstance(i, int))
    parts: list[str] = []
    for i in nums:
        if parts and parts[-1][1] == i - 1:
            parts[-1][1] = i
        else:
            parts.append([i, i])
    text = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in parts)
    other = [str(i) for i in indices if not isinstance(i, int)]
    return "GPU " + ",".join(filter(None, [text, *other]))


def _devices(fp: Mapping[str, Any]) -> list[dict]:
    return list((fp.get("gpus") or {}).get("devices") or [])


def _why_no_gpus(fp: Mapping[str, Any]) -> str:
    gpus = fp.get("gpus") or {}
    if not gpus:
        return "the fingerprint records no GPUs"
    return gpus.get("reason") or "the fingerprint lists no GPU"


def _not_recorded(fp: Mapping[str, Any], what: str) -> str:
    origin = f" ({fp['imported_from']})" if fp.get("imported_from") else ""
    return f"{what} not recorded in the fingerprint{origin}"


def _group(devices: Sequence[dict], field: str) -> dict:
    """Value -> indices of the GPUs that have it, so eight GPUs alike give one phrase, not eight."""
    out: dict = {}
    for d in devices:
        out.setdefault(d.get(field), []).append(d.get("index", "?"))
    return out


def _unrecorded_detail(fp: Mapping[str, Any], devices: Sequence[dict], field: str) -> str:
    missing = [d for d in devices if d.get(field) is None]
    by_reason: dict = {}
    for d in missing:
        reason = d.get(f"{field}_reason") or d.get("reason") or _not_recorded(fp, field)
        by_reason.setdefault(reason, []).append(d.get("index", "?"))
    return "; ".join(f"{gpu_list(ix)}: {reason}" for reason, ix in by_reason.items())


def _device_pin(pin: DevicePin, want: Any, fp: Mapping[str, Any]) -> Outcome:
    devices = _devices(fp)
    source = f"pinned by the profile (fingerprint.{pin.key})"

    def out(verdict, measured, detail):
        return Outcome("pin", pin.key, verdict, pin.field, pin.unit, measured, "==", want, None, detail, source)

    if not devices:
        return out(UNVERIFIED, None, _why_no_gpus(fp))
    groups = _group(devices, pin.field)
    differ = {v: ix for v, ix in groups.items() if v is not None and v != want}
    missing = groups.get(None)
    beside = ""
    if pin.current:
        now = _group(devices, pin.current)
        beside = "; current " + ", ".join(f"{show_value(v, pin.unit)} on {gpu_list(ix)}" for v, ix in now.items()
                                         if v is not None)
        beside = "" if beside == "; current " else beside
    if differ:
        worst = next(iter(differ))
        detail = "; ".join(f"{gpu_list(ix)} {show_value(v, pin.unit)}" for v, ix in differ.items())
        if want in groups:
            detail += f"; {gpu_list(groups[want])} as pinned"
        if missing:
            detail += f"; {_unrecorded_detail(fp, devices, pin.field)}"
        return out(FAIL, worst, detail + beside)
    if missing:
        return out(UNVERIFIED, None, _unrecorded_detail(fp, devices, pin.field) + beside)
    return out(PASS, want, gpu_list(groups[want]) + beside)


def _machine_value(key: str, fp: Mapping[str, Any]) -> tuple[Any, str]:
    """(recorded value or None, why not recorded) of a machine-wide pin."""
    gpus = fp.get("gpus") or {}
    layout = fp.get("layout") or {}
    if key == "gpu_count":
        devices = _devices(fp)
        if devices:
            return len(devices), ""
        if gpus.get("count") is not None:  # NVML ran and found none: that is a count, 0
            return int(gpus["count"]), ""
        return None, _why_no_gpus(fp)
    if key == "driver_version":
        return gpus.get("driver_version"), gpus.get("driver_version_reason") or gpus.get("reason") or \
            _not_recorded(fp, "the driver version")
    if key == "nccl_version":
        return fp.get("nccl_version"), _not_recorded(fp, "the NCCL version") + \
            ("" if fp.get("nccl_version") or fp.get("backend") == "nccl" else f" (backend {fp.get('backend')})")
    if key == "world":
        return fp.get("world"), _not_recorded(fp, "the world size")
    if key == "backend":
        return fp.get("backend"), _not_recorded(fp, "the backend")
    if key == "nodes":
        nodes = layout.get("nodes", 1 if fp.get("launch") == LOCAL else None)
        return nodes, _not_recorded(fp, "the node layout")
    if key == "ranks_per_node":
        per_node = layout.get("ranks_per_node")
        if isinstance(per_node, list):  # a joined job records each node's count
            per_node = per_node[0] if len(set(per_node)) == 1 else per_node
        return per_node, _not_recorded(fp, "ranks per node")
    # pin_outcomes asks only for MACHINE_PINS' keys, from its own fixed lists (the profile's schema
    # admits no other fingerprint key): a key here without a rule is a pin added half-way.
    raise AssertionError(f"internal invariant broken: machine pin {key!r} has no rule in _machine_value; "
                         "every key of MACHINE_PINS needs one")


# key -> (unit, where the profile pins it)
MACHINE_PINS = {"world": ("count", "pinned by the profile (world)"), "backend": ("", "pinned by the profile (backend)"),
                "nodes": ("count", "pinned by the profile (nodes)"),
                "ranks_per_node": ("count", "pinned by the profile (ranks_per_node)"),
                "gpu_count": ("count", "pinned by the profile (fingerprint.gpu_count)"),
                "driver_version": ("", "pinned by the profile (fingerprint.driver_version)"),
                "nccl_version": ("", "pinned by the profile (fingerprint.nccl_version)")}


def _machine_pin(key: str, want: Any, fp: Mapping[str, Any]) -> Outcome:
    unit, source = MACHINE_PINS[key]
    have, why = _machine_value(key, fp)
    if have is None:
        return Outcome("pin", key, UNVERIFIED, key, unit, None, "==", want, None, why, source)
    verdict = PASS if have == want else FAIL
    return Outcome("pin", key, verdict, key, unit, have, "==", want, None, fp.get("host") or "this machine", source)


def pin_outcomes(profile: Mapping[str, Any], fp: Mapping[str, Any]) -> list[Outcome]:
    """One outcome per pinned property, in the profile's terms."""
    # The profile's top-level keys that pin the run as it ran: a run of another backend measured another
    # transport, however its records read.
    outcomes = [_machine_pin(key, profile[key], fp) for key in ("world", "backend", "nodes", "ranks_per_node")
                if key in profile]
    pins = profile.get("fingerprint") or {}
    for key in ("gpu_count", "driver_version", "nccl_version"):
        if key in pins:
            outcomes.append(_machine_pin(key, pins[key], fp))
    outcomes += [_device_pin(pin, pins[pin.key], fp) for pin in DEVICE_PINS if pin.key in pins]
    return outcomes


def fact_outcome(check: Mapping[str, Any], fp: Mapping[str, Any]) -> Outcome:
    """A per-GPU fact held to ``max`` or ``min``: every GPU must hold; the worst one is shown."""
    name, unit = check["fact"], nodefacts.fact(check["fact"]).unit
    is_max = "max" in check
    bound = check["max"] if is_max else check["min"]

    def out(verdict, measured=None, margin=None, detail=""):
        return Outcome("fact", check["name"], verdict, name, unit, measured, "<=" if is_max else ">=", bound, margin,
                       detail, check["source"])

    devices = _devices(fp)
    if not devices:
        return out(UNVERIFIED, detail=_why_no_gpus(fp))
    groups = _group(devices, name)
    missing = groups.pop(None, None)
    misses = {v: ix for v, ix in groups.items() if (v > bound if is_max else v < bound)}
    if groups:
        worst = (max if is_max else min)(groups)
        margin = ((bound - worst) if is_max else (worst - bound)) / abs(bound) * 100 if bound else None
    if misses:
        detail = "; ".join(f"{gpu_list(ix)} {show_value(v, unit)}" for v, ix in sorted(misses.items()))
        if missing:
            detail += f"; {_unrecorded_detail(fp, devices, name)}"
        return out(FAIL, worst, margin, detail)
    if missing:
        return out(UNVERIFIED, detail=_unrecorded_detail(fp, devices, name))
    return out(PASS, worst, margin, gpu_list([i for ix in groups.values() for i in ix]))
