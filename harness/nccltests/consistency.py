"""Each side of a row held to how nccl-tests computes it: time, size, algbw and busbw agree.

nccl-tests (``BenchTime`` in src/common.cu) takes one mean time per side of a row and computes
both figures from it with the collective's ``GetBw`` (src/<collective>.cu): algbw = bytes /
1e9 / seconds, busbw = algbw x the bus factor. The bytes are the printed size for every
collective but hypercube, which counts (n-1)/n of it, and alltoallv, which counts the largest
per-rank share (not printed, so its rows are not checked here). Before nccl-tests ec1b5e2
(2020) all_gather and reduce_scatter counted (n-1)/n of the size too, with a bus factor of 1:
a table of that time fits one pair or the other, the same for every row.

Every printed figure is rounded to its last digit, so a side agrees when the intervals the
figures stand for meet: a time of t +- ht us gives algbw in [size / 1e3 / (t + ht),
size / 1e3 / (t - ht)] GB/s, which must meet the printed algbw +- half its last digit ("0.00"
stands for [0, 0.005)), so sides under 1 GB/s are checked as the others. A side that does not
agree was changed after nccl-tests wrote it: the import is refused, naming file, line (or JSON
field) and column. The ``cputime`` column (``-C``) is the host's time of the loop, not the one
the figures came from, so it is not compared with them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from harness.nccltests.evidence import FACTORS, SIGNS
from harness.nccltests.parse import JSON_PRINTED_HALF_ULP, Parsed, Row, half_ulp
from harness.nccltests.values import NcclTestsFormatError

# (collective, bus factor) -> the share of the printed size that algbw counts, where not all of it
_SIZE_SHARE = {("hypercube", "1"): "(n-1)/n", ("all_gather", "1"): "(n-1)/n", ("reduce_scatter", "1"): "(n-1)/n"}
# the rounding of a float beside that of the printed digits
_RELATIVE_SLACK = 1e-9
_SIDE_NAMES = (("out_of_place", "out-of-place"), ("in_place", "in-place"))
# -J writes every double with "%lf"
_JSON_DECIMALS = 6


@dataclass(frozen=True)
class _Way:
    """One way nccl-tests has computed a collective's figures from its time."""

    factor: str  # busbw = algbw x factor (a FACTORS key)
    share: str  # algbw = share x size / time (a FACTORS key: "1" or "(n-1)/n")


@dataclass(frozen=True)
class Agreement:
    sides_checked: int
    way: Optional[str]  # "busbw = algbw x 2(n-1)/n, algbw = size / time"; None when nothing was checked
    not_checked: str = ""  # why some or all sides were not compared


def _ways(collective: str, kind: str) -> list[_Way]:
    if collective == "alltoallv":
        return []
    signs = SIGNS[collective]
    factors = signs.old_factors if kind == "text-old" else (signs.factor,)
    return [_Way(f, _SIZE_SHARE.get((collective, f), "1")) for f in factors]


def _meets(low: float, high: float, value: float, half: float) -> bool:
    slack = _RELATIVE_SLACK * max(abs(low), abs(value), 1.0)
    return low <= value + half + slack and high >= value - half - slack


def _decimals(token: str) -> int:
    """The digits after the point that a printed time carries ("5871.07" -> 2, "17262" -> 0)."""
    mantissa = token.lower().split("e")[0]
    return len(mantissa.split(".")[1]) if "." in mantissa else 0


def _where(parsed: Parsed, row: Row, key: str, column: str) -> str:
    if parsed.kind == "json":
        return f"{row.where}.{key}.{'alg_bw' if column == 'algbw' else 'bus_bw' if column == 'busbw' else 'time'}"
    return f"{row.where}: column {column} ({dict(_SIDE_NAMES)[key]})"


def _side_contradiction(parsed: Parsed, row: Row, key: str, way: _Way) -> Optional[str]:
    side = getattr(row, key)
    n = parsed.ranks
    half_algbw, half_busbw = row.half_ulps.get(key, (JSON_PRINTED_HALF_ULP, JSON_PRINTED_HALF_ULP))
    time_us, algbw, busbw = side["time_us"], side["algbw_gbps"], side["busbw_gbps"]
    half_time = half_ulp(side["time_printed"]) if "time_printed" in side else JSON_PRINTED_HALF_ULP
    share = FACTORS[way.share](n)
    bytes_counted = share * row.size_bytes
    # 1e9 bytes per second from bytes and microseconds: bytes / 1e3 / us
    low = bytes_counted / 1e3 / (time_us + half_time)
    high = bytes_counted / 1e3 / (time_us - half_time) if time_us > half_time else math.inf
    if not _meets(low, high, algbw, half_algbw):
        counted = "size" if way.share == "1" else f"{way.share} x size ({share:.4g} at {n} ranks)"
        t_low = bytes_counted / 1e3 / (algbw + half_algbw)
        t_high = bytes_counted / 1e3 / (algbw - half_algbw) if algbw > half_algbw else math.inf
        decimals = _decimals(side["time_printed"]) if "time_printed" in side else _JSON_DECIMALS
        return (f"{_where(parsed, row, key, 'time')} is {side.get('time_printed', time_us)} us, but size "
                f"{row.size_bytes} B at algbw {algbw} GB/s is a time of {t_low:.{decimals}f} to {t_high:.{decimals}f} us "
                f"(nccl-tests computes algbw = {counted} / time; each figure within its printed digits): "
                "the time, the size or algbw was changed after nccl-tests wrote them")
    factor = FACTORS[way.factor](n)
    if not _meets(factor * (algbw - half_algbw), factor * (algbw + half_algbw), busbw, half_busbw):
        return (f"{_where(parsed, row, key, 'busbw')} is {busbw} GB/s, but algbw {algbw} x {way.factor} "
                f"({factor:.4g} at {n} ranks, {parsed.ranks_from}) is {factor * max(algbw - half_algbw, 0):.6g} to "
                f"{factor * (algbw + half_algbw):.6g} (each figure within its printed digits): busbw or algbw was "
                "changed after nccl-tests wrote them")
    return None


def _first_contradiction(parsed: Parsed, way: _Way, sides: list) -> tuple[int, Optional[str]]:
    """(how many sides agree before the first that does not, its message or None)."""
    for agreed, (row, key) in enumerate(sides):
        problem = _side_contradiction(parsed, row, key, way)
        if problem:
            return agreed, problem
    return len(sides), None


def check_figures(parsed: Parsed) -> Agreement:
    """How many sides agree with their time; NcclTestsFormatError naming the first that does not."""
    collective = parsed.collective
    ways = _ways(collective, parsed.kind)
    if not ways:
        return Agreement(0, None, f"{collective}'s algbw counts a per-rank share the table does not print")
    sides = [(row, key) for row in parsed.rows for key, _ in _SIDE_NAMES
             if getattr(row, key) is not None and row.time_column != "cputime"]
    not_checked = ""
    if any(row.time_column == "cputime" for row in parsed.rows):
        not_checked = "the cputime column (-C) is the host's time, not the one algbw and busbw came from"
    outcomes = [(way, *_first_contradiction(parsed, way, sides)) for way in ways]
    for way, _, problem in outcomes:
        if problem is None:
            counted = "size" if way.share == "1" else f"{way.share} x size"
            return Agreement(len(sides), f"algbw = {counted} / time, busbw = algbw x {way.factor}", not_checked)
    # the way most sides agree with is the one the log was written in: its first disagreement is the change
    _, _, problem = max(outcomes, key=lambda outcome: outcome[1])
    raise NcclTestsFormatError(problem)
