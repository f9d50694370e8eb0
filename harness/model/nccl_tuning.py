"""NCCL's own cost model for allreduce (``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime``).

The constants and formulas are those of NCCL 2.7.5, ``src/graph/tuning.cc`` in NVIDIA/nccl at
commit 01afd20a77b5804e0ecf1042509dd9d20ebf9e93 (makefiles/version.mk there: 2.7.5). Later NCCL
releases retuned the numbers (more protocols, per-architecture tables, NVLS/CollNet), so this is a
model of the NCCL of the A100 generation, not of whichever NCCL a cluster runs. Only Tree and Ring
for allreduce are modelled (CollNet needs SHARP switches).

time_us = latency + n_bytes / (1000 * algbw_GBps), where
  latency(Ring) = baseLat + (nsteps - nInterSteps) * intraLat + nInterSteps * interLat,
                  nsteps = 2(p-1), nInterSteps = 2(nodes-1)
  latency(Tree) = baseLat + 2 * ((p/nodes - 1) * intraLat + log2i(nodes) * interLat)
and the bus bandwidth is nChannels * per-channel speed with the refinements below; algbw is
busBw * 0.5 for Tree and busBw * p / nsteps for Ring.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.model.profile import NcclTopology

NCCL_VERSION = "2.7.5"
NCCL_COMMIT = "01afd20a77b5804e0ecf1042509dd9d20ebf9e93"
NCCL_SOURCE = f"NVIDIA/nccl src/graph/tuning.cc @ {NCCL_COMMIT} (NCCL {NCCL_VERSION})"

ALGOS = ("tree", "ring")
PROTOCOLS = ("LL", "LL128", "Simple")

# baseLat[algo][proto], microseconds (tuning.cc: "Tree { LL, LL128, Simple } , Ring { ... }").
BASE_LAT_US = {"tree": (4.4, 4.4, 0.0), "ring": (3.6, 10.0, 8.4)}
# hwLat[hw][algo][proto], microseconds per hop; hw is NVLink, PCI or the network.
HW_LAT_US = {
    "nvlink": {"tree": (0.52, 1.2, 28.0), "ring": (0.47, 1.9, 3.4)},
    "pci": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 50.0), "ring": (2.7, 4.0, 9.6)},
}
LL128_MAX_BW_PER_CH_ALLREDUCE = 16.7  # ll128MaxBwPerCh[ncclCollAllReduce], GB/s
# treeCorrectionFactor[proto][log2(nBytes/64)], powers of two from 64 B to 128 MB.
TREE_CORRECTION = np.array([
    [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0],
    [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9],
])
RING_PLATEAU_FACTOR = 1.9  # Simple ring, multi-node allreduce, nBytes >= p/16 * 64 KiB
LL_MULTINODE_INTRA_FACTOR = 1.8  # intraLat *= 1.8 for LL when nNodes > 1
COMPCAP80_BUSBW_CAP_GBPS = 235.0


@dataclass(frozen=True)
class NcclPrediction:
    time_us: np.ndarray
    latency_us: np.ndarray
    algbw_gbytes_s: np.ndarray


def _log2i(x: np.ndarray) -> np.ndarray:
    # NCCL's log2i: floor(log2(n)) for n >= 1, and 0 for 0.
    x = np.asarray(x, dtype=np.float64)
    return np.where(x >= 1, np.floor(np.log2(np.maximum(x, 1.0))), 0.0)


def allreduce(n_ranks, n_nodes, n_bytes, topo: NcclTopology, algo: str, proto: str) -> NcclPrediction:
    """Predicted allreduce time for one algorithm and protocol, broadcast over the inputs."""
    if algo not in ALGOS:
        raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
    if proto not in PROTOCOLS:
        raise ValueError(f"proto must be one of {PROTOCOLS}, got {proto!r}")
    pi = PROTOCOLS.index(proto)
    p = np.asarray(n_ranks, dtype=np.float64)
    nodes = np.asarray(n_nodes, dtype=np.float64)
    n = np.asarray(n_bytes, dtype=np.float64)
    if np.any(p < 1) or np.any(nodes < 1) or np.any(nodes > p):
        raise ValueError("need 1 <= n_nodes <= n_ranks")
    ppn_int = np.floor(p / nodes)  # C integer division in the tree formula
    ppn = p / nodes
    cc80 = topo.comp_cap == 80

    speed = np.where(nodes <= 2, topo.speed_intra_gbytes_s, topo.speed_inter_gbytes_s)
    bus = topo.n_channels * speed
    if cc80:
        bus = np.minimum(bus, COMPCAP80_BUSBW_CAP_GBPS)
    nsteps = 2 * (p - 1)
    if algo == "ring":
        if proto == "LL":
            bus = bus / 4.0  # allreduce always takes the 1/4 branch
        elif proto == "LL128":
            bus = np.minimum(bus * np.where(ppn < 2, 0.7, 0.92), LL128_MAX_BW_PER_CH_ALLREDUCE * topo.n_channels)
        ratio = p / np.maximum(nsteps, 1)
    else:
        ll128 = cc80 and proto == "LL128"
        max_tree = np.where(nodes > 2, 105.0 if ll128 else 80.0, 130.0 if ll128 else 110.0)
        bus = np.minimum(bus * 0.9, max_tree)
        if proto == "LL":
            bus = bus / 3.8
        elif proto == "LL128":
            bus = np.minimum(bus * np.where(nodes == 1, 7.0 / 9.0, 0.915),
                             LL128_MAX_BW_PER_CH_ALLREDUCE * topo.n_channels * 7.0 / 9.0)
        ratio = 0.5
    algbw = bus * ratio

    intra_lat = HW_LAT_US[topo.intra_hw][algo][pi] * np.where((nodes > 1) & (proto == "LL"), LL_MULTINODE_INTRA_FACTOR, 1.0)
    inter_lat = HW_LAT_US["net"][algo][pi]
    latency = BASE_LAT_US[algo][pi] + np.zeros(np.broadcast(p, nodes).shape)
    if algo == "ring":
        inter_steps = 2 * (nodes - 1)
        latency = latency + (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat
    else:
        latency = latency + 2 * ((ppn_int - 1) * intra_lat + _log2i(nodes) * inter_lat)

    # ncclTopoGetAlgoTime: per-size corrections.
    log_size = _log2i(np.floor(n / 64)).astype(int)
    bw = np.broadcast_to(algbw, np.broadcast(algbw, n).shape).astype(np.float64)
    lat = np.broadcast_to(latency, np.broadcast(latency, n).shape).astype(np.float64)
    if algo == "tree":
        factor = np.where(log_size < 22, TREE_CORRECTION[pi][np.minimum(log_size, 21)], 1.0)
        bw = bw * factor
    elif proto == "Simple":
        plateau = (nodes > 1) & (n >= p / 16.0 * 65536)
        lat = lat * np.where(plateau, RING_PLATEAU_FACTOR, 1.0)
    time = lat + n / (1000.0 * bw)
    # One rank: NCCL returns before modelling anything; nothing moves.
    single = np.broadcast_to(p == 1, time.shape)
    time = np.where(single, 0.0, time)
    return NcclPrediction(time_us=time, latency_us=np.where(single, 0.0, lat), algbw_gbytes_s=bw)


def enabled_protocols(topo: NcclTopology) -> tuple[str, ...]:
    """NCCL 2.7.5 enables LL128 by default only on Volta/Ampere with NVLink inside the node (and
    the NIC close to the GPU, which this model assumes)."""
    if topo.intra_hw == "nvlink" and topo.comp_cap in (70, 80):
        return PROTOCOLS
    return ("LL", "Simple")


def choose(n_ranks, n_nodes, n_bytes, topo: NcclTopology, algos=ALGOS, protocols=None):
    """NCCL's pick: the fastest (algo, protocol) per point. Returns (time_us, labels) where labels
    holds "algo/proto" strings of the same shape."""
    protocols = protocols or enabled_protocols(topo)
    combos = [(a, pr) for a in algos for pr in protocols]
    times = np.stack([allreduce(n_ranks, n_nodes, n_bytes, topo, a, pr).time_us for a, pr in combos])
    best = np.argmin(times, axis=0)
    labels = np.array([f"{a}/{pr}" for a, pr in combos])[best]
    return np.min(times, axis=0), labels
