"""An imported record's figures are its source row's: derived from the row it keeps, never trusted alone.

An import (``critpath import-nccl-tests``) keeps each row as the source printed it in
``extra.imported``, both sides, and takes the record's figures and samples from the side it
stands for (``placement``). That derivation is declared here once: the importer builds a record
with it, and ``harness.core.verify`` rebuilds the figures from the record's own row when the
record is read, so a figure edited in ``results.jsonl`` (busbw 436.08 -> 9999) is refused, naming
the record and the field, instead of passing acceptance as the source's own.

The row also says which case it measured, so the record's identity (family, params, world, case ID)
and its check (#wrong of both sides) are rebuilt from it too: a record moved to another size, rank
count or family, or whose #wrong was zeroed, contradicts its own row.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping, Optional, Sequence

# record figure -> the key of the row's side that it is
FIGURES = ("time_us", "algbw_gbps", "busbw_gbps")
# A figure as nccl-tests prints it ("%7.2f", "%6.2f", "%.6lf", "%5.0le", "%g"; no nan, no inf): a
# plain decimal, no sign but minus, none of the spaces or underscores that float() passes over.
DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,4})?")
# the two sides of an nccl-tests row, as an imported record keeps them
SIDES = ("out_of_place", "in_place")
MEAN_ONLY, PER_ITERATION = "mean_only", "per_iteration"
# How an import's timer and reduction begin: a record that says so holds its row, or is refused.
IMPORTED_BY = "nccl-tests"
# What an import's timer and backend are: nccl-tests times with CUDA events, over NCCL.
IMPORTED_TIMER = f"{IMPORTED_BY} (CUDA events)"
IMPORTED_BACKEND = "nccl"
# The one family critpath measures itself that an import can stand for: an all_reduce sum, in place.
NATIVE_FAMILY = "allreduce"
# nccl-tests' collectives (its *_perf binaries); any other becomes no family at all.
COLLECTIVES = ("all_reduce", "all_gather", "alltoall", "alltoallv", "broadcast", "gather", "hypercube",
               "reduce", "reduce_scatter", "scatter", "sendrecv")
# The family of an import's other rows (anything but an all_reduce sum): no family of the registry.
IMPORTED_FAMILIES = tuple(f"nccltests_{collective}" for collective in COLLECTIVES)
# nccl-tests type names -> critpath dtype names
DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64", "int8": "int8",
          "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
          "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2", "char": "int8", "int": "int32"}
# Element bytes of nccl-tests' type names (src/common.cu, test_typenames; char/int: NCCL 1)
WORD_BYTES = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2, "bfloat16": 2,
              "float": 4, "int32": 4, "uint32": 4, "int": 4, "double": 8, "int64": 8, "uint64": 8}
# What nccl-tests prints as a row's size, in elements of count: the buffer (all_reduce, broadcast,
# reduce, sendrecv) or the whole gathered one, count per rank times ranks (all_gather, alltoall ...);
# alltoallv's sizes vary per rank and are not checked.
# How far below the row's mean time the samples' mean may be: the per-iteration events and the
# whole-loop timer are two clocks around the same work.
MEAN_SLACK = 0.05
# How far above it: the loop's time waits for every iteration's slowest rank, whose events are the
# samples, so they run above it by what the two clocks and launch gaps differ (9 % in the
# per-iteration fixture), never by half as much again as the whole loop took.
MEAN_ABOVE_SLACK = 0.5
SIZE_IS_COUNT = ("all_reduce", "broadcast", "reduce", "sendrecv")
SIZE_IS_COUNT_OR_RANKS = ("all_gather", "alltoall", "gather", "hypercube", "reduce_scatter", "scatter")


def figures_of(side: Mapping[str, Any]) -> dict[str, float]:
    """The record's figures from one side of its row."""
    return {name: side[name] for name in FIGURES}


def mean_samples_ns(time_us: float) -> tuple[int, ...]:
    """A mean-only record's one sample: the row's mean time, in whole nanoseconds (at least 1)."""
    return (max(1, round(time_us * 1e3)),)


