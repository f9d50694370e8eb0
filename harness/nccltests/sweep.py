"""The sizes one nccl-tests run sweeps: the header's ``minBytes``, ``maxBytes`` and ``step``, and
the rows held to them.

From NVIDIA/nccl-tests' source (src/common.cu and src/util.cu at 2.19.6; the same loop and header
since the first commit, b188a15):

Line numbers are 2.19.6's (a0b82b2).

- ``writeDeviceReport`` (util.cu:625-628) prints ``minBytes %ld maxBytes %ld step: %ld(%s)`` with
  ``(stepFactor > 1) ? stepFactor : stepBytes`` and ``(stepFactor > 1) ? "factor" : "bytes"``: a
  factor step is 2 or more, else it is printed as a bytes step.
- ``main`` (common.cu:1407-1412) refuses ``minBytes > maxBytes`` before it prints anything (since c4de829,
  2021; before it, such a run swept no size and printed no row); after the header,
  when the buffers do not fit (common.cu:1542-1546), it lowers maxBytes (and minBytes to it, when above) and prints
  ``# Reducing maxBytes to %ld due to memory limitation`` (since 1ae8cdc, 2021).
- ``TimeTest`` (common.cu:936) steps ``size`` from minBytes while ``size <= maxBytes``, by ``size *
  stepfactor`` or ``size + stepbytes``; every data type, reduction and root of the run (``-d``,
  ``-o``, ``-r``) and every cycle (``-N``) is a whole sweep of its own, from minBytes again.
- Each row prints ``max(sendBytes, expectedBytes)`` of ``setupArgs(size)`` (common.cu:937-938 and
  900-912): ``count = size / wordSize`` elements, then the collective's ``GetCollByteCount``
  (src/<collective>.cu: all_reduce.cu:34-40, all_gather.cu:10-17, alltoall.cu:18-24 and alike). For
  all_reduce, broadcast, reduce and sendrecv that is ``count x wordSize``; for the collectives
  that share the buffer among ranks (all_gather, alltoall, gather, hypercube, reduce_scatter,
  scatter) it is ``base x nranks x wordSize`` with ``base = count / nranks``, rounded down to a
  multiple of ``16 / wordSize`` elements since nccl-tests 29f4114 (2024). alltoallv prints the
  largest per-rank share of a pattern that may come from a file, so its sizes are not held here.

So a row whose size is none that its place in the sweep can print was changed or moved after
nccl-tests wrote it; a log cut short (a killed run) ends mid-sweep, and is read as such.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from harness.core.imported import WORD_BYTES
from harness.nccltests.evidence import SIGNS
from harness.nccltests.values import NcclTestsFormatError, json_integer, text_integer

if TYPE_CHECKING:
    from harness.nccltests.parse import Parsed, Row

__all__ = ["Sweep", "check_sweep", "header_sweep", "json_sweep", "reduced_sweep"]

# "2(factor)", "1048576(bytes)": util.cu's "%ld(%s)"
_STEP = re.compile(r"(\S+?)\((factor|bytes)\)", re.ASCII)
# util.cu prints "factor" only for stepFactor > 1; a bytes step of 0 never leaves minBytes, a run
# that times one size until it is killed, not a sweep
_LEAST_STEP = {"factor": 2, "bytes": 1}
# GetCollByteCount's alignment since nccl-tests 29f4114: base & ~(16/eltSize - 1)
_ALIGN_BYTES = 16


@dataclass(frozen=True)
class Sweep:
    min_bytes: int
    max_bytes: int
    step: int
    by: str  # "factor" or "bytes"
    where: str  # "line 1", or "field config"
    reduced_where: str = ""  # the '# Reducing maxBytes' line, when nccl-tests printed one
    json: bool = False  # -J: the config is written before maxBytes may be lowered, which -J never records

    def said(self) -> str:
        reduced = f", maxBytes reduced to {self.max_bytes} on {self.reduced_where}" if self.reduced_where else ""
        if self.json:
            return f"the sweep of {self.where} (minimum_bytes {self.min_bytes}, step_{self.by} {self.step})"
        return f"the sweep of {self.where} (minBytes {self.min_bytes}, step: {self.step}({self.by}){reduced})"

    def after(self, stepped_bytes: int) -> int:
        return stepped_bytes * self.step if self.by == "factor" else stepped_bytes + self.step


def _sized(low: int, high: int, low_at: str, high_name: str) -> None:
    """minBytes no more than maxBytes, which main() refuses before it prints the header or -J's config;
    ``low_at`` names minBytes where it is written ("PATH:1: minBytes")."""
    if low > high:
        raise NcclTestsFormatError(f"{low_at} {low} is more than {high_name} {high}; nccl-tests refuses "
                                   "such sizes before it prints its header, and never prints a row of them "
                                   "(src/common.cu)")


def header_sweep(min_token: str, max_token: str, step_token: str, where: str, line: str) -> Sweep:
    """The header's three fields, each read by the one integer grammar and held to what util.cu prints."""
    low = text_integer(min_token, where, "minBytes")
    high = text_integer(max_token, where, "maxBytes")
    _sized(low, high, f"{where}: minBytes", "maxBytes")
    if not (m := _STEP.fullmatch(step_token)):
        raise NcclTestsFormatError(f"{where}: step is {step_token[:40]!r}; nccl-tests prints a count then "
                                   "(factor) or (bytes)")
    by = m.group(2)
    step = text_integer(m.group(1), where, f"step ({by})", low=_LEAST_STEP[by])
    return Sweep(low, high, step, by, line)


