"""Integer lists written as a progression, ``8,16,32,...,16384``: the one rule every option that
takes a ``...`` reads by (``critpath model --ranks``).

The values before ``...`` start a geometric (x2: ``8,16,32``) or arithmetic (+8: ``8,16,24``)
progression, and the value after it is its last term. A reading is never guessed: two values
fit both (``1,2`` is x2 and +1), so they are refused asking for a third; an end the progression
does not reach (``3,5,...,100``) is refused naming the terms beside it. Without ``...`` the list
is values in any order. Either way a list option like every other
(harness.core.options.comma_separated): none empty, none twice, at most MAX_LIST_ITEMS written.
"""
from __future__ import annotations

import argparse
from typing import Optional

from harness.core.echo import shown
from harness.core.numbers import parse_int
from harness.core.options import comma_separated

ELLIPSIS = "..."


def parse_progression(text: str, what: str, low: int, high: int, max_values: int) -> tuple[int, ...]:
    """``text`` as integers in [low, high], at most ``max_values`` of them, ascending; ValueError
    saying why otherwise, led by ``what`` (the option's values: "ranks") and the text."""
    where = f"{what} {shown(text)}"
    try:
        parts = list(comma_separated(text))
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"{where}: {exc}") from None

    def value(part: str) -> int:
        return parse_int(part, where, low, high)

    if ELLIPSIS not in parts:
        return tuple(sorted(value(p) for p in parts))
    i = parts.index(ELLIPSIS)
    if i < 2 or i != len(parts) - 2:
        raise ValueError(f"{where}: '...' needs two or more values before it and one after (8,16,32,...,1024)")
    head = [value(p) for p in parts[:i]]
    end = value(parts[-1])
    if any(b <= a for a, b in zip(head, head[1:])):
        raise ValueError(f"{where}: values before '...' must increase")
    if end <= head[-1]:  # 2,4,...,3 read as 2,3,4: a range that ends before it starts is a typo
        raise ValueError(f"{where}: the value after '...' ({end}) must exceed those before it ({head[-1]})")
    factor, step = _factor(head), _step(head)
    if factor and step:  # only two values fit both: 1,2 goes on 4,8 or 3,4
        a, b = head
        raise ValueError(f"{where}: {a},{b} goes on as x{factor} ({b * factor}, ...) or as +{step} ({b + step}, "
                         f"...); give a third value before '...' ({a},{b},{b * factor},... or {a},{b},{b + step},...)")
    if not (factor or step):
        raise ValueError(f"{where}: the values before '...' are not one progression (neither one factor nor one "
                         "step between them)")
    if step:
        count = (end - head[0]) // step + 1  # counted before it is built: 1,2,...,10**9 is a typo
        if count > max_values:
            raise ValueError(f"{where} gives {count} values; at most {max_values}")
    values = list(head)
    while _next(values[-1], factor, step) <= end:
        values.append(_next(values[-1], factor, step))
    if values[-1] != end:
        beyond = _next(values[-1], factor, step)
        ends = f"{values[-1]} or {beyond}" if beyond <= high else f"{values[-1]}"
        raise ValueError(f"{where}: {end} is not a term of {'x' if factor else '+'}{factor or step} from {head[0]} "
                         f"(... {values[-1]}, {beyond} ...); end it on {ends}")
    if len(values) > max_values:
        raise ValueError(f"{where} gives {len(values)} values; at most {max_values}")
    return tuple(values)


def _factor(head: list[int]) -> Optional[int]:
    """The integer factor above 1 between every pair of neighbours of ``head``, or None."""
    factor = head[1] // head[0]
    fits = factor > 1 and all(a * factor == b for a, b in zip(head, head[1:]))
    return factor if fits else None


def _step(head: list[int]) -> Optional[int]:
    """The step between every pair of neighbours of ``head`` (increasing, so above 0), or None."""
    step = head[1] - head[0]
    return step if all(b - a == step for a, b in zip(head, head[1:])) else None


def _next(value: int, factor: Optional[int], step: Optional[int]) -> int:
    return value * factor if factor else value + step  # type: ignore[operator]  # one of them is set
