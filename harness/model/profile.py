"""Hardware profiles for the cost models: link tiers (NVLink, PCIe, RoCE, InfiniBand, loopback)
with a per-message latency (alpha) and a per-byte time (beta, from bandwidth), GPUs per node, and
the inputs NCCL's own tuning model takes (channels, per-channel speed, intra-node hardware).

A profile is YAML (``harness.core.yamlfile``: safe, no duplicate keys, no aliases). Every number in a shipped profile carries a ``source``.
Errors name the file, line and field (``profile.yaml:12: field tiers.roce.alpha_us: ...``); a key
the reader does not know is refused, and every number is held to its declared range.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from harness.core import yamlfile
from harness.core.echo import shown
from harness.core.numbers import NumberError, check_float, check_int
from harness.core.scale import MAX_WORLD

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


# The range each number of a profile may take: past these a figure is a typo, not hardware, and
# int64 extremes carried the models' float arithmetic to inf.
ALPHA_US_RANGE = (0.0, 1e6)  # up to a second a message step
BANDWIDTH_GBYTES_S_RANGE = (1e-6, 1e6)  # 1 kB/s to 1 PB/s, per rank and direction (or channel)
GAMMA_S_PER_BYTE_RANGE = (0.0, 1e-3)  # up to a millisecond to reduce one byte
GPUS_PER_NODE_RANGE = (1, MAX_WORLD)
N_CHANNELS_RANGE = (1, 64)  # NCCL's MAXCHANNELS: 32 in 2.7.5, 64 in later releases
COMP_CAP_RANGE = (10, 199)  # a compute capability as major * 10 + minor: 1.0 to 19.9

# The keys each mapping of a profile may hold: a misspelt one would leave a default in force.
PROFILE_KEYS = ("name", "description", "gpus_per_node", "tiers", "intra", "inter", "gamma_s_per_byte", "nccl",
                "sources")
TIER_KEYS = ("kind", "alpha_us", "bandwidth_gbytes_s", "source")
NCCL_KEYS = ("intra_hw", "n_channels", "speed_intra_gbytes_s", "speed_inter_gbytes_s", "comp_cap", "source")


class _Reader:
    """The fields of one profile, each refused as ``FILE:LINE: field A.B: why``."""

    def __init__(self, path: str, root: Optional[yaml.Node]) -> None:
        self.path, self.root = path, root

    def at(self, where: list) -> str:
        return yamlfile.field_at(self.path, self.root, where)

    def known(self, where: list, given: Mapping, keys: tuple[str, ...]) -> None:
        try:
            yamlfile.refuse_unknown(Path(self.path), self.root, where, given, keys)
        except yamlfile.YamlFileError as exc:
            raise ProfileError(str(exc)) from None

    def field(self, where: list, data: Mapping, key: str, kind, *, required: bool = True, default: Any = None,
              limits: tuple = (None, None)):
        """``data[key]`` of type ``kind``; a number within ``limits``, as harness.core.numbers checks it."""
        name = self.at([*where, key])
        if key not in data or data[key] is None:
            if required:
                raise ProfileError(f"{name}: missing (required)")
            return default
        value = data[key]
        try:
            if kind is float:
                return check_float(value, name, *limits)
            if kind is int:
                return check_int(value, name, *limits)
        except NumberError as exc:
            raise ProfileError(str(exc)) from None
        if not isinstance(value, kind):
            raise ProfileError(f"{name}: must be {kind.__name__}, got {shown(value)}")
        return value


def parse_profile(data: Any, path: str = "<profile>", root: Optional[yaml.Node] = None) -> HardwareProfile:
    """The profile in ``data`` (read from ``path``, whose node tree ``root`` gives each field's line)."""
    read = _Reader(path, root)
    if not isinstance(data, dict):
        raise ProfileError(f"{path}:1: top level must be a mapping, got {type(data).__name__}")
    read.known([], data, PROFILE_KEYS)
    tiers_raw = read.field([], data, "tiers", dict)
    if not tiers_raw:
        raise ProfileError(f"{read.at(['tiers'])}: needs at least one tier")
    tiers = {}
    for name, raw in tiers_raw.items():
        where = ["tiers", name]
        if not isinstance(raw, dict):
            raise ProfileError(f"{read.at(where)}: must be a mapping")
        read.known(where, raw, TIER_KEYS)
        kind = read.field(where, raw, "kind", str)
        if kind not in TIER_KINDS:
            raise ProfileError(f"{read.at([*where, 'kind'])}: must be one of {', '.join(TIER_KINDS)}, got {kind!r}")
        tiers[str(name)] = LinkTier(
            name=str(name), kind=kind,
            alpha_us=read.field(where, raw, "alpha_us", float, limits=ALPHA_US_RANGE),
            bandwidth_gbytes_s=read.field(where, raw, "bandwidth_gbytes_s", float, limits=BANDWIDTH_GBYTES_S_RANGE),
            source=read.field(where, raw, "source", str, required=False, default=""),
        )
    intra = read.field([], data, "intra", str)
    inter = read.field([], data, "inter", str, required=False, default=intra)
    for key, value in (("intra", intra), ("inter", inter)):
        if value not in tiers:
            raise ProfileError(f"{read.at([key])}: names tier {value!r}, which is not in tiers ({', '.join(tiers)})")
    nccl = None
    if data.get("nccl") is not None:
        raw = data["nccl"]
        if not isinstance(raw, dict):
            raise ProfileError(f"{read.at(['nccl'])}: must be a mapping")
        read.known(["nccl"], raw, NCCL_KEYS)
        intra_hw = read.field(["nccl"], raw, "intra_hw", str)
        if intra_hw not in NCCL_INTRA_HW:
            raise ProfileError(f"{read.at(['nccl', 'intra_hw'])}: must be nvlink or pci, got {intra_hw!r}")
        nccl = NcclTopology(
            intra_hw=intra_hw,
            n_channels=read.field(["nccl"], raw, "n_channels", int, limits=N_CHANNELS_RANGE),
            speed_intra_gbytes_s=read.field(["nccl"], raw, "speed_intra_gbytes_s", float,
                                            limits=BANDWIDTH_GBYTES_S_RANGE),
            speed_inter_gbytes_s=read.field(["nccl"], raw, "speed_inter_gbytes_s", float,
                                            limits=BANDWIDTH_GBYTES_S_RANGE),
            comp_cap=read.field(["nccl"], raw, "comp_cap", int, required=False, default=80, limits=COMP_CAP_RANGE),
            source=read.field(["nccl"], raw, "source", str, required=False, default=""),
        )
    sources = data.get("sources") or []
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise ProfileError(f"{read.at(['sources'])}: must be a list of strings")
    return HardwareProfile(
        name=read.field([], data, "name", str),
        description=read.field([], data, "description", str, required=False, default=""),
        gpus_per_node=read.field([], data, "gpus_per_node", int, limits=GPUS_PER_NODE_RANGE),
        tiers=tiers, intra=intra, inter=inter,
        gamma_s_per_byte=read.field([], data, "gamma_s_per_byte", float, required=False, default=0.0,
                                    limits=GAMMA_S_PER_BYTE_RANGE),
        nccl=nccl, path=path, sources=tuple(sources),
    )


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
        data, root = yamlfile.load(path)
    except yamlfile.YamlFileError as exc:
        raise ProfileError(str(exc)) from None
    return parse_profile(data, str(path), root)
