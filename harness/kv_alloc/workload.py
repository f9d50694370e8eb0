"""Model shapes (bytes of KV per token) and the KV growth policies under test."""
from __future__ import annotations

from dataclasses import dataclass

from harness.core.options import UnknownName


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int

    @property
    def kv_bytes_per_token(self) -> int:
        # K and V, every layer, every KV head.
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


MODELS = {
    # Llama-2-7B: multi-head attention, 32 KV heads.
    "7b": ModelShape("7b", layers=32, kv_heads=32, head_dim=128, dtype_bytes=2),
    # Qwen2.5-32B: grouped-query attention, 8 KV heads.
    "32b": ModelShape("32b", layers=64, kv_heads=8, head_dim=128, dtype_bytes=2),
    # Llama-2/3-70B: grouped-query attention, 8 KV heads.
    "70b": ModelShape("70b", layers=80, kv_heads=8, head_dim=128, dtype_bytes=2),
}


@dataclass(frozen=True)
class Growth:
    """What a request does when its tokens outgrow its capacity."""

    add_tokens: int  # tokens of the new allocation
    new_capacity: int
    replace: bool  # True: the new allocation replaces the old (copy, then free the old)


class Policy:
    """How a request's KV is allocated: ``initial`` at admission, ``grow`` when it is full."""

    name = "policy"

    def initial(self, prompt_tokens: int, output_tokens: int) -> tuple[list[int], int]:
        """Token counts of the allocations made at admission, and the capacity in tokens."""
        raise NotImplementedError

    def grow(self, capacity: int) -> Growth:
        raise NotImplementedError

    def sizes_tokens(self, prompt_tokens: int, output_tokens: int) -> list[int]:
        """Every allocation a request makes over its life (for fitting slab classes)."""
        sizes, cap = self.initial(prompt_tokens, output_tokens)
        sizes = list(sizes)
        while cap < prompt_tokens + output_tokens:
            g = self.grow(cap)
            sizes.append(g.add_tokens)
            cap = g.new_capacity
        return sizes


class ReserveMax(Policy):
    """One allocation for prompt + ``max_new_tokens`` at admission (a static KV cache). A request
    that would generate more is cut at ``max_new_tokens``, as a server's max_tokens limit does."""

    name = "reserve_max"

    def __init__(self, max_new_tokens: int = 2048) -> None:
        self.max_new_tokens = max_new_tokens

    def initial(self, prompt_tokens: int, output_tokens: int) -> tuple[list[int], int]:
        cap = prompt_tokens + self.max_new_tokens
        return [cap], cap

    def grow(self, capacity: int) -> Growth:
        raise AssertionError("reserve_max never grows: output is capped at max_new_tokens")


class GrowByChunk(Policy):
    """A contiguous per-request buffer, reallocated ``chunk_tokens`` larger when full (allocate the
    new one, copy, free the old: what a growing contiguous KV tensor does)."""

    name = "grow_chunk"

    def __init__(self, chunk_tokens: int = 256) -> None:
        self.chunk_tokens = chunk_tokens

    def initial(self, prompt_tokens: int, output_tokens: int) -> tuple[list[int], int]:
        cap = prompt_tokens + self.chunk_tokens
        return [cap], cap

    def grow(self, capacity: int) -> Growth:
        cap = capacity + self.chunk_tokens
        return Growth(cap, cap, True)


class PerBlock(Policy):
    """Fixed blocks of ``block_tokens`` tokens, one more each time the last fills (vLLM)."""

    name = "per_block"

    def __init__(self, block_tokens: int = 16) -> None:
        self.block_tokens = block_tokens

    def initial(self, prompt_tokens: int, output_tokens: int) -> tuple[list[int], int]:
        n = -(-(prompt_tokens + 1) // self.block_tokens)
        return [self.block_tokens] * n, n * self.block_tokens

    def grow(self, capacity: int) -> Growth:
        return Growth(self.block_tokens, capacity + self.block_tokens, False)


def make_policy(name: str, max_new_tokens: int = 2048, chunk_tokens: int = 256, block_tokens: int = 16) -> Policy:
    if name == "reserve_max":
        return ReserveMax(max_new_tokens)
    if name == "grow_chunk":
        return GrowByChunk(chunk_tokens)
    if name == "per_block":
        return PerBlock(block_tokens)
    raise UnknownName(f"unknown policy {name!r}; known: reserve_max, grow_chunk, per_block")
