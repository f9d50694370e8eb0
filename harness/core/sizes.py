"""Size sweeps written like nccl-tests' -b/-e/-f: ``8:64M:x2`` (multiply) or ``1K:8K:+1K`` (add),
or a comma list ``8,1K,1M``. Suffixes K/M/G are powers of 1024, as in nccl-tests."""
from __future__ import annotations

import re

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# A sweep longer than this is a typo (1:1G:+1 would be a billion cases): refused before it is built.
MAX_SIZES = 4096
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 8, 4K, 64M, 1G)")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def parse_sizes(spec: str) -> tuple[int, ...]:
    """Expand a size spec into byte counts, ascending and without duplicates."""
    if ":" not in spec:
        sizes = [parse_size(part) for part in spec.split(",") if part.strip()]
    else:
        parts = spec.split(":")
        if len(parts) != 3:
            raise ValueError(f"size sweep {spec!r} must be START:END:xFACTOR or START:END:+STEP")
        start, end = parse_size(parts[0]), parse_size(parts[1])
        step = parts[2].strip()
        if start < 1 or end < start:
            raise ValueError(f"size sweep {spec!r}: need 1 <= START <= END")
        sizes = []
        size = start
        if step[:1].lower() == "x":
            factor = int(step[1:])
            if factor < 2:
                raise ValueError(f"size sweep {spec!r}: factor must be >= 2")
            while size <= end:
                sizes.append(size)
                size *= factor
        elif step[:1] == "+":
            increment = parse_size(step[1:])
            if increment < 1:
                raise ValueError(f"size sweep {spec!r}: step must be >= 1")
            count = (end - start) // increment + 1
            if count > MAX_SIZES:
                raise ValueError(f"size sweep {spec!r} gives {count} sizes; at most {MAX_SIZES} (use a larger "
                                 "step or a factor, xN)")
            while size <= end:
                sizes.append(size)
                size += increment
        else:
            raise ValueError(f"size sweep {spec!r}: step must start with x (factor) or + (increment)")
    if not sizes:
        raise ValueError(f"size spec {spec!r} gives no sizes")
    if len(sizes) > MAX_SIZES:
        raise ValueError(f"size spec {spec!r} gives {len(sizes)} sizes; at most {MAX_SIZES}")
    return tuple(sorted(set(sizes)))


def format_size(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)
