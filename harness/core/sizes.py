"""Size sweeps written like nccl-tests' -b/-e/-f: ``8:64M:x2`` (multiply) or ``1K:8K:+1K`` (add),
or a comma list ``8,1K,1M``. Suffixes K/M/G are powers of 1024, as in nccl-tests."""
from __future__ import annotations

import re

from harness.core.echo import shown
from harness.core.numbers import NumberError, parse_int

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# A sweep longer than this is a typo (1:1G:+1 would be a billion cases): refused before it is built.
MAX_SIZES = 4096
# The largest message a run allocates: a GPU's memory holds a few buffers of it (an H200 has
# 141 GB); 1000G tried to allocate a terabyte and failed every case on memory.
MAX_RUN_SIZE_BYTES = 16 << 30
# The largest message the alpha-beta model is asked about: no allocation, but a finite bound keeps
# its arithmetic exact in float (2**53) and a typo of 999999999999999G out.
MAX_MODEL_SIZE_BYTES = 1 << 50
# The factor of a multiplying sweep: x2 and more; a larger one than this is a typo.
MAX_FACTOR = 999_999
# ASCII digits only: \d takes '٣' (3) and int() reads it. The digits are then read by the one
# number grammar, which also refuses a leading zero (08).
_SIZE = re.compile(r"^\s*([0-9]{1,20})\s*([KMG]?)(I?B)?\s*$", re.IGNORECASE | re.ASCII)


def parse_size(text: str, largest: int = MAX_RUN_SIZE_BYTES) -> int:
    """One size in bytes, 1 to ``largest``; ValueError naming the token otherwise."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {shown(text.strip())} (examples: 8, 4K, 64M, 1G)")
    size = parse_int(m.group(1), f"size {shown(text.strip())}") * _UNITS[m.group(2).upper()]
    if not 1 <= size <= largest:
        raise ValueError(f"size {shown(text.strip())} must be 1 to {format_size(largest)} bytes")
    return size


def parse_sizes(spec: str, largest: int = MAX_RUN_SIZE_BYTES) -> tuple[int, ...]:
    """Expand a size spec into byte counts, ascending and without duplicates, each 1 to ``largest``."""
    def parse_size(text: str) -> int:
        return _parse_size(text, largest)

    if ":" not in spec:
        parts = spec.split(",", MAX_SIZES)
        if len(parts) > MAX_SIZES:
            raise ValueError(f"size spec {shown(spec)} gives more than {MAX_SIZES} sizes; at most {MAX_SIZES}")
        sizes = []
        given_as: dict[int, str] = {}  # size -> the token that gave it first
        for part in (part.strip() for part in parts):
            if not part:
                continue
            size = parse_size(part)
            if size in given_as:  # 8,1K,1024 is a typo or a script's mistake, not a sweep of 3
                raise ValueError(f"size spec {shown(spec)}: size {size} given twice (as {given_as[size]} and {part})")
            given_as[size] = part
            sizes.append(size)
    else:
        parts = spec.split(":")
        if len(parts) != 3:
            raise ValueError(f"size sweep {shown(spec)} must be START:END:xFACTOR or START:END:+STEP")
        start, end = parse_size(parts[0]), parse_size(parts[1])
        step = parts[2].strip()
        if start < 1 or end < start:
            raise ValueError(f"size sweep {shown(spec)}: need 1 <= START <= END")
        sizes = []
        size = start
        if step[:1].lower() == "x":
            try:
                factor = parse_int(step[1:], "factor", 2, MAX_FACTOR)
            except NumberError:
                raise ValueError(f"size sweep {shown(spec)}: factor {shown(step)} must be x2 to x{MAX_FACTOR}") from None
            while size <= end:
                sizes.append(size)
                size *= factor
        elif step[:1] == "+":
            increment = parse_size(step[1:])
            if increment < 1:
                raise ValueError(f"size sweep {shown(spec)}: step must be >= 1")
            count = (end - start) // increment + 1
            if count > MAX_SIZES:
                raise ValueError(f"size sweep {shown(spec)} gives {count} sizes; at most {MAX_SIZES} (use a larger "
                                 "step or a factor, xN)")
            while size <= end:
                sizes.append(size)
                size += increment
        else:
            raise ValueError(f"size sweep {shown(spec)}: step must start with x (factor) or + (increment)")
    if not sizes:
        raise ValueError(f"size spec {shown(spec)} gives no sizes")
    if len(sizes) > MAX_SIZES:
        raise ValueError(f"size spec {shown(spec)} gives {len(sizes)} sizes; at most {MAX_SIZES}")
    return tuple(sorted(set(sizes)))


_parse_size = parse_size


def format_size(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)
