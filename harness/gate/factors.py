"""What a side's processes get besides the code under test, and which of it is drawn anew per pair.

Two identical trees can differ by a whole gate's worth of something that is not their code: the
size of the environment (it moves the initial stack; Mytkowicz et al., ASPLOS 2009, measured
biases of several per cent from it), the length of the tree's path, the hash seed, which side
starts first. A factor fixed for the length of a gate lands in every pair of it alike, so the
gate's interval, built from the spread of its pairs, never sees it: that is a per-gate offset.

So every factor that cannot be held equal is drawn anew for each side of each pair (Stabilizer's
remedy, per process instead of per allocation), and what it does lands in the within-gate noise
that the interval sees:

- ``env_size``: ``CRITPATH_ENV_PAD`` of a length drawn from 0 to ``MAX_ENV_PAD_BYTES``;
- ``hash_seed``: ``PYTHONHASHSEED`` drawn from its whole range (Python draws one per process
  anyway unless the environment sets it; drawn here, a user's fixed seed does not fix both sides
  for a whole gate, and each pair's is recorded);
- ``start_order``: alternated per pair (balanced, not drawn: half the pairs each way).

``tree_path`` cannot be drawn per pair (a worktree stays where it was checked out): the two
checkouts' directories are made the same length instead. A candidate that is the working tree
keeps its own path; that difference stays fixed for the gate.

``--toggle FACTOR`` holds one factor at two different values, one per side, for a whole A/A
gate, to find out whether it moves the estimate (RMIT's and Mytkowicz's method: toggle one
factor alone). A toggled gate is an experiment, not a verdict on a change.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Optional

from harness.gate.trees import BASE, CANDIDATE, TREE_PREFIX

SIDES = (BASE, CANDIDATE)
ENV_PAD_VAR = "CRITPATH_ENV_PAD"
MAX_ENV_PAD_BYTES = 4096  # a page: the stack's start moves through every alignment within it
MAX_HASH_SEED = 4_294_967_295  # the largest PYTHONHASHSEED Python accepts
# The directory name both checkouts' prefixes are padded to: the longer side label's, so that
# /tmp/critpath-gate-base-... and /tmp/critpath-gate-candidate-... are the same length.
TREE_PREFIX_LEN = len(f"{TREE_PREFIX}{max(SIDES, key=len)}-")
TOGGLED_TREE_PATH_BYTES = 128  # --toggle tree_path: the candidate's directory this much longer

# Each factor, what the gate does with it by default, and what --toggle holds it at (base, candidate).
FACTORS = {
    "env_size": ("drawn per side per pair", f"{ENV_PAD_VAR} of 0 and {MAX_ENV_PAD_BYTES} bytes"),
    "hash_seed": ("drawn per side per pair", "PYTHONHASHSEED 0 and 1"),
    "start_order": ("alternated per pair", "the base always starts first"),
    "tree_path": ("both checkouts' directories the same length",
                  f"the candidate's directory {TOGGLED_TREE_PATH_BYTES} bytes longer"),
}


@dataclass(frozen=True)
class SideFactors:
    """What one side's processes of one pair get."""

    env_pad_bytes: int
    hash_seed: int

    def env(self) -> dict[str, str]:
        return {ENV_PAD_VAR: "x" * self.env_pad_bytes, "PYTHONHASHSEED": str(self.hash_seed)}


def tree_prefix(label: str, toggle: Optional[str]) -> str:
    """The prefix of ``label``'s checkout directory: padded to TREE_PREFIX_LEN, and for a toggled
    tree path the candidate's longer by TOGGLED_TREE_PATH_BYTES."""
    length = TREE_PREFIX_LEN + (TOGGLED_TREE_PATH_BYTES if toggle == "tree_path" and label == CANDIDATE else 0)
    return f"{TREE_PREFIX}{label}-".ljust(length, "_")


class PairFactors:
    """Draws each pair's factors from a stream of its own (the case shuffle's stays as it was) and
    keeps what each pair got, for gate.json."""

    def __init__(self, seed: int, toggle: Optional[str] = None) -> None:
        if toggle is not None and toggle not in FACTORS:
            raise ValueError(f"--toggle {toggle!r}: no such factor; the factors are {', '.join(FACTORS)}")
        self.toggle = toggle
        self._rng = random.Random(f"pair-factors-{seed}")
        self.pairs: list[dict] = []

    def draw(self, generation: int) -> tuple[tuple[str, str], dict[str, SideFactors]]:
        """The order the sides start in, and each side's factors, for pair ``generation``."""
        sides = {}
        for side in SIDES:
            pad, seed = self._rng.randint(0, MAX_ENV_PAD_BYTES), self._rng.randint(0, MAX_HASH_SEED)
            if self.toggle == "env_size":
                pad = 0 if side == BASE else MAX_ENV_PAD_BYTES
            if self.toggle == "hash_seed":
                seed = 0 if side == BASE else 1
            sides[side] = SideFactors(pad, seed)
        first = SIDES if self.toggle == "start_order" or generation % 2 == 0 else SIDES[::-1]
        self.pairs.append({"generation": generation, "first": first[0], **{s: asdict(f) for s, f in sides.items()}})
        return first, sides

    def to_dict(self) -> dict:
        return {"toggled": self.toggle, "handling": {name: (FACTORS[name][1] + " (toggled)" if name == self.toggle
                                                            else FACTORS[name][0]) for name in FACTORS},
                "pairs": list(self.pairs)}