def samples_ns(times_us) -> tuple[int, ...]:
    """A per-iteration record's samples: each iteration's time, in whole nanoseconds (at least 1)."""
    return tuple(max(1, round(t * 1e3)) for t in times_us)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _same(a: Any, b: Any) -> bool:
    # JSON keeps a float's digits exactly; only 8 against 8.0 can differ in form
    return _number(a) and _number(b) and math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def contradiction(block: Mapping[str, Any], metrics: Mapping[str, Any], samples: tuple) -> Optional[str]:
    """What in ``metrics`` or ``samples`` its imported row (``block``, the record's
    ``extra.imported``) does not give, as "field ...: ..."; None when the row gives all of it."""
    placement = block.get("placement")
    side = block.get(placement) if isinstance(placement, str) else None
    if not isinstance(side, Mapping):
        return f"field extra.imported.placement: {placement!r} names no side of the imported row"
    row = f"its imported row ({block.get('file')} {block.get('where')}, extra.imported.{placement})"
    printed = printed_time_contradiction(block)
    if printed:
        return printed
    for name in sorted(set(metrics) | set(FIGURES)):
        if name not in FIGURES:
            return f"field metrics.{name}: {metrics[name]!r} is not a figure an import derives"
        if name not in metrics:
            return f"field metrics.{name}: missing; {row} gives {side.get(name)!r}"
        if not _same(metrics[name], side.get(name)):
            return f"field metrics.{name}: {metrics[name]!r} but {row} says {side.get(name)!r}"
    if block.get("samples") == MEAN_ONLY:
        if tuple(samples) != mean_samples_ns(side["time_us"]):
            return (f"field samples_ns: {list(samples)[:4]} but {row} gives the mean "
                    f"{list(mean_samples_ns(side['time_us']))}")
    elif block.get("samples") == PER_ITERATION:
        return per_iteration_contradiction(block, side, samples)
    else:
        return f"field extra.imported.samples: {block.get('samples')!r} is neither {MEAN_ONLY} nor {PER_ITERATION}"
    return None


def _printed_number(text: Any) -> Optional[float]:
    try:
        value = float(text) if isinstance(text, str) and DECIMAL.fullmatch(text) else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def printed_time_contradiction(block: Mapping[str, Any]) -> Optional[str]:
    """What in a side's ``time_printed`` (the digits the log printed, which tables show as the
    side's time) is not its ``time_us``, the number the import read from those digits."""
    for name in SIDES:
        side = block.get(name)
        if not isinstance(side, Mapping) or "time_printed" not in side:
            continue  # -J prints numbers, not digits to keep
        printed = side["time_printed"]
        if not _same(_printed_number(printed), side.get("time_us")):
            return (f"field extra.imported.{name}.time_printed: {str(printed)[:40]!r}, but the side's time_us, "
                    f"read from those digits, is {side.get('time_us')!r}")
    return None


def family_params(collective: str, redop: Optional[str], root: Optional[int], dtype: str, size_bytes: int,
                  ranks: int) -> tuple[str, dict]:
    """The family and params of the record a row of ``collective`` becomes: critpath's allreduce is
    in place, so an all_reduce sum is an ``allreduce`` record; any other row ``nccltests_<name>``."""
    if collective == "all_reduce" and redop == "sum":
        return NATIVE_FAMILY, {"algo": "native", "backend": "nccl", "dtype": dtype, "size_bytes": size_bytes,
                               "world": ranks}
    return IMPORTED_FAMILIES[COLLECTIVES.index(collective)], {"dtype": dtype, "size_bytes": size_bytes, "world": ranks,
                                       "redop": redop or "none", "root": -1 if root is None else root}


def case_id_of(family: str, params: Mapping[str, Any]) -> str:
    return family + "/" + ",".join(f"{k}={v}" for k, v in sorted(params.items()))


def check_of(count: int, in_place: Optional[Mapping], out_of_place: Optional[Mapping]) -> Optional[tuple]:
    """(wrong, checked, detail): nccl-tests' #wrong of both sides; None when neither side was
    checked (N/A, or the old ``error`` column, a deviation rather than a count)."""
    sides = [(name, s) for name, s in (("out-of-place", out_of_place), ("in-place", in_place)) if s]
    counted = [s["wrong"] for _, s in sides if s.get("wrong") is not None]
    if not counted:
        return None
    detail = ", ".join(f"{name} #wrong {'N/A' if s.get('wrong') is None else s['wrong']}" for name, s in sides)
    return sum(counted), count * len(counted), f"nccl-tests: {detail}"


