"""Alpha-beta(-gamma) cost models of collectives, vectorised with numpy.

Notation (Hockney; Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication
Operations in MPICH", IJHPCA 2005): a message of n bytes costs alpha + n*beta on a link; reducing
n bytes locally costs n*gamma. p ranks, n the allreduce buffer size in bytes.

Two tiers: ranks are placed node-major, ``gpus_per_node`` to a node. A synchronous step whose
partner is on another node runs at the inter-node tier's alpha/beta (every rank waits for the
slowest transfer of the step); a step inside a node at the intra-node tier's. A single-tier
machine (one node, or a flat fabric) is ``Links.single(alpha, beta)``.

Every function broadcasts ``p`` against ``n_bytes`` (pass ``p[:, None]`` and ``n[None, :]`` for a
scales x sizes grid) and returns seconds. p = 1 costs 0 for every algorithm; n = 0 leaves only the
latency terms. These are models: anything derived from them is labelled "modelled".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from harness.model.profile import HardwareProfile


@dataclass(frozen=True)
class Links:
    alpha_intra_s: float
    beta_intra_s_per_byte: float
    alpha_inter_s: float
    beta_inter_s_per_byte: float
    gpus_per_node: int
    gamma_s_per_byte: float = 0.0

    @classmethod
    def single(cls, alpha_s: float, beta_s_per_byte: float, gamma_s_per_byte: float = 0.0) -> "Links":
        """One tier for every pair (one node, or a fabric with no hierarchy)."""
        return cls(alpha_s, beta_s_per_byte, alpha_s, beta_s_per_byte, 1 << 62, gamma_s_per_byte)

    @classmethod
    def from_profile(cls, profile: HardwareProfile) -> "Links":
        a, b = profile.intra_tier, profile.inter_tier
        return cls(a.alpha_s, a.beta_s_per_byte, b.alpha_s, b.beta_s_per_byte, profile.gpus_per_node,
                   profile.gamma_s_per_byte)


def _layout(p, links: Links):
    """Per-rank layout arrays: p, ranks per node, nodes, and whether more than one node is used."""
    p = np.asarray(p, dtype=np.float64)
    if np.any(p < 1) or np.any(p != np.floor(p)):
        raise ValueError("p (ranks) must be integers >= 1")
    g = np.minimum(p, float(links.gpus_per_node))
    nodes = np.ceil(p / g)
    return p, g, nodes, nodes > 1


def _clog2(x):
    return np.ceil(np.log2(np.maximum(x, 1.0)))


def _flat(multi, links: Links):
    """Alpha and beta of a step of a flat algorithm: the slowest tier it crosses."""
    alpha = np.where(multi, links.alpha_inter_s, links.alpha_intra_s)
    beta = np.where(multi, links.beta_inter_s_per_byte, links.beta_intra_s_per_byte)
    return alpha, beta


def ring(p, n_bytes, links: Links):
    """Ring reduce-scatter + all-gather: 2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma.

    Over nodes, a rank's step k waits only for its left neighbour, so the latency chain is the
    ring's hops in order: 2(p - nodes) intra-node hops and 2(nodes - 1) inter-node ones (the count
    NCCL's tuning model uses); the bandwidth term runs at the slowest link."""
    p, _, nodes, multi = _layout(p, links)
    n = np.asarray(n_bytes, dtype=np.float64)
    _, beta = _flat(multi, links)
    frac = (p - 1) / p
    latency = 2 * (p - nodes) * links.alpha_intra_s + 2 * (nodes - 1) * links.alpha_inter_s
    return latency + 2 * frac * n * beta + frac * n * links.gamma_s_per_byte


def _tree_levels(p, g, multi):
    """Levels of a binomial tree over p node-major ranks, split into intra- and inter-node levels
    (partner distance 2^k < ranks per node stays inside the node)."""
    levels = _clog2(p)
    intra = np.where(multi, np.minimum(_clog2(g), levels), levels)
    return intra, levels - intra


def binomial_tree(p, n_bytes, links: Links):
    """Binomial reduce to a root then broadcast, whole buffer per step (no pipelining):
    2 ceil(log2 p) (alpha + n beta) + ceil(log2 p) n gamma."""
    p, g, _, multi = _layout(p, links)
    n = np.asarray(n_bytes, dtype=np.float64)
    li, le = _tree_levels(p, g, multi)
    per_intra = links.alpha_intra_s + n * links.beta_intra_s_per_byte
    per_inter = links.alpha_inter_s + n * links.beta_inter_s_per_byte
    return 2 * (li * per_intra + le * per_inter) + (li + le) * n * links.gamma_s_per_byte


def double_binary_tree(p, n_bytes, links: Links):
    """Two complementary binary trees, each reducing and broadcasting half the buffer, pipelined
    (Sanders, Speck, Traeff 2009; NCCL's tree): 2 ceil(log2 p) alpha + 2 n beta + n gamma in the
    limit of many pipeline chunks. NCCL's own tuning model uses the same 2n/busBw shape (ratio .5)."""
    p, g, _, multi = _layout(p, links)
    n = np.asarray(n_bytes, dtype=np.float64)
    li, le = _tree_levels(p, g, multi)
    _, beta = _flat(multi, links)
    many = p > 1
    return (2 * (li * links.alpha_intra_s + le * links.alpha_inter_s)
            + many * (2 * n * beta + n * links.gamma_s_per_byte))


