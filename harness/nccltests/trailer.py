"""The lines nccl-tests prints after its table, kept and checked against the rows.

nccl-tests (src/common.cu, ``BenchTime`` and the end of ``run``; the same since 2.0) adds every
busbw it prints, out-of-place and in-place, to one sum and divides by their number: ``Avg bus
bandwidth`` is the mean of the busbw column over both sides of every row. Its ``Out of bounds
values`` counts data checks that found wrong elements (per size, side, thread and process), so it
is 0 exactly when every counted ``#wrong`` is 0. A file whose trailer disagrees with its rows has
lost or changed rows, or was edited; that is reported, never passed over. Nor is a run whose own
bandwidth check failed (-J ``average_bus_bandwidth.okay`` false: the average below 0.9 x
``NCCL_TESTS_MIN_BW``, after which nccl-tests exits 1): its rows may be whole, but nccl-tests
failed it. NCCL's last error message (-J ``errors``) is kept and shown, not judged: NCCL keeps the
last one it met, a warning it recovered from as well.
"""
from __future__ import annotations

from harness.core.imported import SIDES, average_agrees, out_of_bounds_verdict, rows_mean_busbw
from harness.nccltests.parse import JSON_PRINTED_HALF_ULP, MIN_BW_ENV, MIN_BW_SHARE, UNCHECKED, Parsed


def _busbw_figures(parsed: Parsed) -> list[tuple[float, float]]:
    """(busbw, half its last printed digit) of every side of every row."""
    figures = []
    for row in parsed.rows:
        for name in SIDES:
            side = getattr(row, name)
            if side is not None:
                half = row.half_ulps.get(name, (JSON_PRINTED_HALF_ULP, JSON_PRINTED_HALF_ULP))[1]
                figures.append((side["busbw_gbps"], half))
    return figures


def _average(parsed: Parsed, out: dict) -> None:
    t = parsed.trailer
    figures = _busbw_figures(parsed)
    mean = rows_mean_busbw([b for b, _ in figures])
    # The printed busbw figures are rounded, each by at most half its last digit, and so is the average.
    tolerance = sum(h for _, h in figures) / len(figures) + t.avg_busbw_half_ulp + 1e-9
    out.update(rows_mean_busbw_gbps=round(mean, 6), rows_busbw_figures=len(figures), tolerance_gbps=tolerance)
    if t.avg_busbw_gbps is None:
        out["lines"].append("no 'Avg bus bandwidth' line: the output may be cut short")
        return
    agrees = average_agrees(mean, t.avg_busbw_gbps, tolerance)
    out["avg_busbw_agrees"] = agrees
    said = (f"{t.avg_where}: Avg bus bandwidth {t.avg_busbw_gbps:g} GB/s; the mean busbw of the rows "
            f"({len(figures)} figures, both sides) is {mean:.6g}")
    if agrees:
        out["lines"].append(f"{said}: agrees (within the printed digits, +-{tolerance:.2g})")
    else:
        out["problems"].append(f"{said}, more than the printed digits allow (+-{tolerance:.2g}): "
                               "rows are missing, changed, or the file was edited")


def _out_of_bounds(parsed: Parsed, out: dict) -> None:
    t = parsed.trailer
    sides = [s for r in parsed.rows for s in (r.out_of_place, r.in_place) if s is not None]
    wrongs = [s.get("wrong") for s in sides]
    counted = [w for w in wrongs if w is not None]
    wrong_sides = sum(1 for w in counted if w > 0)
    out["sides_with_wrong"] = wrong_sides
    if t.out_of_bounds is None:
        out["lines"].append("no 'Out of bounds values' line: the output may be cut short")
        return
    said = f"{t.oob_where}: Out of bounds values {t.out_of_bounds}"
    agrees, problem = out_of_bounds_verdict(t.out_of_bounds, wrongs)
    out["oob_agrees"] = agrees
    rows_say = f"#wrong > 0 on {wrong_sides} of {len(counted)} counted sides"
    if not counted:
        if problem:
            out["problems"].append(f"{said}: the run's data check failed, and its rows "
                                   "(#wrong N/A or the old 'error' column) do not say for which sizes")
        else:
            out["lines"].append(f"{said}; no row counts #wrong, so nothing to compare")
    elif agrees:
        out["lines"].append(f"{said}; {rows_say}: agrees")
    elif agrees is None:  # the failing check may be on a side printed N/A
        out["problems"].append(f"{said}, yet {rows_say}: the failing check is on a side printed N/A")
    else:
        out["problems"].append(f"{said}, yet {rows_say}: the file disagrees with itself")


def _bandwidth_check(parsed: Parsed, out: dict) -> None:
    """nccl-tests' own verdict on the average (held to env and the average by the parser)."""
    t = parsed.trailer
    if t.avg_okay is None or t.avg_okay == UNCHECKED:
        return
    bound = (f"{MIN_BW_SHARE:g} x {MIN_BW_ENV} {t.avg_bound_gbps:g} GB/s" if t.avg_bound_gbps is not None
             else f"0.9 x {MIN_BW_ENV}, which its env does not list")
    said = f"{t.avg_where}.okay: nccl-tests' own bandwidth check of the average {t.avg_busbw_gbps:g} GB/s against {bound}"
    if t.avg_okay:
        out["lines"].append(f"{said}: passed")
    else:
        out["failed"] = [f"{said}: FAILED, and nccl-tests exited 1 (src/common.cu): the run did not reach the "
                         "bandwidth it was run to show"]


def _nccl_errors(parsed: Parsed, out: dict) -> None:
    for message in parsed.trailer.nccl_errors:
        out["lines"].append(f"field errors: NCCL's last error message (ncclGetLastError, which keeps the last error "
                            f"NCCL met, one it recovered from too): {message}")


def trailer_checks(parsed: Parsed) -> dict:
    """The trailer's values, what the rows say of them, and lines to show: ``lines`` (agreements
    and notes), ``problems`` (disagreements) and, where nccl-tests' own check failed, ``failed``;
    the last two fail the import (``refusals``)."""
    t = parsed.trailer
    out: dict = {"avg_busbw_gbps": t.avg_busbw_gbps, "avg_busbw_where": t.avg_where or None,
                 "avg_busbw_agrees": None, "out_of_bounds": t.out_of_bounds, "out_of_bounds_where": t.oob_where or None,
                 "lines": [], "problems": []}
    if t.avg_okay is not None:
        out.update(avg_busbw_okay=t.avg_okay, avg_busbw_bound_gbps=t.avg_bound_gbps)
    if t.nccl_errors:
        out["nccl_errors"] = list(t.nccl_errors)
    _out_of_bounds(parsed, out)
    _average(parsed, out)
    _bandwidth_check(parsed, out)
    _nccl_errors(parsed, out)
    return out

