"""Whether two paths overlap: one is the other, or lies inside it.

An output directory that overlaps an input's (``compare --out`` a side, ``history --results``
``--out``) puts what a command writes among what it reads, or what it reads among what it
writes: both commands refuse it before anything runs, by this one rule.
"""
from __future__ import annotations

from pathlib import Path


def overlap(path: Path, other: Path) -> str:
    """How ``path`` overlaps ``other``, said as a predicate of ``path`` ("is", "lies inside",
    "holds"), by their resolved paths, so a symbolic link or ``..`` hides nothing; "" when
    neither holds the other."""
    path, other = Path(path).resolve(), Path(other).resolve()
    if path == other:
        return "is"
    if path.is_relative_to(other):
        return "lies inside"
    if other.is_relative_to(path):
        return "holds"
    return ""
