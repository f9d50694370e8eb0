"""The header's ``validation`` (``-c``, datacheck) held to the rows' #wrong (JSON ``nwrong``).

From NVIDIA/nccl-tests' source (a0b82b2, 2.19.6; the same rule since the first commit, b188a15):

- ``main`` sets every thread's ``args.reportErrors = datacheck`` (src/common.cu:1762), and
  ``writeBenchmarkLineBody`` (src/util.cu:507-511, 521) prints the count ``%6g`` when it is set
  and ``N/A`` when not; -J writes ``nwrong`` as the count or null the same way.
- Only ``initData``, which ``BenchTime`` calls only ``if (datacheck)`` (common.cu:696-699), changes
  it: alltoall, alltoallv and sendrecv set ``reportErrors = in_place ? 0 : 1`` there
  (src/alltoall.cu:44, alltoallv.cu:460, sendrecv.cu:34), so with validation on their in-place
  #wrong may be N/A, and with validation 0 nothing changes it.

So with validation 0 every #wrong is N/A; with validation on every out-of-place #wrong is a count,
and so is every in-place one of a collective that checks in place. A row that says otherwise was
changed, or the header is another run's: a count under validation 0 is not a check that passed.
The error column before 2.13 ("text-old") holds a deviation, not a count, and is not held here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from harness.nccltests.evidence import SIGNS
from harness.nccltests.values import NcclTestsFormatError

if TYPE_CHECKING:
    from harness.nccltests.parse import Parsed

__all__ = ["check_validation"]

_SOURCE = "src/common.cu: reportErrors = datacheck; src/util.cu: writeBenchmarkLineBody"


def _side_label(parsed: "Parsed", row, side: str) -> str:
    if parsed.kind == "json":
        return f"{row.where.split(': ', 1)[-1]}.{side}.nwrong is"
    return f"line {row.line} prints {side.replace('_', '-')} #wrong"


def check_validation(parsed: "Parsed") -> None:
    """NcclTestsFormatError naming the header's validation and the first side whose #wrong it contradicts."""
    if parsed.validation is None or parsed.kind == "text-old":
        return  # no validation field, or an error column (a deviation, not a count)
    checks_in_place = parsed.collective not in SIGNS or SIGNS[parsed.collective].in_place_checked
    for row in parsed.rows:
        for side in ("out_of_place", "in_place"):
            figures = getattr(row, side)
            if figures is None:
                continue  # -J's null body: nothing printed for that side
            counted = figures.get("wrong") is not None
            if not parsed.validation and counted:
                raise NcclTestsFormatError(
                    f"{parsed.validation_where}: validation 0, but {_side_label(parsed, row, side)} "
                    f"{figures['wrong']}: with validation 0 nccl-tests checks nothing and prints N/A (null in -J) "
                    f"for every #wrong ({_SOURCE}); a count there is no check that passed")
            if parsed.validation and not counted and (side == "out_of_place" or checks_in_place):
                raise NcclTestsFormatError(
                    f"{parsed.validation_where}: validation on, but {_side_label(parsed, row, side)} "
                    f"{'null' if parsed.kind == 'json' else 'N/A'}: with validation on nccl-tests prints the count of "
                    f"wrong elements of every side of {parsed.collective} ({_SOURCE}; only alltoall, alltoallv and "
                    "sendrecv leave in place unchecked)")