def json_sweep(config: dict, path: str) -> Optional[Sweep]:
    """-J's config.minimum_bytes, maximum_bytes and step_factor or step_bytes (util.cu writes the
    factor when it is above 1, else the bytes step: exactly one), held as the text header's are;
    None where the config holds no sweep."""
    steps = [by for by in _LEAST_STEP if f"step_{by}" in config]
    if "minimum_bytes" not in config or "maximum_bytes" not in config or not steps:
        return None
    if len(steps) > 1:
        raise NcclTestsFormatError(f"{path}: field config: both step_factor and step_bytes; nccl-tests writes "
                                   "step_factor when the factor is above 1, else step_bytes (src/util.cu)")
    by = steps[0]
    low, high = (json_integer(config[key], f"{path}: field config.{key}", what="bytes")
                 for key in ("minimum_bytes", "maximum_bytes"))
    _sized(low, high, f"{path}: field config.minimum_bytes:", "config.maximum_bytes")
    step = json_integer(config[f"step_{by}"], f"{path}: field config.step_{by}", low=_LEAST_STEP[by],
                        what="a factor above 1" if by == "factor" else "bytes, 1 or more")
    return Sweep(low, high, step, by, "field config", json=True)


def reduced_sweep(sweep: Optional[Sweep], token: str, where: str, line: str) -> Optional[Sweep]:
    """The sweep after '# Reducing maxBytes to N due to memory limitation' (common.cu: maxBytes = N,
    and minBytes = N where it was above; nccl-tests only ever lowers it)."""
    reduced = text_integer(token, where, "Reducing maxBytes")
    if sweep is None:
        return None
    if reduced > sweep.max_bytes:
        raise NcclTestsFormatError(f"{where}: Reducing maxBytes to {reduced}, above the header's maxBytes "
                                   f"{sweep.max_bytes} ({sweep.where}); nccl-tests only lowers it")
    return Sweep(min(sweep.min_bytes, reduced), reduced, sweep.step, sweep.by, sweep.where, line)


