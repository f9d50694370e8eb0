"""The articles' scale claims, reproduced under stated parameters (every figure modelled).

- A1.tree: tree instead of ring AllReduce, "single-step communication time -38 % at 24+ GPUs",
  NCCL ncclAllReduce benchmark, 32 GPUs = 4 x DGX A100, RoCEv2 between nodes.
- A2.allreduce: "AllReduce at 10K-GPU scale 680 ms -> 195 ms" (cluster of 128 x 8 H800 in the
  article's table; message size and algorithms not stated).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.model import alphabeta as ab
from harness.model import nccl_tuning
from harness.model.profile import HardwareProfile

A1_SCALES = (8, 16, 24, 32)
A1_TARGET_CHANGE = -0.38
A2_BEFORE_S, A2_AFTER_S = 0.680, 0.195


@dataclass(frozen=True)
class A1Row:
    gpus: int
    nodes: int
    size_bytes: int
    ring_us: float
    tree_us: float

    @property
    def change(self) -> float:
        return self.tree_us / self.ring_us - 1.0


def a1_alphabeta(profile: HardwareProfile, size_bytes: int) -> list[A1Row]:
    """Ring vs double binary tree (NCCL's tree) in the two-tier alpha-beta model."""
    links = ab.Links.from_profile(profile)
    rows = []
    for p in A1_SCALES:
        nodes = -(-p // profile.gpus_per_node)
        ring = float(ab.ring(p, size_bytes, links)) * 1e6
        tree = float(ab.double_binary_tree(p, size_bytes, links)) * 1e6
        rows.append(A1Row(p, nodes, size_bytes, ring, tree))
    return rows


def a1_nccl(profile: HardwareProfile, size_bytes: int, proto: str) -> list[A1Row]:
    """Ring vs Tree in NCCL 2.7.5's own tuning model, one protocol."""
    if profile.nccl is None:
        raise ValueError(f"{profile.path or profile.name}: no nccl section, NCCL's model needs it")
    rows = []
    for p in A1_SCALES:
        nodes = -(-p // profile.gpus_per_node)
        ring = float(nccl_tuning.allreduce(p, nodes, size_bytes, profile.nccl, "ring", proto).time_us)
        tree = float(nccl_tuning.allreduce(p, nodes, size_bytes, profile.nccl, "tree", proto).time_us)
        rows.append(A1Row(p, nodes, size_bytes, ring, tree))
    return rows


def a1_nccl_pick(profile: HardwareProfile, size_bytes: int) -> list[A1Row]:
    """NCCL_ALGO=Tree vs NCCL_ALGO=Ring, NCCL picking the protocol within each (what an
    nccl-tests run with the variable set measures)."""
    if profile.nccl is None:
        raise ValueError(f"{profile.path or profile.name}: no nccl section, NCCL's model needs it")
    rows = []
    for p in A1_SCALES:
        nodes = -(-p // profile.gpus_per_node)
        ring, _ = nccl_tuning.choose(p, nodes, size_bytes, profile.nccl, algos=("ring",))
        tree, _ = nccl_tuning.choose(p, nodes, size_bytes, profile.nccl, algos=("tree",))
        rows.append(A1Row(p, nodes, size_bytes, float(ring), float(tree)))
    return rows


@dataclass(frozen=True)
class A2Solution:
    """The (alpha, n) at which a flat ring takes ``before`` and the ``after`` algorithm takes
    ``after`` seconds, with beta fixed by the profile's inter-node tier."""

    gpus: int
    after_algo: str
    beta_ns_per_byte: float
    alpha_us: float
    size_bytes: float
    ring_latency_share: float  # share of the 680 ms that is alpha terms

    @property
    def plausible_alpha(self) -> bool:
        # Per-step latency of a network hop with a GPU proxy: a few us (NCCL: 2.7-9.6 us per net
        # hop) up to tens of us on a loaded RoCE fabric; beyond 100 us it is not one hop.
        return 1.0 <= self.alpha_us <= 100.0


def a2_solve(profile: HardwareProfile, gpus: int, after_algo: str = "dbtree") -> A2Solution:
    """Solve the 2x2 linear system: ring(alpha, n) = 680 ms, after(alpha, n) = 195 ms.

    Both models are linear in alpha and n with flat-fabric coefficients (beta = the inter tier's):
    ring: 2(p-1) alpha + 2(p-1)/p n beta; dbtree: 2 ceil(log2 p) alpha + 2 n beta;
    hierarchical: 2(g-1) alpha_intra + 2(g-1)/g n beta_intra + 2 ceil(log2 nodes) alpha + 2 n/g beta.
    """
    beta = profile.inter_tier.beta_s_per_byte
    p = float(gpus)
    levels = float(np.ceil(np.log2(p)))
    ring_row = [2 * (p - 1), 2 * (p - 1) / p * beta]
    rhs = [A2_BEFORE_S, A2_AFTER_S]
    if after_algo == "dbtree":
        after_row = [2 * levels, 2 * beta]
    elif after_algo == "hierarchical":
        g = float(profile.gpus_per_node)
        nodes = float(np.ceil(p / g))
        a_i, b_i = profile.intra_tier.alpha_s, profile.intra_tier.beta_s_per_byte
        after_row = [2 * np.ceil(np.log2(nodes)), 2 * (g - 1) / g * b_i + 2 * beta / g]
        rhs[1] -= 2 * (g - 1) * a_i
    else:
        raise ValueError(f"after_algo must be dbtree or hierarchical, got {after_algo!r}")
    alpha, n = np.linalg.solve(np.array([ring_row, after_row]), np.array(rhs))
    return A2Solution(gpus, after_algo, beta * 1e9, float(alpha) * 1e6, float(n),
                      float(ring_row[0] * alpha / A2_BEFORE_S))
