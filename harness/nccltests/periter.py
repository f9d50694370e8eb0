"""The per-iteration times of a ``-J`` row (``<side>_per_iter``), checked before they become samples.

nccl-tests (``writePerIterReport`` in src/util.cu) writes, per side of a row, one time per timed
iteration (``times_us``, the max over processes) and, beside them, the summary it computed from
them after skipping the first ``skipped_iterations`` (``computeIterStats``: ``min_us``, ``max_us``,
``avg_us``, ...), every double as ``%lf``. Those times become a record's samples, and so its
percentiles, so they are held to what nccl-tests writes:

- one time per iteration of the row: ``actual_iterations``, else ``config.iterations``;
- at most ``MAX_TIMES_PER_SIDE`` (harness/nccltests/limits.py), what one record can hold;
- each a finite time, more than 0 and at most ``MAX_TIME_US``;
- min, max and mean of the times kept agree with ``min_us``, ``max_us`` and ``avg_us`` within
  the printed digits (each ``%lf`` is rounded by at most half its sixth decimal).

The row's own ``time`` is not compared with their mean: nccl-tests takes it from the host clock
over the whole timed loop (divided by the iterations, averaged over ranks), the times from CUDA
events per iteration (max over processes), so the two differ by more than rounding in an
untouched file (5 % in the per-iteration fixture). Its own summary is what the times must match.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from harness.nccltests.limits import MAX_TIME_US, MAX_TIMES_PER_SIDE
from harness.nccltests.values import JSON_PRINTED_HALF_ULP, NcclTestsFormatError, json_integer, json_number

# (summary key, what it is of the kept times, how far it may be from them: printed digits)
_SUMMARY = (("min_us", "least", min, JSON_PRINTED_HALF_ULP),
            ("max_us", "greatest", max, JSON_PRINTED_HALF_ULP),
            # each time and the mean are rounded: the mean of the printed times moves by at most half a digit
            ("avg_us", "mean", lambda t: sum(t) / len(t), 2 * JSON_PRINTED_HALF_ULP))


def _agrees(a: float, b: float, half_ulps: float) -> bool:
    return abs(a - b) <= half_ulps + 1e-12 * max(abs(a), abs(b))


def per_iteration_times(per_iter: dict, at: str, iterations: int) -> Optional[tuple[list[float], int]]:
    """(the times kept, the iterations skipped) of ``per_iter`` (``at`` names it: "file: results[3].
    in_place_per_iter"), or None when it holds no times; NcclTestsFormatError naming the field otherwise."""
    times = per_iter.get("times_us")
    if times is None:
        return None
    if not isinstance(times, list):
        raise NcclTestsFormatError(f"{at}.times_us: {json.dumps(times)[:40]} is not a list")
    if not times:
        return None
    # the count first, before a time is read: a list of millions is refused without touching them
    if len(times) > MAX_TIMES_PER_SIDE:
        raise NcclTestsFormatError(f"{at}.times_us: {len(times)} times; a record holds at most {MAX_TIMES_PER_SIDE} "
                                   "per side (harness/nccltests/limits.py)")
    if len(times) != iterations:
        raise NcclTestsFormatError(f"{at}.times_us: {len(times)} times, but the row ran {iterations} iterations "
                                   "(actual_iterations, else config.iterations): nccl-tests writes one per iteration")
    values = [json_number(x, f"{at}.times_us[{i}]", above=True, high=MAX_TIME_US, what="microseconds")
              for i, x in enumerate(times)]
    skipped = _skipped(per_iter, at, len(values))
    kept = values[skipped:]
    for key, what, of, tolerance in _SUMMARY:
        printed = _summary_value(per_iter, key, at)
        found = of(kept)
        if not _agrees(found, printed, tolerance):
            raise NcclTestsFormatError(
                f"{at}.{key}: {printed!r}, but the {what} of times_us[{skipped}:] is {found:.6f}: the times or their "
                "summary were changed (nccl-tests computes one from the other)")
    return kept, skipped


def _skipped(per_iter: dict, at: str, count: int) -> int:
    value = per_iter.get("skipped_iterations")
    skipped = 0 if value is None else json_integer(value, f"{at}.skipped_iterations", what="iterations")
    if skipped >= count:
        raise NcclTestsFormatError(f"{at}.skipped_iterations: {skipped} of {count} times: none left")
    return skipped


def _summary_value(per_iter: dict, key: str, at: str) -> float:
    if key not in per_iter or per_iter[key] is None:
        raise NcclTestsFormatError(f"{at}.{key}: missing; nccl-tests writes it with times_us, and the times are "
                                   "checked against it")
    value: Any = per_iter[key]
    return json_number(value, f"{at}.{key}", above=True, high=MAX_TIME_US, what="microseconds")