def _printed(stepped_bytes: int, dtype: str, ranks: int, shared: bool) -> tuple[int, ...]:
    """The sizes a row of ``stepped_bytes`` may print (setupArgs, then GetCollByteCount)."""
    word = WORD_BYTES[dtype]  # 1 to 8 bytes: 16 / word is a whole number of elements
    count = stepped_bytes // word
    if not shared:
        return (count * word,)
    base = count // ranks
    aligned = base & ~(_ALIGN_BYTES // word - 1)
    return tuple(sorted({base * ranks * word, aligned * ranks * word}))  # before and since 29f4114


def _same_sweep(previous: "Row", row: "Row") -> None:
    """``row``, which continues the sweep of ``previous``, of its data type, reduction and root:
    nccl-tests loops over types, then reductions, then roots, and sweeps every size of one before
    it moves to the next (each test's runTest, then TimeTest), so none changes within a sweep."""
    for name, before, now in (("type", previous.dtype, row.dtype), ("redop", previous.redop, row.redop),
                              ("root", previous.root, row.root)):
        if before != now:
            raise NcclTestsFormatError(
                f"{row.where}: {name} is {now}, but the row before it ({previous.where}) is of {name} {before} "
                f"and this row continues its sweep (a size after minBytes): nccl-tests sweeps every size of "
                f"one data type, reduction and root before the next, so a row changed, or rows of two runs mixed")


def _one_cycle(seen: dict, row: "Row", stepped_bytes: int) -> None:
    """``row`` the first at its place in a sweep of its type, reduction and root: a second is a second
    cycle (-N), which prints each of them again and which a run of one record per case cannot hold."""
    key = (row.dtype, row.redop, row.root, stepped_bytes)
    if key in seen:
        raise NcclTestsFormatError(
            f"{row.where}: a second cycle starts here: {row.size_bytes} B of type {row.dtype} (stepped size "
            f"{stepped_bytes} B) again, first on {seen[key].where}; nccl-tests prints a sweep again only for "
            "another cycle (-N), and a run holds each case once. Import a log of one cycle (nccl-tests -N 1), "
            "or each cycle from a file of its own")
    seen[key] = row


def check_sweep(parsed: "Parsed") -> bool:
    """Every row's size the one its place in the header's sweep prints, and of the data type,
    reduction and root of the row before it unless it starts a sweep again, and no sweep printed
    twice (a second cycle); NcclTestsFormatError naming the first row that is not. False where
    the rows cannot be held to a sweep (none is known, or alltoallv)."""
    sweep = parsed.sweep
    if sweep is None or parsed.collective not in SIGNS or SIGNS[parsed.collective].size not in ("1", "n"):
        return False  # no sweep in the header, or alltoallv, whose sizes follow its pattern
    shared = SIGNS[parsed.collective].size == "n"
    stepped_bytes = previous = None
    seen: dict = {}
    for row in parsed.rows:
        if stepped_bytes is not None and sweep.after(stepped_bytes) <= sweep.max_bytes:
            stepped_bytes = sweep.after(stepped_bytes)
        else:  # the first row, or the sweep before it was whole: the next type, op, root or cycle
            stepped_bytes = sweep.min_bytes
        printed = _printed(stepped_bytes, row.dtype, parsed.ranks, shared)
        if (sweep.json and row.size_bytes not in printed and stepped_bytes != sweep.min_bytes
                and row.size_bytes in _printed(sweep.min_bytes, row.dtype, parsed.ranks, shared)):
            # the next sweep, from minimum_bytes: this one ended below maximum_bytes, lowered for
            # memory after -J wrote it (common.cu, "Reducing maxBytes", which -J does not record)
            stepped_bytes, printed = sweep.min_bytes, _printed(sweep.min_bytes, row.dtype, parsed.ranks, shared)
        if stepped_bytes != sweep.min_bytes:
            _same_sweep(previous, row)
        previous = row
        if row.size_bytes not in printed:
            shape = (f"{stepped_bytes} B in {row.dtype} elements, shared among {parsed.ranks} ranks" if shared
                     else f"{stepped_bytes} B in whole {row.dtype} elements")
            raise NcclTestsFormatError(
                f"{row.where}: size (B) is {row.size_bytes}, but {sweep.said()} is at {stepped_bytes} B here, which "
                f"nccl-tests prints for {parsed.collective} as {' or '.join(map(str, printed))} ({shape}): "
                "a row changed, moved or lost, or a header from another run")
        _one_cycle(seen, row, stepped_bytes)
    return True