def _whole(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def identity_contradiction(block: Mapping[str, Any], family: str, case_id: str, params: Mapping[str, Any],
                           world: int) -> Optional[str]:
    """What in the record's identity its imported row does not give, as "field ...: ..."; None when
    the row gives all of it."""
    collective, ranks, count, kind = (block.get(k) for k in ("collective", "ranks", "count", "type"))
    if collective not in COLLECTIVES:
        return f"field extra.imported.collective: {collective!r} is not an nccl-tests collective"
    if not _whole(ranks) or ranks < 1:
        return f"field extra.imported.ranks: {ranks!r} is not a rank count"
    if not _whole(count) or count < 0:
        return f"field extra.imported.count: {count!r} is not an element count"
    if kind not in DTYPES:
        return f"field extra.imported.type: {kind!r} is not an nccl-tests type"
    size = params.get("size_bytes")
    if not _whole(size):
        return f"field params.size_bytes: {size!r} is not a size in bytes"
    element = count * WORD_BYTES[kind]
    sizes = ((element,) if collective in SIZE_IS_COUNT else (element, element * ranks)
             if collective in SIZE_IS_COUNT_OR_RANKS else (size,))
    if size not in sizes:
        return (f"field params.size_bytes: {size} but its imported row's count {count} of {kind} "
                f"({WORD_BYTES[kind]} bytes each) gives {' or '.join(map(str, sizes))}")
    want_family, want = family_params(collective, block.get("redop"), block.get("root"), DTYPES[kind], size, ranks)
    if family != want_family:
        return f"field family: {family!r} but its imported row ({collective}, redop {block.get('redop')}) is {want_family!r}"
    for key in sorted(set(want) | set(params)):
        stored, said = params.get(key, "(absent)"), want.get(key, "(absent)")
        if stored != said or type(stored) is not type(said):
            return f"field params.{key}: {stored!r} but its imported row gives {said!r}"
    if world != ranks:
        return f"field world: {world} but its imported row was measured on {ranks} ranks"
    if case_id != case_id_of(want_family, want):
        return f"field case_id: {case_id!r} but its imported row is {case_id_of(want_family, want)!r}"
    return None


def check_contradiction(block: Mapping[str, Any], check: Any) -> Optional[str]:
    """What in the record's check (a ``CheckResult`` or None) its imported row's #wrong does not give."""
    want = check_of(block["count"], block.get("in_place"), block.get("out_of_place"))
    have = None if check is None else (check.wrong, check.checked, check.detail)
    if have != want:
        said = "no check" if want is None else f"wrong {want[0]} of {want[1]} ({want[2]})"
        got = "no check" if have is None else f"wrong {have[0]} of {have[1]} ({have[2]})"
        return f"field check: {got} but its imported row's #wrong gives {said}"
    return None


def per_iteration_contradiction(block: Mapping[str, Any], side: Mapping[str, Any], samples: tuple) -> Optional[str]:
    """What in per-iteration samples their row does not give. The row keeps the record's side
    without its times (the samples are them), so what is checked is what it does keep: that the
    format has per-iteration times at all (only ``-J`` JSON does), that there is one sample per
    timed iteration, and that their mean is near the row's mean time: not below it (each sample is
    the slowest rank's time of its iteration, nccl-tests' time is the ranks' mean), nor far above."""
    if block.get("format") != "json":
        return (f"field extra.imported.samples: {PER_ITERATION} but its row comes from a "
                f"{block.get('format')!r} log, which prints means only")
    iters = block.get("iters")
    skipped = side.get("skipped_iterations", 0)
    if not _whole(iters) or not _whole(skipped) or len(samples) != iters - skipped:
        return (f"field samples_ns: {len(samples)} samples but its imported row timed {iters!r} iterations"
                f" (skipping {skipped!r})")
    if isinstance(side.get("times_us"), list):  # a row that keeps the times gives the samples exactly
        if tuple(samples) != samples_ns(side["times_us"]):
            return "field samples_ns: not the times its imported row keeps"
        return None
    # half a nanosecond of rounding per sample, and the printed digits of the row's time
    mean_ns, time_ns = sum(samples) / len(samples), side["time_us"] * 1e3
    if mean_ns < time_ns * (1 - MEAN_SLACK) - 0.5:
        return (f"field samples_ns: their mean {mean_ns:.1f} ns is below its imported row's mean time "
                f"{time_ns:.1f} ns")
    if mean_ns > time_ns * (1 + MEAN_ABOVE_SLACK) + 0.5:
        return (f"field samples_ns: their mean {mean_ns:.1f} ns is more than {1 + MEAN_ABOVE_SLACK:g} times its "
                f"imported row's mean time {time_ns:.1f} ns, the whole timed loop's")
    return None


# The trailer's checks (harness.nccltests.trailer), declared here once: an import makes them from
# the log, and a stored import's records are held to them when read (``import_contradiction``), so
# a row edited in results.jsonl meets the trailer its own records keep, as an edited log does.
# rows_mean_busbw_gbps is kept rounded to 6 decimals: half of the last one, and a float's rounding
_MEAN_KEPT_HALF = 5e-7 + 1e-9


def rows_mean_busbw(busbw_gbps: Sequence[float]) -> float:
    """``Avg bus bandwidth`` as nccl-tests computes it: the mean of every busbw it printed."""
    return sum(busbw_gbps) / len(busbw_gbps)


def average_agrees(mean_gbps: float, avg_busbw_gbps: float, tolerance_gbps: float) -> bool:
    return abs(mean_gbps - avg_busbw_gbps) <= tolerance_gbps


def out_of_bounds_verdict(out_of_bounds: int, wrongs: Sequence[Optional[int]]) -> tuple[Optional[bool], bool]:
    """(oob_agrees, whether the trailer's ``Out of bounds values`` is a problem) against the #wrong
    of every side (None: N/A). It is 0 exactly when every counted #wrong is 0; nothing counted
    leaves it unchecked, a problem unless 0; a failure with no counted side wrong may be on a side
    printed N/A (unknown, and a problem)."""
    counted = [w for w in wrongs if w is not None]
    if not counted:
        return None, bool(out_of_bounds)
    wrong_sides = sum(1 for w in counted if w > 0)
    if (out_of_bounds == 0) == (wrong_sides == 0):
        return True, False
    if len(counted) < len(wrongs) and wrong_sides == 0:
        return None, True
    return False, True


def _sides_of(block: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [block[name] for name in SIDES if isinstance(block.get(name), Mapping)]


def _field(name: str) -> str:
    return f"field extra.imported.trailer.{name}"


def trailer_contradiction(blocks: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """What in the trailer an import's records keep (each record's ``extra.imported.trailer``, one
    for the whole log) its rows, every record's both sides, do not give, as "field ...: ..."; None
    when they give all of it. ``blocks`` are every record's ``extra.imported`` of one whole import."""
    trailer = blocks[0].get("trailer")
    if not isinstance(trailer, Mapping):
        return f"field extra.imported.trailer: {trailer!r} is not the trailer of the log"
    if any(b.get("trailer") != trailer for b in blocks):
        other = next(b for b in blocks if b.get("trailer") != trailer)
        return (f"field extra.imported.trailer: the record of {other.get('where')} keeps another trailer than "
                f"that of {blocks[0].get('where')}; an import keeps its log's one trailer in every record")
    sides = [side for b in blocks for side in _sides_of(b)]
    busbws = [side.get("busbw_gbps") for side in sides]
    if not sides or not all(_number(x) for x in busbws):
        return "field busbw_gbps: a side of a row holds no busbw figure"
    if trailer.get("rows_busbw_figures") != len(busbws):
        return (f"{_field('rows_busbw_figures')}: {trailer.get('rows_busbw_figures')!r}, but the records' rows "
                f"print {len(busbws)} busbw figures (both sides)")
    mean, kept = rows_mean_busbw(busbws), trailer.get("rows_mean_busbw_gbps")
    if not _number(kept) or abs(mean - kept) > _MEAN_KEPT_HALF:
        return (f"{_field('rows_mean_busbw_gbps')}: {kept!r}, but the busbw of the records' rows ({len(busbws)} "
                f"figures, both sides) averages {mean:.6f}: a row was changed after it was imported")
    problem = False
    avg, tolerance = trailer.get("avg_busbw_gbps"), trailer.get("tolerance_gbps")
    if avg is not None:
        agrees = _number(avg) and _number(tolerance) and average_agrees(mean, avg, tolerance)
        if trailer.get("avg_busbw_agrees") is not agrees:
            return (f"{_field('avg_busbw_agrees')}: {trailer.get('avg_busbw_agrees')!r}, but Avg bus bandwidth "
                    f"{avg!r} GB/s against the rows' mean {mean:.6g} (+-{tolerance!r}) "
                    f"{'agrees' if agrees else 'disagrees'}")
        problem = not agrees
    oob = trailer.get("out_of_bounds")
    if oob is not None:
        wrongs = [side.get("wrong") for side in sides]
        agrees_oob, oob_problem = out_of_bounds_verdict(oob, wrongs) if _whole(oob) else (False, True)
        if trailer.get("oob_agrees") is not agrees_oob:
            return (f"{_field('oob_agrees')}: {trailer.get('oob_agrees')!r}, but Out of bounds values {oob!r} "
                    f"against the rows' #wrong gives {agrees_oob!r}")
        problem = problem or oob_problem
    problems = trailer.get("problems")
    if not isinstance(problems, list) or bool(problems) != problem:
        return (f"{_field('problems')}: {problems!r}, but its checks against the rows "
                f"{'disagree' if problem else 'agree'}")
    return None


def refusals(trailer: Mapping[str, Any]) -> list[str]:
    """What in a trailer's checks (``nccltests.trailer.trailer_checks``, as run.json and each
    record keep them) fails the import and makes its rows not the whole story of the run: the
    disagreements with its rows, and nccl-tests' own failed bandwidth check."""
    return [str(p) for key in ("problems", "failed") if isinstance(trailer.get(key), list) for p in trailer[key]]


def problems_of(blocks: Sequence[Mapping[str, Any]]) -> str:
    """What the trailer an import's records keep says makes their rows not the whole run ("" when
    nothing): read from the records, as run.json's ``contradicted`` says it."""
    trailer = blocks[0].get("trailer") if blocks and isinstance(blocks[0], Mapping) else None
    return "; ".join(refusals(trailer)) if isinstance(trailer, Mapping) else ""
