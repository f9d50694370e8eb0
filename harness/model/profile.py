"""Hardware profiles for the cost models: link tiers (NVLink, PCIe, RoCE, InfiniBand, loopback)
with a per-message latency (alpha) and a per-byte time (beta, from bandwidth), GPUs per node, and
the inputs NCCL's own tuning model takes (channels, per-channel speed, intra-node hardware).

A profile is YAML (``harness.core.yamlfile``: safe, no duplicate keys, no aliases). Every number in a shipped profile carries a ``source``.
Errors name the file and the field (``profile.yaml: tiers.roce.alpha_us: ...``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Optional

from harness.core import yamlfile

TIER_KINDS = ("nvlink", "pcie", "roce", "infiniband", "loopback")
NCCL_INTRA_HW = ("nvlink", "pci")


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class LinkTier:
    name: str
    kind: str  # one of TIER_KINDS
    alpha_us: float  # per message (per algorithm step) latency
    bandwidth_gbytes_s: float  # per-rank, per-direction bandwidth, 1e9 bytes/s
    source: str = ""

    @property
    def alpha_s(self) -> float:
        return self.alpha_us * 1e-6

    @property
    def beta_s_per_byte(self) -> float:
        return 1.0 / (self.bandwidth_gbytes_s * 1e9)


@dataclass(frozen=True)
class NcclTopology:
    """What NCCL's topology search would hand its tuning model (``ncclTopoTuneModel``)."""

    intra_hw: str  # nvlink or pci: which hwLat row intra-node steps use
    n_channels: int
    speed_intra_gbytes_s: float  # per channel
    speed_inter_gbytes_s: float  # per channel
    comp_cap: int = 80  # 80 = Ampere: NCCL caps busBw at 235 GB/s and raises tree LL128 caps
    source: str = ""


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    description: str
    gpus_per_node: int
    tiers: Mapping[str, LinkTier]
    intra: str  # tier name used inside a node
    inter: str  # tier name used between nodes
    gamma_s_per_byte: float = 0.0  # local reduction cost (the gamma of alpha-beta-gamma)
    nccl: Optional[NcclTopology] = None
    path: str = ""
    sources: tuple[str, ...] = field(default_factory=tuple)

    @property
    def intra_tier(self) -> LinkTier:
        return self.tiers[self.intra]

    @property
    def inter_tier(self) -> LinkTier:
        return self.tiers[self.inter]


def _field(where: str, data: Mapping, key: str, kind, *, required: bool = True, default: Any = None,
           positive: bool = False, nonneg: bool = False):
    if key not in data or data[key] is None:
        if required:
            raise ProfileError(f"{where}.{key}: missing (required)".lstrip("."))
        return default
    value = data[key]
    name = f"{where}.{key}".lstrip(".")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ProfileError(f"{name}: must be a finite number, got {value!r}")
        value = float(value)
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProfileError(f"{name}: must be an integer, got {value!r}")
    elif not isinstance(value, kind):
        raise ProfileError(f"{name}: must be {kind.__name__}, got {value!r}")
    if positive and value <= 0:
        raise ProfileError(f"{name}: must be > 0, got {value!r}")
    if nonneg and value < 0:
        raise ProfileError(f"{name}: must be >= 0, got {value!r}")
    return value


def parse_profile(data: Any, path: str = "<profile>") -> HardwareProfile:
    def fail(msg: str) -> ProfileError:
        return ProfileError(f"{path}: {msg}")

    try:
        if not isinstance(data, dict):
            raise ProfileError(f"top level must be a mapping, got {type(data).__name__}")
        tiers_raw = _field("", data, "tiers", dict)
        if not tiers_raw:
            raise ProfileError("tiers: needs at least one tier")
        tiers = {}
        for name, raw in tiers_raw.items():
            where = f"tiers.{name}"
            if not isinstance(raw, dict):
                raise ProfileError(f"{where}: must be a mapping")
            kind = _field(where, raw, "kind", str)
            if kind not in TIER_KINDS:
                raise ProfileError(f"{where}.kind: must be one of {', '.join(TIER_KINDS)}, got {kind!r}")
            tiers[str(name)] = LinkTier(
                name=str(name), kind=kind,
                alpha_us=_field(where, raw, "alpha_us", float, nonneg=True),
                bandwidth_gbytes_s=_field(where, raw, "bandwidth_gbytes_s", float, positive=True),
                source=_field(where, raw, "source", str, required=False, default=""),
            )
        intra = _field("", data, "intra", str)
        inter = _field("", data, "inter", str, required=False, default=intra)
        for key, value in (("intra", intra), ("inter", inter)):
            if value not in tiers:
                raise ProfileError(f"{key}: names tier {value!r}, which is not in tiers ({', '.join(tiers)})")
        nccl = None
        if data.get("nccl") is not None:
            raw = data["nccl"]
            if not isinstance(raw, dict):
                raise ProfileError("nccl: must be a mapping")
            intra_hw = _field("nccl", raw, "intra_hw", str)
            if intra_hw not in NCCL_INTRA_HW:
                raise ProfileError(f"nccl.intra_hw: must be nvlink or pci, got {intra_hw!r}")
            nccl = NcclTopology(
                intra_hw=intra_hw,
                n_channels=_field("nccl", raw, "n_channels", int, positive=True),
                speed_intra_gbytes_s=_field("nccl", raw, "speed_intra_gbytes_s", float, positive=True),
                speed_inter_gbytes_s=_field("nccl", raw, "speed_inter_gbytes_s", float, positive=True),
                comp_cap=_field("nccl", raw, "comp_cap", int, required=False, default=80),
                source=_field("nccl", raw, "source", str, required=False, default=""),
            )
        sources = data.get("sources") or []
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise ProfileError("sources: must be a list of strings")
        return HardwareProfile(
            name=_field("", data, "name", str),
            description=_field("", data, "description", str, required=False, default=""),
            gpus_per_node=_field("", data, "gpus_per_node", int, positive=True),
            tiers=tiers, intra=intra, inter=inter,
            gamma_s_per_byte=_field("", data, "gamma_s_per_byte", float, required=False, default=0.0, nonneg=True),
            nccl=nccl, path=path, sources=tuple(sources),
        )
    except ProfileError as exc:
        raise fail(str(exc)) from None


def shipped_profiles() -> dict[str, Path]:
    root = resources.files("harness.model").joinpath("profiles")
    return {Path(p.name).stem: Path(str(p)) for p in root.iterdir() if p.name.endswith(".yaml")}


def load_profile(spec: str | Path) -> HardwareProfile:
    """A path to a YAML file, or the name of a shipped profile (``dgx-a100-roce``)."""
    path = Path(spec)
    if not path.exists():
        shipped = shipped_profiles()
        if str(spec) in shipped:
            path = shipped[str(spec)]
        else:
            raise ProfileError(f"{spec}: no such file, and not a shipped profile ({', '.join(sorted(shipped))})")
    try:
        data, _ = yamlfile.load(path)
    except yamlfile.YamlFileError as exc:
        raise ProfileError(str(exc)) from None
    return parse_profile(data, str(path))
