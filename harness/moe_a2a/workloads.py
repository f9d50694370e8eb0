"""Routing workloads: which experts each token of each rank chooses (the gate's output).

Deterministic given a seed. Each rank's tokens are routed by *quota*: per-expert counts are the
expected counts of the distribution, rounded by largest remainder, so a case's load is exactly
the one it names (a 17x hot expert is 17x, not 17x plus sampling noise), and a token never picks
the same expert twice. Which token gets which expert is a seeded shuffle.

Kinds (``skew`` is the kind's one parameter):
- ``uniform``: every expert equally likely (``skew`` ignored).
- ``zipf``: expert popularity ~ 1 / rank**s, popularity order a seeded permutation of experts.
- ``hot``: one expert at ``skew`` = F times the load of each other expert (F=17: claim A1.moe_skew).
- ``unbalanced``: after DeepEP's "unbalanced ratio": the experts of one rank each get ``skew`` = R
  times the weight of every other expert, so that rank receives R x the mean (token, expert)
  pairs of the others. Counted in routed pairs, not distinct tokens.

``phase`` moves the hot spot (used for drifting load in adaptive-placement cases): the hot expert
of phase p is the p-th entry of the seeded expert permutation.

An expert cannot take more than every token of a rank once (top-k picks distinct experts); if the
skew asks for more, the excess is spread over the others and ``quota`` reports what was possible.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("uniform", "zipf", "hot", "unbalanced")


@dataclass(frozen=True)
class Shape:
    """The size of one MoE layer's step: per-rank tokens, hidden size and expert layout."""

    tokens_per_rank: int
    hidden: int
    bytes_per_elem: int
    experts_per_rank: int
    top_k: int
    world: int

    def __post_init__(self) -> None:
        for name in ("tokens_per_rank", "hidden", "experts_per_rank", "top_k", "world"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.bytes_per_elem not in (1, 2, 4):
            raise ValueError(f"bytes_per_elem must be 1 (fp8, model only), 2 or 4, got {self.bytes_per_elem}")
        if self.top_k > self.experts:
            raise ValueError(f"top_k={self.top_k} exceeds the {self.experts} experts")

    @property
    def experts(self) -> int:
        return self.experts_per_rank * self.world

    @property
    def token_bytes(self) -> int:
        return self.hidden * self.bytes_per_elem


# Realistic sizes for GPUs (DeepEP's normal-kernel benchmark: 4096 tokens, hidden 7168, top-8 of
# 256 experts); experts_per_rank follows from the world: 256 / world.
DEEPEP_TOKENS, DEEPEP_HIDDEN, DEEPEP_TOP_K, DEEPEP_EXPERTS = 4096, 7168, 8, 256


@dataclass(frozen=True)
class Workload:
    kind: str
    skew: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"workload kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind in ("hot", "unbalanced") and self.skew < 1.0:
            raise ValueError(f"{self.kind} workload needs skew >= 1 (a factor), got {self.skew}")
        if self.kind == "zipf" and self.skew < 0.0:
            raise ValueError(f"zipf exponent must be >= 0, got {self.skew}")


def expert_order(workload: Workload, experts: int) -> np.ndarray:
    """Experts from most to least popular (a seeded permutation; independent of the rank)."""
    return np.random.default_rng([workload.seed, 7]).permutation(experts)


def hot_expert(workload: Workload, experts: int, phase: int = 0) -> int:
    return int(expert_order(workload, experts)[phase % experts])


def expert_weights(workload: Workload, experts: int, experts_per_rank: int, phase: int = 0) -> np.ndarray:
    """Routing probability of each expert (sums to 1)."""
    weights = np.ones(experts, dtype=np.float64)
    order = np.roll(expert_order(workload, experts), -phase)
    if workload.kind == "zipf":
        weights[order] = 1.0 / np.arange(1, experts + 1, dtype=np.float64) ** workload.skew
    elif workload.kind == "hot":
        weights[order[0]] = workload.skew
    elif workload.kind == "unbalanced":
        hot_rank = int(order[0]) // experts_per_rank
        weights[hot_rank * experts_per_rank:(hot_rank + 1) * experts_per_rank] = workload.skew
    return weights / weights.sum()


def quota(weights: np.ndarray, tokens: int, top_k: int) -> np.ndarray:
    """Integer (token, expert) pairs per expert: sums to tokens*top_k, each <= tokens."""
    total = tokens * top_k
    target = np.asarray(weights, dtype=np.float64) * total
    capped = np.zeros(target.size, dtype=bool)
    # Water-fill: cap at `tokens`, give the excess to the uncapped in proportion to their weight.
    for _ in range(target.size):
        over = (target > tokens) & ~capped
        if not over.any():
            break
        capped |= over
        excess = float((target[capped] - tokens).sum())
        target[capped] = tokens
        free = ~capped
        target[free] += excess * target[free] / target[free].sum()
    counts = np.floor(target).astype(np.int64)
    short = total - int(counts.sum())
    # Largest remainder, ties by expert id, never past the cap.
    room = np.where(counts < tokens, target - counts, -1.0)
    for e in np.lexsort((np.arange(room.size), -room))[:short]:
        counts[e] += 1
    assert counts.sum() == total and counts.max() <= tokens
    return counts


def route(workload: Workload, shape: Shape, rank: int, phase: int = 0) -> np.ndarray:
    """Logical expert ids chosen by each token of ``rank``: int64 array [tokens, top_k]."""
    T, k = shape.tokens_per_rank, shape.top_k
    counts = quota(expert_weights(workload, shape.experts, shape.experts_per_rank, phase), T, k)
    # Lay the experts' runs out choice-major: position j is token j % T, choice j // T. A run is
    # at most T long, so its positions fall on distinct tokens: no token gets an expert twice.
    flat = np.repeat(np.arange(shape.experts, dtype=np.int64), counts)
    choices = flat.reshape(k, T).T.copy()
    rng = np.random.default_rng([workload.seed, rank, phase])
    return choices[rng.permutation(T)]


def expert_load(workload: Workload, shape: Shape, phase: int = 0) -> np.ndarray:
    """(token, expert) pairs each expert receives in one step, summed over every rank."""
    load = np.zeros(shape.experts, dtype=np.int64)
    for rank in range(shape.world):
        load += np.bincount(route(workload, shape, rank, phase).ravel(), minlength=shape.experts)
    return load