def rabenseifner(p, n_bytes, links: Links):
    """Recursive halving reduce-scatter + recursive doubling all-gather (Rabenseifner; Thakur et al.
    2005). Power-of-two p: 2 log2(p) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma. Step j talks to a
    partner p/2^j away with n/2^j bytes: far steps cross nodes. Other p: the excess ranks first
    hand their buffer to a partner and get the result back (+2 alpha + 2 n beta + n gamma)."""
    p, g, _, multi = _layout(p, links)
    n = np.asarray(n_bytes, dtype=np.float64)
    steps = np.floor(np.log2(p))
    pow2 = 2.0 ** steps
    shape = np.broadcast(p, n).shape
    total = np.zeros(shape)
    gamma = links.gamma_s_per_byte
    for j in range(1, int(np.max(steps, initial=0)) + 1):
        active = steps >= j
        distance = pow2 / 2.0 ** j
        inter = multi & (distance >= g)
        alpha = np.where(inter, links.alpha_inter_s, links.alpha_intra_s)
        beta = np.where(inter, links.beta_inter_s_per_byte, links.beta_intra_s_per_byte)
        chunk = n / 2.0 ** j
        total = total + active * (2 * (alpha + chunk * beta) + chunk * gamma)
    alpha_f, beta_f = _flat(multi, links)
    extra = (p != pow2) * (2 * alpha_f + 2 * n * beta_f + n * gamma)
    return total + extra


def hierarchical(p, n_bytes, links: Links):
    """Intra-node ring reduce-scatter, inter-node double binary tree allreduce of each rank's n/g
    shard (one per rail, in parallel), intra-node ring all-gather."""
    p, g, nodes, _ = _layout(p, links)
    n = np.asarray(n_bytes, dtype=np.float64)
    shard = n / g
    gamma = links.gamma_s_per_byte
    intra = 2 * (g - 1) * (links.alpha_intra_s + shard * links.beta_intra_s_per_byte) + (g - 1) * shard * gamma
    across = nodes > 1
    inter = across * (2 * _clog2(nodes) * links.alpha_inter_s + 2 * shard * links.beta_inter_s_per_byte
                      + shard * gamma)
    return intra + inter


def alltoall_pairwise(p, n_bytes, links: Links):
    """Pairwise exchange, n bytes sent per rank in total (n/p to each peer), p-1 steps; with
    node-major ranks and partner r xor k, g-1 steps stay in the node, p-g cross nodes."""
    p, g, _, _ = _layout(p, links)
    n = np.asarray(n_bytes, dtype=np.float64)
    piece = n / p
    return ((g - 1) * (links.alpha_intra_s + piece * links.beta_intra_s_per_byte)
            + (p - g) * (links.alpha_inter_s + piece * links.beta_inter_s_per_byte))


def p2p(n_bytes, alpha_s: float, beta_s_per_byte: float):
    """One message on one link: alpha + n beta."""
    return alpha_s + np.asarray(n_bytes, dtype=np.float64) * beta_s_per_byte


ALLREDUCE_MODELS: dict[str, Callable] = {
    "ring": ring,
    "tree": binomial_tree,
    "dbtree": double_binary_tree,
    "rhd": rabenseifner,
    "hierarchical": hierarchical,
}

# Which measured algorithm (allreduce family ``algo``) each model describes, for calibration.
MEASURED_ALGO = {"ring": "ring", "tree": "tree"}


def sweep(scales, sizes_bytes, links: Links, algos=tuple(ALLREDUCE_MODELS)) -> np.ndarray:
    """Predicted allreduce seconds, shape (len(algos), len(scales), len(sizes))."""
    p = np.asarray(scales, dtype=np.float64)[:, None]
    n = np.asarray(sizes_bytes, dtype=np.float64)[None, :]
    out = np.empty((len(algos), p.shape[0], n.shape[1]))
    for i, name in enumerate(algos):
        out[i] = ALLREDUCE_MODELS[name](p, n, links)
    return out


def crossover_bytes(sizes_bytes, first_s, second_s) -> float:
    """Smallest size at which ``second`` becomes no slower than ``first`` (they are rows over
    ``sizes_bytes``), interpolated in log-size; nan when it never does, and sizes[0] when it
    already is at the smallest size."""
    sizes = np.asarray(sizes_bytes, dtype=np.float64)
    diff = np.asarray(second_s) - np.asarray(first_s)
    where = np.nonzero(diff <= 0)[0]
    if where.size == 0:
        return float("nan")
    i = int(where[0])
    if i == 0:
        return float(sizes[0])
    x0, x1 = np.log2(max(sizes[i - 1], 1.0)), np.log2(max(sizes[i], 1.0))
    d0, d1 = diff[i - 1], diff[i]
    return float(2 ** (x0 + (x1 - x0) * d0 / (d0 - d1)))
