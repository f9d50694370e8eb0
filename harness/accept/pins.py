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
from harness.core.fingerprintfile import LOCAL, gpu_key
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


def _ranges(indices: Sequence[Any]) -> str:
    """``0-3,5``: consecutive indices as ranges."""
    nums = sorted(i for i in indices if isinstance(i, int))
    parts: list[str] = []
    for i in nums:
        if parts and parts[-1][1] == i - 1:
            parts[-1][1] = i
        else:
            parts.append([i, i])
    text = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in parts)
    other = [str(i) for i in indices if not isinstance(i, int)]
    return ",".join(filter(None, [text, *other]))


def _host_gpus(devices: Sequence[dict]) -> str:
    """``GPU 0-3``: one host's GPUs by device ordinal, or by PCI bus id where ordinals repeat (each
    process of a log numbers the GPUs it sees, so under CUDA_VISIBLE_DEVICES every one is device 0)."""
    indices = [d.get("index", "?") for d in devices]
    if len(set(indices)) == len(indices):
        return "GPU " + _ranges(indices)
    return "GPU " + ",".join(str(d.get("pci") or d.get("index", "?")) for d in devices)


def gpu_list(devices: Sequence[dict]) -> str:
    """The GPUs as the fingerprint names them: ``GPU 0-7`` on one host, ``node01 GPU 0-3, node02
    GPU 0-3`` across hosts (an import's devices carry their host; NVML's are this machine's)."""
    by_host: dict = {}
    for d in devices:
        by_host.setdefault(d.get("host"), []).append(d)
    if len(by_host) <= 1:
        return _host_gpus(devices)
    return ", ".join(f"{host or '?'} {_host_gpus(ds)}" for host, ds in by_host.items())


def _devices(fp: Mapping[str, Any]) -> list[dict]:
    return list((fp.get("gpus") or {}).get("devices") or [])


def _why_no_gpus(fp: Mapping[str, Any]) -> str:
    gpus = fp.get("gpus") or {}
    if not gpus:
        return "the fingerprint records no GPUs"
    return gpus.get("reason") or "the fingerprint lists no GPU"


def _partly_listed(fp: Mapping[str, Any]) -> str:
    """Why the fingerprint's GPUs are not all the run's ("" where they are): -J lists the first
    GPU of each process, so a process driving eight lists one."""
    gpus = fp.get("gpus") or {}
    if not gpus.get("listed"):
        return ""
    return (f"the fingerprint lists {len(_devices(fp))} GPU(s) for {fp.get('world', '?')} ranks, not every GPU "
            f"the run used: {gpus['listed']}")


def _not_recorded(fp: Mapping[str, Any], what: str) -> str:
    origin = f" ({fp['imported_from']})" if fp.get("imported_from") else ""
    return f"{what} not recorded in the fingerprint{origin}"


def _group(devices: Sequence[dict], field: str) -> dict:
    """Value -> the GPUs that have it, so eight GPUs alike give one phrase, not eight."""
    out: dict = {}
    for d in devices:
        out.setdefault(d.get(field), []).append(d)
    return out


def _unrecorded_detail(fp: Mapping[str, Any], devices: Sequence[dict], field: str) -> str:
    missing = [d for d in devices if d.get(field) is None]
    by_reason: dict = {}
    for d in missing:
        reason = d.get(f"{field}_reason") or d.get("reason") or _not_recorded(fp, field)
        by_reason.setdefault(reason, []).append(d)
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
    if partly := _partly_listed(fp):  # the GPUs not listed may differ: only a listed one can fail
        return out(UNVERIFIED, None, f"{gpu_list(groups[want])} as pinned; {partly}" + beside)
    return out(PASS, want, gpu_list(groups[want]) + beside)


def _machine_value(key: str, fp: Mapping[str, Any]) -> tuple[Any, str]:
    """(recorded value or None, why not recorded) of a machine-wide pin."""
    gpus = fp.get("gpus") or {}
    layout = fp.get("layout") or {}
    if key == "gpu_count":
        return _gpu_count(fp)
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


def _gpu_count(fp: Mapping[str, Any]) -> tuple[Any, str]:
    """(distinct GPUs, why not countable): GPUs, not entries, since ranks may share a GPU (a
    fingerprint written before imports listed each GPU once has one entry per rank)."""
    devices = _devices(fp)
    if not devices:
        count = (fp.get("gpus") or {}).get("count")
        # NVML ran and found none: that is a count, 0
        return (int(count), "") if count is not None else (None, _why_no_gpus(fp))
    if partly := _partly_listed(fp):
        return None, partly
    unknown = [d for d in devices if gpu_key(d) is None]
    if unknown:
        ranks = [r for d in unknown for r in d.get("ranks") or []]
        return None, (f"the GPU of rank(s) {_ranges(ranks) or '?'}: neither a device ordinal nor a PCI bus id "
                      "recorded, so it cannot be told from the other GPUs")
    return len({gpu_key(d) for d in devices}), ""


def _shared(devices: Sequence[dict]) -> str:
    """``; ranks 6,7 on node01 GPU 6 0000:78:00``: the GPUs more than one rank ran on, which a count of
    ranks would have counted twice."""
    by_gpu: dict = {}
    for d in devices:
        by_gpu.setdefault(gpu_key(d), []).extend(d.get("ranks") or [d.get("index", "?")])
    shared = [(key, ranks) for key, ranks in by_gpu.items() if key is not None and len(ranks) > 1]
    return "".join(f"; ranks {_ranges(ranks)} on one GPU ({key[0] or 'this host'} {key[2]})" for key, ranks in shared)


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
    detail = fp.get("host") or "this machine"
    if key == "gpu_count" and _devices(fp):
        distinct = list({gpu_key(d): d for d in reversed(_devices(fp))}.values())[::-1]  # the first of each GPU
        detail += f"; {gpu_list(distinct)}{_shared(_devices(fp))}"
    return Outcome("pin", key, verdict, key, unit, have, "==", want, None, detail, source)


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
    if partly := _partly_listed(fp):
        return out(UNVERIFIED, detail=partly)
    return out(PASS, worst, margin, gpu_list([d for ds in groups.values() for d in ds]))
