"""Read nccl-tests output, the text table or the ``-J`` JSON file, into rows and the run's facts.

Formats, as NVIDIA/nccl-tests writes them (src/util.cu at 2.19.6; older layouts from its history):

- Text, 2.13 and later: ``size count type redop root``, then per side (out-of-place first, then
  in-place) ``time algbw busbw #wrong``; with per-iteration timing also ``i_min i_max i_p99 i_cv%``;
  with ``-T`` a timestamp (two words) at the end. ``#wrong`` is N/A where not checked.
- Text before 2.13: each binary printed its own columns after ``type`` (none, ``redop``, ``root``
  or ``redop root``) and an ``error`` column (the largest deviation, ``%5.0le``) for ``#wrong``.
- The header ``# nThread T nGpus G minBytes B maxBytes B step: S(factor|bytes) ... iters: N``
  (the sizes each row must have: harness.nccltests.sweep), one ``#  Rank r [Group g] Pid p on HOST device
  d [PCI] NAME`` line per rank, and the trailer ``# Out of bounds values : K OK|FAILED`` and
  ``# Avg bus bandwidth : X`` (``writeResultFooter``).
- JSON (``jsonOutputInit``, ``writeDeviceReport``, ``writeBenchmarkLine*``, ``writePerIterReport``,
  ``writeResultFooter`` in src/util.cu; version 1 from 2.18.5, 2 adds per-iteration timing, 3
  ``per_iter_skip``): ``{"version", "start_time", "args", "env", "nccl_version", "config":
  {"nthreads", "ngpus", "warmup_iters", "iterations", "aggregated_iterations", "validation", ...,
  "devices": [one entry per process: rank, group, pid, hostname, device, device_hex, device_info]},
  "results": [{"size", "count", "type", "redop", "root" (a string, "%6i"), "out_of_place" /
  "in_place": {"time" or "cpu_time", "alg_bw", "bus_bw", "nwrong" (null: not checked)},
  "out_of_place_per_iter" / "in_place_per_iter": {"skipped_iterations", ..., "times_us"},
  "actual_iterations", "experiment_name"}], "out_of_bounds": {"count", "okay"},
  "average_bus_bandwidth": {"bandwidth", "okay"} (version 1: "average_bus_bandwidith" /
  "bandwidith"), "errors", "end_time"}``.

Lines a launcher prefixes (Open MPI ``--tag-output`` ``[1,0]<stdout>:``, Slurm ``srun --label``
``0: ``) and indented pastes are read as the plain lines. A file holding several runs is refused.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Optional

from harness.core.imported import DTYPES
from harness.core.jsonfile import JsonFileError, loads_strict
from harness.core.records import UNKNOWN_START
from harness.core.runmeta import RunMetaError, check_time
from harness.nccltests.evidence import Observed, ObservedRow, Side
from harness.nccltests.limits import (
    MAX_AGG_ITERS,
    MAX_ARG_CHARS,
    MAX_COUNT,
    MAX_ITERS,
    MAX_ROWS,
    MAX_TIME_US,
    MAX_UNALIGN,
)
from harness.nccltests.periter import per_iteration_times
from harness.nccltests.ranks import BOUNDS, Listed, check_listed
from harness.nccltests.sweep import Sweep, header_sweep, json_sweep, reduced_sweep
from harness.nccltests.values import (
    JSON_PRINTED_HALF_ULP,
    NcclTestsFormatError,
    json_flag,
    json_integer,
    json_number,
    json_text,
    text_integer,
    text_number,
)

__all__ = ["JSON_PRINTED_HALF_ULP", "Parsed", "Row", "parse_json", "parse_text"]

# re.ASCII throughout: a Unicode \d takes fullwidth or Arabic-Indic digits, which nccl-tests never prints
_BANNER = re.compile(r"^#\s*Collective\s+test\s+starting:\s*(\S+)", re.ASCII)
# Each number is taken as the whole word it is (\S+) and read by text_integer or text_number:
# a pattern of digits alone read "nGpus 1x" as 1 and "0x5" as 0, the prefix of a word.
_HEADER = re.compile(r"^#\s*nThread\s+(\S+)\s+nGpus\s+(\S+)\s"
                     r"(?:minBytes\s+(\S+)\s+maxBytes\s+(\S+)\s+step:\s*(\S+)\s)?"
                     r".*?warmup\s+iters:\s*(\S+)\s+iters:\s*(\S+)"
                     r"(?:\s+agg\s+iters:\s*(\S+))?(?:\s+validation:\s*(\S+))?"
                     r"(?:\s+graph:\s*\S+)?(?:\s+unalign:\s*(\S+))?", re.ASCII)
# writeResultFooter: "# Collective test concluded: %s", the program_name the banner printed
_CONCLUDED = re.compile(r"^#\s*Collective\s+test\s+concluded:\s*(\S+)", re.ASCII)
# util.cu: "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s" (no Group before
# nccl-tests d313d20, 2022)
_RANK = re.compile(r"^#\s+Rank\s+(\S+)\s+(?:Group\s+(\S+)\s+)?Pid\s+(\S+)\s+on\s+(\S+)\s+device\s+(\S+)"
                   r"\s+\[([^\]]*)\]\s+(.*)$", re.ASCII)
# common.cu, after the header: maxBytes lowered to what the GPUs' memory holds
_REDUCED = re.compile(r"^#\s*Reducing\s+maxBytes\s+to\s+(\S+)\s+due\s+to\s+memory\s+limitation", re.ASCII)
_VERSION = re.compile(r"^#\s*nccl-tests\s+version\s+(\S+).*?nccl-library=(\S+)", re.ASCII)
# writeResultFooter: "# Out of bounds values : %d %s" (OK, or FAILED when the count is not 0) and
# "# Avg bus bandwidth    : %g". A line that starts like one but does not end like one is refused.
_OOB = re.compile(r"^#\s*Out\s+of\s+bounds\s+values\s*:", re.ASCII)
_OOB_VALUE = re.compile(r"(\S+)\s+(OK|FAILED)", re.ASCII)
_AVG = re.compile(r"^#\s*Avg\s+bus\s+bandwidth\s*:", re.ASCII)
_AVG_VALUE = re.compile(r"\S+", re.ASCII)
_COMMAND = re.compile(r"(?:^|[\s/])(\w+_perf(?:_mpi)?)(?:\s|$)", re.ASCII)
# Open MPI --tag-output, Slurm srun --label
_TAGGED = re.compile(r"^\[\d+,\d+\]<(stdout|stderr)>:", re.ASCII)
_LABELLED = re.compile(r"^\s*\d+: ", re.ASCII)
# What NCCL itself prints while the table is written (NCCL_DEBUG=INFO or WARN), and UCX's warnings
# when a launcher merges stderr into the log: the only lines besides rows and comments that the
# table of an nccl-tests log holds.
_NCCL_LOG = re.compile(r"^(?:\S+:\d+:\d+ \[\d+\] )?NCCL (?:INFO|WARN|TRACE|ABORT)\b|^NCCL version \S+$"
                       r"|^\[\d+\.\d+\] \[\S+\] +\S+ UCX +[A-Z]+ ", re.ASCII)
_ROW_START = re.compile(r"[0-9]+", re.ASCII)
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?", re.ASCII)
_ROOT = re.compile(r"-?(\d+)", re.ASCII)
_SIDE_FIGURES = ("algbw", "busbw")
_PER_ITER = ("i_min", "i_max", "i_p99", "i_cv%")
JSON_VERSIONS = (1, 2, 3)
# The most a daylight-saving change sets local time back: a -J end_time may be this much before its
# start_time (both local time, no zone) and still be the time the run ended.
LOCAL_CLOCK_STEP = timedelta(hours=1)


@dataclass
class Row:
    """One size of one nccl-tests run: the out-of-place and in-place figures."""

    line: int  # 1-based line in the source file (JSON: 0, see ``where``)
    where: str
    size_bytes: int
    count: int
    dtype: str
    redop: Optional[str]  # None: the table has no redop column; "": the column is empty
    root: Optional[int]  # None: the table has no root column
    in_place: Optional[dict]  # {"time_us", "algbw_gbps", "busbw_gbps", "wrong", ("time_printed", "max_error", "times_us")}
    out_of_place: Optional[dict]
    iters: Optional[int] = None
    half_ulps: dict = field(default_factory=dict)  # side -> (algbw, busbw): the printed figures' rounding
    time_column: str = "time"  # "cputime" (-C): the host's time of the loop, not the one algbw came from


@dataclass
class Trailer:
    """The lines nccl-tests prints after the table (``writeResultFooter``)."""

    avg_busbw_gbps: Optional[float] = None
    avg_busbw_half_ulp: float = 0.0
    avg_where: str = ""
    out_of_bounds: Optional[int] = None
    oob_where: str = ""
    # -J's average_bus_bandwidth.okay: True or False, nccl-tests' verdict on NCCL_TESTS_MIN_BW's bound
    # (below 0.9 x the bound fails it, and nccl-tests exits 1), "unchecked" without a bound; None: not written
    avg_okay: Any = None
    avg_bound_gbps: Optional[float] = None  # NCCL_TESTS_MIN_BW as nccl-tests read it (atof), from -J's env
    nccl_errors: list[str] = field(default_factory=list)  # -J's errors: NCCL's last error message, if any


@dataclass
class Parsed:
    rows: list[Row]
    iters: int
    warmup: int
    agg_iters: int
    ranks: int
    ranks_from: str
    kind: str  # "text" (#wrong), "text-old" (error column), "json"
    devices: list[dict] = field(default_factory=list)
    nccl_version: Optional[str] = None
    tests_version: Optional[str] = None
    started_at: str = UNKNOWN_START  # as the source gives it; a record takes it only as an instant
    binary: Optional[tuple[str, str]] = None  # (name, where)
    columns: Optional[tuple[str, ...]] = None
    columns_where: str = ""
    validation: Optional[bool] = None
    validation_where: str = ""  # "PATH:3" (the header) or "PATH: field config.validation"
    trailer: Trailer = field(default_factory=Trailer)
    collective: Optional[str] = None  # set by detection
    detection: Any = None
    sweep: Optional[Sweep] = None  # the header's minBytes, maxBytes and step (-J: config's); None where it has none
    agreement: Any = None  # set by harness.nccltests.consistency: how many sides agree with their time
    # (lines, the first's number): lines inside the table that are no row, comment or NCCL's, and hold
    # no row's figures: a launcher's messages (Open MPI's warnings) printed between rows
    read_past: tuple[int, Optional[int]] = (0, None)

    @property
    def fmt(self) -> str:
        return "json" if self.kind == "json" else "text"

    def observed(self) -> Observed:
        rows = []
        for row in self.rows:
            sides = []
            for name, side in (("out_of_place", row.out_of_place), ("in_place", row.in_place)):
                if side is None:
                    sides.append(None)
                    continue
                ha, hb = row.half_ulps.get(name, (JSON_PRINTED_HALF_ULP, JSON_PRINTED_HALF_ULP))
                sides.append(Side(side["algbw_gbps"], side["busbw_gbps"], ha, hb, side.get("wrong")))
            rows.append(ObservedRow(row.where.split(": ", 1)[-1] if self.kind == "json" else f"line {row.line}",
                                    row.size_bytes, row.count, row.dtype, row.redop, row.root, sides))
        return Observed(self.kind, self.ranks, self.ranks_from, rows, self.columns, self.columns_where,
                        self.binary, self.validation)


def nccl_version_text(code: int) -> str:
    """NCCL_VERSION_CODE -> "2.21.5" (major*10000 + minor*100 + patch since 2.9)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def half_ulp(token: str) -> float:
    """Half the last digit a printed number carries: "0.04" -> 0.005, "2e-07" -> 5e-08, "16801" -> 0.5."""
    match = re.fullmatch(r"[-+]?\d*(?:\.(\d*))?(?:[eE]([-+]?\d+))?", token)
    if not match:
        return 0.0
    return 0.5 * 10.0 ** (int(match.group(2) or 0) - len(match.group(1) or ""))


@dataclass(frozen=True)
class _Layout:
    optional: tuple[str, ...]  # after "type": (), ("redop",), ("root",), ("redop", "root")
    side: tuple[str, ...]  # time algbw busbw #wrong|error [i_min i_max i_p99 i_cv%]
    timestamp: bool

    @property
    def width(self) -> int:
        return 3 + len(self.optional) + 2 * len(self.side) + (2 if self.timestamp else 0)

    @property
    def kind(self) -> str:
        return "text-old" if self.side[3] == "error" else "text"


# Without a column header line, the current layout (with redop and root) is assumed.
_CURRENT = _Layout(("redop", "root"), ("time", "algbw", "busbw", "#wrong"), False)


def _layout(words: list[str], where: str) -> _Layout:
    i = 3
    optional = []
    while i < len(words) and words[i] in ("redop", "root"):
        optional.append(words[i])
        i += 1
    rest = words[i:]
    timestamp = bool(rest) and rest[-1] == "timestamp"
    rest = rest[:-1] if timestamp else rest
    half = len(rest) // 2
    side = tuple(rest[:half])
    valid = (len(rest) % 2 == 0 and tuple(rest[half:]) == side and len(side) in (4, 8)
             and side[0] in ("time", "cputime") and side[1:3] == _SIDE_FIGURES and side[3] in ("#wrong", "error")
             and (len(side) == 4 or side[4:] == _PER_ITER))
    if not valid:
        raise NcclTestsFormatError(f"{where}: a column header nccl-tests does not print: {' '.join(words)!r}")
    return _Layout(tuple(optional), side, timestamp)


def _side(words: list[str], layout: _Layout, where: str, name: str) -> tuple[dict, tuple[float, float]]:
    # time_printed: the time's own digits (nccl-tests prints 127.0, 5871.07 or 12646 by version
    # and magnitude), so tables show it as the log does; the number is time_us. nccl-tests never
    # prints a zero or negative mean.
    side = {"time_us": text_number(words[0], where, f"{name} time (us)", above=True, high=MAX_TIME_US),
            "time_printed": words[0],
            "algbw_gbps": text_number(words[1], where, f"{name} algbw"),
            "busbw_gbps": text_number(words[2], where, f"{name} busbw"), "wrong": None}
    if layout.side[3] == "#wrong":
        # a count of wrong elements: 0.5 or -1 was not written by nccl-tests, and is never rounded
        side["wrong"] = None if words[3] == "N/A" else text_integer(words[3], where, f"{name} #wrong")
    else:  # before 2.13: the largest deviation from the expected values, not a count
        side["max_error"] = None if words[3] == "N/A" else text_number(words[3], where, f"{name} error")
    if len(layout.side) == 8:
        side.update(i_min_us=text_number(words[4], where, f"{name} i_min"),
                    i_max_us=text_number(words[5], where, f"{name} i_max"),
                    i_p99_us=text_number(words[6], where, f"{name} i_p99"))
    return side, (half_ulp(words[1]), half_ulp(words[2]))


def _plain_lines(lines: Iterable[str]):
    """(line number, line) without launcher prefixes or indentation; stderr-tagged lines are dropped.
    A tab is read as a space: nccl-tests pads its columns and labels with spaces ("%12li  %12li",
    "# %-20s : %d"), which a pager, an editor or ``unexpand`` may have turned into tabs; what the
    words are is the same, and every pattern here takes whitespace as a run of spaces."""
    for number, raw in enumerate(lines, start=1):
        raw = raw.replace("\t", " ")
        tagged = _TAGGED.match(raw)
        if tagged:
            if tagged.group(1) == "stderr":
                continue
            raw = raw[tagged.end():]
        else:
            labelled = _LABELLED.match(raw)
            if labelled:
                raw = raw[labelled.end():]
        yield number, raw.strip()


def _text_root(token: str, where: str) -> int:
    """A rank, or -1 (nccl-tests' "%6i"): -1 is the only negative root a test passes."""
    if not (m := _ROOT.fullmatch(token)):
        raise NcclTestsFormatError(f"{where}: root is {token!r}, not a rank or -1")
    rank = text_integer(m.group(1), where, "root")
    if token.startswith("-") and token != "-1":
        raise NcclTestsFormatError(f"{where}: root is {token}; nccl-tests prints -1 (no root) or a rank, 0 or more")
    return -rank if token.startswith("-") else rank


def _check_roots(rows: list[Row], ranks: int, ranks_from: str, at: str) -> None:
    """Every root a rank of the run (or -1), where the log lists its ranks; ``at`` names a row's root field."""
    for row in rows:
        if row.root is not None and row.root >= ranks:
            raise NcclTestsFormatError(f"{row.where}{at}: root is {row.root}, but the run has {ranks} ranks "
                                       f"({ranks_from}): a root is -1 (no root) or a rank, 0 to {ranks - 1}")


def _out_of_bounds(value: str, where: str) -> int:
    """The count of "# Out of bounds values : K OK|FAILED", which nccl-tests marks FAILED exactly when K is not 0."""
    if not (m := _OOB_VALUE.fullmatch(value)):
        raise NcclTestsFormatError(f"{where}: Out of bounds values is {value[:40]!r}; nccl-tests prints a count "
                                   "then OK or FAILED")
    count = text_integer(m.group(1), where, "Out of bounds values")
    if (count != 0) != (m.group(2) == "FAILED"):
        raise NcclTestsFormatError(f"{where}: Out of bounds values {count} {m.group(2)}; nccl-tests prints FAILED "
                                   "exactly when the count is not 0")
    return count


# The lines nccl-tests prints once per run (writeDeviceReport's banner, writeResultFooter's trailer),
# by the label an error names them with. Read as they come, a second one would replace the first:
# a FAILED data check followed by an OK one would import as OK.
_ONCE = (("Collective test starting", _BANNER), ("Out of bounds values", _OOB), ("Avg bus bandwidth", _AVG),
         ("Collective test concluded", _CONCLUDED))


def _once_label(line: str) -> Optional[str]:
    return next((label for label, pattern in _ONCE if pattern.match(line)), None)


def _check_once(once: dict[str, list[int]], path: str) -> None:
    """Each of _ONCE on one line at most; else NcclTestsFormatError naming the first and the second."""
    for label, numbers in once.items():
        if len(numbers) > 1:
            raise NcclTestsFormatError(
                f"{path}:{numbers[1]}: a second '# {label}' line (the first on line {numbers[0]}); nccl-tests "
                "prints it once per run (src/util.cu), so one of them is not this run's: the file holds parts of "
                "two runs, or was edited. Import the log of one run as nccl-tests wrote it")


def _row(cols: list[str], layout: _Layout, number: int, where: str) -> Row:
    if len(cols) == layout.width - 1 and "redop" in layout.optional and _NUMBER.fullmatch(cols[3]):
        cols = cols[:3] + [""] + cols[3:]  # an empty redop column (alltoall before 2.13, hypercube)
    if len(cols) != layout.width:
        raise NcclTestsFormatError(
            f"{where}: {len(cols)} columns, the table header says {layout.width} "
            f"(size count type {' '.join(layout.optional)}, then {' '.join(layout.side)} out-of-place and in-place)")
    size, count = text_integer(cols[0], where, "size (B)"), text_integer(cols[1], where, "count (elements)")
    if cols[2] not in DTYPES:
        raise NcclTestsFormatError(f"{where}: unknown data type {cols[2]!r}")
    values = dict(zip(layout.optional, cols[3:3 + len(layout.optional)]))
    root = None
    if "root" in values:
        root = _text_root(values["root"], where)
    base, width = 3 + len(layout.optional), len(layout.side)
    out_of_place, oop_ulps = _side(cols[base:base + width], layout, where, "out-of-place")
    in_place, ip_ulps = _side(cols[base + width:base + 2 * width], layout, where, "in-place")
    return Row(number, where, size, count, cols[2], values.get("redop"), root, in_place, out_of_place,
               half_ulps={"out_of_place": oop_ulps, "in_place": ip_ulps}, time_column=layout.side[0])


def _looks_like_row(cols: list[str]) -> bool:
    """A line that holds what a row does, a data type or three figures, though it does not start like
    one: a row spoilt ("+134217728 ...", "x134217728 ..."), where a launcher's message holds words
    ("[node01:4100] 7 more processes have sent help message ...", "  Local host:   node01")."""
    return sum(1 for c in cols if _NUMBER.fullmatch(c) or c == "N/A") >= 3 or any(c in DTYPES for c in cols)


def _add_row(rows: list, row: Row, path: str) -> None:
    if len(rows) >= MAX_ROWS:
        raise NcclTestsFormatError(f"{row.where}: more than {MAX_ROWS} result rows; an import holds at most "
                                   f"{MAX_ROWS} (the most cases a critpath run holds): split {path}")
    rows.append(row)


def parse_text(lines: Iterable[str], path: str) -> Parsed:
    """The output whose lines (without line ends: LF, CRLF or a lone CR, harness.nccltests.source) are ``lines``;
    read as they come, so that only the rows are held."""
    header = header_where = None
    sweep: Optional[Sweep] = None
    headers: list[int] = []
    devices: list[dict] = []
    rows: list[Row] = []
    binary = banner = None
    nccl_version = tests_version = None
    layout, columns_where = None, ""
    trailer = Trailer()
    rank_lines: list[Listed] = []  # each device's '#  Rank' line
    # From the column header (or the first row) to the trailer: there, a line that still looks like
    # a row but does not start like one is refused, so that a row a byte spoils ("+8", a NUL, a
    # fullwidth digit) cannot drop out of the import silently; a launcher's message is read past
    # and counted.
    in_table = False
    read_past, read_past_first = 0, None
    once: dict[str, list[int]] = {}  # a line nccl-tests prints once per run -> the lines it is on
    for number, line in _plain_lines(lines):
        where = f"{path}:{number}"
        if not line:
            continue
        if line.startswith("#"):
            if label := _once_label(line):
                once.setdefault(label, []).append(number)
            if m := _BANNER.match(line):
                binary = banner = (m.group(1), f"line {number}")
            elif (m := _CONCLUDED.match(line)) and banner and m.group(1) != banner[0]:
                raise NcclTestsFormatError(f"{where}: Collective test concluded: {m.group(1)}, but {banner[1]} says "
                                           f"starting: {banner[0]}; nccl-tests prints its one program name in both "
                                           "(src/util.cu, writeDeviceReport and writeResultFooter)")
            elif m := _HEADER.match(line):
                headers.append(number)
                header, header_where = m.groups(), f"line {number}"
                if m.group(3) is not None:
                    sweep = header_sweep(m.group(3), m.group(4), m.group(5), where, header_where)
            elif m := _RANK.match(line):
                if m.group(2) is not None:
                    text_integer(m.group(2), where, "Group", *BOUNDS["group"])
                pid = text_integer(m.group(3), where, "Pid", *BOUNDS["pid"])
                devices.append({"index": text_integer(m.group(1), where, "Rank"), "host": m.group(4),
                                "device": text_integer(m.group(5), where, "device", *BOUNDS["device"]),
                                "pci": m.group(6), "name": m.group(7).strip()})
                rank_lines.append(Listed(devices[-1]["index"], pid, where, f"line {number}"))
            elif line.lstrip("# ").startswith("size ") and line.lstrip("# ").split()[:3] == ["size", "count", "type"]:
                layout, columns_where = _layout(line.lstrip("# ").split(), where), f"line {number}"
                in_table = header is not None
            elif m := _REDUCED.match(line):
                sweep = reduced_sweep(sweep, m.group(1), where, f"line {number}")
            elif m := _VERSION.match(line):
                tests_version = m.group(1)
                nccl_version = nccl_version_text(text_integer(m.group(2), where, "nccl-library"))
            elif m := _OOB.match(line):
                trailer.out_of_bounds = _out_of_bounds(line[m.end():].strip(), where)
                trailer.oob_where = f"line {number}"
                in_table = False
            elif m := _AVG.match(line):
                value = line[m.end():].strip()
                if not _AVG_VALUE.fullmatch(value):
                    raise NcclTestsFormatError(f"{where}: Avg bus bandwidth is {value[:40]!r}; nccl-tests prints "
                                               "one number there")
                trailer.avg_busbw_gbps = text_number(value, where, "Avg bus bandwidth")
                trailer.avg_busbw_half_ulp, trailer.avg_where = half_ulp(value), f"line {number}"
                in_table = False
            continue
        cols = line.split()
        if not _ROW_START.fullmatch(cols[0]):
            if in_table and not _NCCL_LOG.match(line):
                if _looks_like_row(cols):
                    raise NcclTestsFormatError(
                        f"{where}: {line[:60]!r} in the results table is neither a result row (which starts with "
                        "the size in digits) nor a line NCCL prints, yet holds a row's figures: a row changed or "
                        "cut, or not nccl-tests output")
                read_past += 1
                read_past_first = read_past_first or number
            if header is None and binary is None and (m := _COMMAND.search(line)):
                binary = (m.group(1), f"the command on line {number}")
            continue  # before the table: the command, launcher and NCCL lines
        if header is None:
            raise NcclTestsFormatError(f"{where}: a result row before the '# nThread ... iters:' header, which the "
                                       "import needs (iteration and rank counts): is this the whole output of an "
                                       "nccl-tests run?")
        _add_row(rows, _row(cols, layout or _CURRENT, number, where), path)
        in_table = True
    if len(headers) > 1:
        raise NcclTestsFormatError(f"{path}: {len(headers)} nccl-tests runs in one file (headers on lines "
                                   f"{', '.join(map(str, headers))}); import each run from a file of its own")
    _check_once(once, path)
    if header is None:
        raise NcclTestsFormatError(f"{path}:1: no '# nThread ... iters:' header line; the import needs it "
                                   "(iteration and rank counts): is this the whole output of an nccl-tests run?")
    if not rows:
        raise NcclTestsFormatError(f"{path}: no result rows")
    nthreads, ngpus, _, _, _, warmup, iters, agg, validation, unalign = header
    for name, value in (("nThread", nthreads), ("nGpus", ngpus), ("iters", iters)):
        text_integer(value, f"{path}:{headers[0]}", name, low=1)
    text_integer(agg or "1", f"{path}:{headers[0]}", "agg iters", low=1, high=MAX_AGG_ITERS)
    text_integer(warmup, f"{path}:{headers[0]}", "warmup iters")
    if validation is not None:
        text_integer(validation, f"{path}:{headers[0]}", "validation", high=1)
    if unalign is not None:
        text_integer(unalign, f"{path}:{headers[0]}", "unalign", high=MAX_UNALIGN)
    _plan_count(int(iters), f"{path}:{headers[0]}: iters")
    _plan_count(int(warmup), f"{path}:{headers[0]}: warmup iters")
    per_process = int(nthreads) * int(ngpus)
    if devices:
        ranks = len({d["index"] for d in devices})
        ranks_from = f"{ranks} '#  Rank' lines"
        check_listed(rank_lines, ranks, ranks_from, per_process, f"nThread {nthreads} x nGpus {ngpus} ({header_where})")
        # without them the processes are not known, nor the ranks a root may be
        _check_roots(rows, ranks, ranks_from, ": column root")
    else:
        ranks = per_process
        ranks_from = f"nThread {nthreads} x nGpus {ngpus} ({header_where}), one process: no '#  Rank' lines"
    return Parsed(rows, int(iters), int(warmup), int(agg or 1), ranks, ranks_from,
                  (layout or _CURRENT).kind, devices, nccl_version, tests_version, binary=binary,
                  columns=(layout or _CURRENT).optional, columns_where=columns_where or "no column header",
                  validation=None if validation is None else validation != "0",
                  validation_where=f"{path}:{headers[0]}", trailer=trailer,
                  read_past=(read_past, read_past_first), sweep=sweep)


def _dotted(path: list) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _get(data: Any, path: list, file: str) -> Any:
    node = data
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            raise NcclTestsFormatError(f"{file}: field {_dotted(path)} is missing") from None
    return node


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise NcclTestsFormatError(f"{where}: {json.dumps(value)[:40]} is not an object")
    return value


def _optional(obj: dict, key: str, read, where: str, default: Any = None) -> Any:
    """``read(obj[key], where.key)``, or ``default`` when the key is absent or null (nccl-tests
    writes null for what it did not measure)."""
    value = obj.get(key)
    return default if value is None else read(value, f"{where}.{key}")


def _json_side(entry: dict, key: str, where: str, iterations: int) -> Optional[dict]:
    side = entry.get(key)
    if side is None:
        return None  # writeBenchMarkLineNullBody: no out-of-place figures
    where = f"{where}.{key}"
    side = _object(side, where)
    time_key = "time" if "time" in side else "cpu_time"
    # nccl-tests never prints a zero or negative mean time, nor a fraction of a wrong element
    result = {"time_us": json_number(side.get(time_key), f"{where}.{time_key}", above=True, high=MAX_TIME_US,
                                     what="microseconds"),
              "algbw_gbps": json_number(side.get("alg_bw"), f"{where}.alg_bw", what="GB/s"),
              "busbw_gbps": json_number(side.get("bus_bw"), f"{where}.bus_bw", what="GB/s"),
              "wrong": _optional(side, "nwrong", json_integer, where)}
    per_iter = entry.get(f"{key}_per_iter")
    if per_iter is not None:
        # writePerIterReport: the max over GPUs and processes per iteration; its own summary skips
        # the first skipped_iterations (-per_iter_skip), and so do the samples taken from it.
        at = f"{where}_per_iter"
        times = per_iteration_times(_object(per_iter, at), at, iterations)
        if times is not None:
            result["times_us"], result["skipped_iterations"] = times
    return result


def _json_trailer(data: dict, path: str) -> Trailer:
    trailer = Trailer()
    oob = data.get("out_of_bounds")
    if oob is not None:
        oob = _object(oob, f"{path}: field out_of_bounds")
        trailer.out_of_bounds = json_integer(_get(data, ["out_of_bounds", "count"], path),
                                             f"{path}: field out_of_bounds.count")
        trailer.oob_where = "field out_of_bounds"
        # writeResultFooter: jsonBool(errors[0] == 0), the count's own verdict
        okay = _optional(oob, "okay", json_flag, f"{path}: field out_of_bounds")
        if okay is not None and okay != (trailer.out_of_bounds == 0):
            raise NcclTestsFormatError(f'{path}: field out_of_bounds.okay is "{str(okay).lower()}" beside count '
                                       f"{trailer.out_of_bounds}: nccl-tests writes true exactly when the count is 0")
    # JSON version 1 spelt it "average_bus_bandwidith" / "bandwidith" (fixed in nccl-tests 85ca91d)
    for key, value in (("average_bus_bandwidth", "bandwidth"), ("average_bus_bandwidith", "bandwidith")):
        avg = data.get(key)
        if avg is None:
            continue
        avg = _object(avg, f"{path}: field {key}")
        if value not in avg:
            raise NcclTestsFormatError(f"{path}: field {key}.{value} is missing")
        trailer.avg_busbw_gbps = json_number(avg[value], f"{path}: field {key}.{value}", what="GB/s")
        trailer.avg_busbw_half_ulp, trailer.avg_where = JSON_PRINTED_HALF_ULP, f"field {key}"
        # the verdict on NCCL_TESTS_MIN_BW's bound, "unchecked" without one (writeResultFooter)
        trailer.avg_okay = _optional(avg, "okay", lambda v, w: json_flag(v, w, also=(UNCHECKED,)),
                                     f"{path}: field {key}")
        _check_avg_okay(trailer, _min_bw(data, path), f"{path}: field {key}.okay")
    return trailer


# average_bus_bandwidth.okay without a bound to check against (writeResultFooter)
UNCHECKED = "unchecked"
MIN_BW_ENV = "NCCL_TESTS_MIN_BW"
# common.cu since 2.13 (every release that writes -J): the average fails below this share of the bound
MIN_BW_SHARE = 0.9
# atof: the longest leading decimal, 0 where there is none
_ATOF = re.compile(r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", re.ASCII)


def _min_bw(data: dict, path: str) -> tuple[bool, Optional[float], str]:
    """(whether -J lists its environment, NCCL_TESTS_MIN_BW as nccl-tests reads it or None, where)."""
    env = data.get("env")
    if env is None:
        return False, None, ""
    if not isinstance(env, list):
        raise NcclTestsFormatError(f"{path}: field env: {json.dumps(env)[:40]} is not a list of NAME=VALUE strings")
    for i, entry in enumerate(env):
        text = json_text(entry, f"{path}: field env[{i}]", "a NAME=VALUE string")
        name, _, value = text.partition("=")
        if name == MIN_BW_ENV:
            prefix = _ATOF.match(value)
            return True, float(prefix.group()) if prefix else 0.0, f"field env[{i}]"
    return True, None, ""


def _check_avg_okay(trailer: Trailer, min_bw: tuple[bool, Optional[float], str], where: str) -> None:
    """average_bus_bandwidth.okay held to the bound in env and to the average, as out_of_bounds.okay is to
    its count: nccl-tests writes "unchecked" exactly when NCCL_TESTS_MIN_BW is unset, else false exactly
    when the average is below MIN_BW_SHARE of it."""
    listed, bound, bound_where = min_bw
    okay, avg = trailer.avg_okay, trailer.avg_busbw_gbps
    trailer.avg_bound_gbps = bound
    if okay is None or not listed:
        return  # no verdict, or no environment to hold it to: the verdict is kept as written
    said = f'{where} is "{str(okay).lower()}"'
    if bound is None:
        if okay != UNCHECKED:
            raise NcclTestsFormatError(f"{said}, but field env sets no {MIN_BW_ENV}: nccl-tests writes "
                                       f'"{UNCHECKED}" there without a bound')
        return
    if okay == UNCHECKED:
        raise NcclTestsFormatError(f"{said}, but {bound_where} sets {MIN_BW_ENV} to {bound:g}: nccl-tests checks "
                                   'the average against it and writes "true" or "false"')
    floor = MIN_BW_SHARE * bound
    if abs(avg - floor) <= trailer.avg_busbw_half_ulp:
        return  # the printed average is too near the floor to tell which side nccl-tests saw
    if okay != (avg >= floor):
        raise NcclTestsFormatError(f"{said}, but the average {avg:g} GB/s is {'at or above' if avg >= floor else 'below'} "
                                   f"{MIN_BW_SHARE:g} x {MIN_BW_ENV} {bound:g} ({bound_where}) = {floor:g}: nccl-tests "
                                   "writes false exactly when it is below")


def _json_root(value: Any, where: str) -> int:
    """nccl-tests writes the root as a string ("%6i"); a JSON integer is read too."""
    if isinstance(value, str) and _ROOT.fullmatch(value.strip()):
        return _text_root(value.strip(), where)
    if isinstance(value, int) and not isinstance(value, bool):
        return json_integer(value, where, low=-1, what="a rank or -1")
    raise NcclTestsFormatError(f"{where}: {json.dumps(value)[:40]} is not a rank or -1")


def _json_row(entry: Any, i: int, path: str, iters: int) -> Row:
    where = f"{path}: results[{i}]"
    entry = _object(entry, where)

    def need(key: str) -> Any:
        return _get({"results": {i: entry}}, ["results", i, key], path)

    dtype = need("type")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise NcclTestsFormatError(f"{where}.type: unknown data type {json.dumps(dtype)[:40]}")
    size = json_integer(need("size"), f"{where}.size", what="bytes")
    count = json_integer(need("count"), f"{where}.count", what="elements")
    redop = json_text(entry.get("redop", ""), f"{where}.redop", "a reduction name")
    actual = _optional(entry, "actual_iterations", lambda v, w: _actual_iterations(v, w, iters), where)
    _optional(entry, "experiment_name", lambda v, w: json_text(v, w, "an experiment name"), where)
    in_place = _json_side(entry, "in_place", where, actual or iters)
    out_of_place = _json_side(entry, "out_of_place", where, actual or iters)
    if in_place is None and out_of_place is None:
        raise NcclTestsFormatError(f"{where}: neither in_place nor out_of_place figures")
    cpu = any(isinstance(entry.get(key), dict) and "time" not in entry[key] for key in ("in_place", "out_of_place"))
    return Row(0, where, size, count, dtype, redop, _json_root(entry.get("root", ""), f"{where}.root"), in_place,
               out_of_place, actual, time_column="cputime" if cpu else "time")


def _actual_iterations(value: Any, where: str, iters: int) -> int:
    """A row's actual_iterations: nccl-tests writes the configured count for every row
    (``writeBenchmarkLineTerminator(iters, "")`` in src/common.cu, in every release that writes -J),
    so another count is not its output: the row would claim times its run did not take."""
    count = json_integer(value, where, low=1, what="iterations")
    if count != iters:
        raise NcclTestsFormatError(f"{where}: {count}, but field config.iterations is {iters}: nccl-tests times "
                                   "every row for the configured iterations and writes that count here")
    return count


def _check_per_iter_flag(config: dict, results: list, path: str) -> None:
    """config.per_iter_timing against the rows: nccl-tests writes ``<side>_per_iter`` for every side
    it measured exactly when the flag is on (``writePerIterReport`` in src/util.cu)."""
    flag = _optional(config, "per_iter_timing", json_flag, f"{path}: field config")
    if flag is None:
        return  # JSON version 1 has no such flag: nothing to contradict
    said = f'field config.per_iter_timing is "{str(flag).lower()}"'
    for i, entry in enumerate(results):
        for side in ("out_of_place", "in_place"):
            timed = entry.get(f"{side}_per_iter") is not None
            if entry.get(side) is not None and timed != flag:
                what = "holds per-iteration times" if timed else "is missing"
                raise NcclTestsFormatError(f"{path}: results[{i}].{side}_per_iter {what}, but {said}: nccl-tests "
                                           "writes them for every side exactly when the flag is on")


def _bounded(field: str, what: str):
    return lambda v, w: json_integer(v, w, *BOUNDS[field], what=what)


def _json_device(d: Any, i: int, path: str) -> dict:
    where = f"{path}: field config.devices[{i}]"
    d = _object(d, where)
    _optional(d, "group", _bounded("group", "an MPI color"), where)
    return {"index": _optional(d, "rank", json_integer, where),
            "pid": _optional(d, "pid", _bounded("pid", "a process ID"), where),
            "host": _optional(d, "hostname", lambda v, w: json_text(v, w, "a host name", empty=False), where),
            "device": _optional(d, "device", _bounded("device", "a CUDA device ordinal"), where),
            "pci": _optional(d, "device_hex", lambda v, w: json_text(v, w, "a PCI address"), where),
            "name": _optional(d, "device_info", lambda v, w: json_text(v, w, "a device name"), where)}


def _words(value: Any, where: str) -> list[str]:
    """The command line nccl-tests records (``args``): a list of strings."""
    if not isinstance(value, list):
        raise NcclTestsFormatError(f"{where}: {json.dumps(value)[:40]} is not a list of the command's words")
    return [json_text(word, f"{where}[{i}]", "a word of the command", most=MAX_ARG_CHARS)
            for i, word in enumerate(value)]


def _config_count(config: dict, key: str, path: str, default: int, low: int, high: int = MAX_COUNT) -> int:
    return _optional(config, key, lambda v, w: json_integer(v, w, low=low, high=high), f"{path}: field config",
                     default)


def _json_time(data: dict, key: str, path: str) -> tuple[str, Optional[datetime]]:
    """-J's start_time or end_time (util.cu, formatNow: strftime "%Y-%m-%d %H:%M:%S", local time) as
    written and as a time, held to the rule run.json's started_at is read by, which the import copies
    start_time into: a time no reader takes is this file's fault. (UNKNOWN_START, None) where absent."""
    if data.get(key) is None:
        return UNKNOWN_START, None
    text = json_text(data[key], f"{path}: field {key}", "a time")
    try:
        return text, check_time(key, text)
    except RunMetaError as exc:  # "field start_time: ..."
        raise NcclTestsFormatError(f"{path}: {exc}") from None


def _json_started(data: dict, path: str) -> str:
    """start_time, and end_time held to it: the run ended after it started. Both are local time without
    a zone, so a daylight-saving change within the run may set the end back by up to LOCAL_CLOCK_STEP."""
    started, start = _json_time(data, "start_time", path)
    _, end = _json_time(data, "end_time", path)
    if start is not None and end is not None and (start.tzinfo is None) == (end.tzinfo is None) \
            and end < start - LOCAL_CLOCK_STEP:
        raise NcclTestsFormatError(f"{path}: field end_time: {data['end_time']} is before field start_time "
                                   f"{started}: nccl-tests writes the time it finished, after it started")
    return started


def _json_errors(value: Any, where: str) -> list[str]:
    """-J's errors: a list of NCCL's last error message, or none (util.cu, writeErrors: the string
    ncclGetLastError gives, "" where it holds none). It is no count: out_of_bounds.count is that."""
    if not isinstance(value, list) or len(value) > 1:
        shown = f"a list of {len(value)}" if isinstance(value, list) else json.dumps(value)[:40]
        raise NcclTestsFormatError(f"{where}: {shown} is not what nccl-tests writes there: a list of at most one "
                                   "string, NCCL's last error message (ncclGetLastError)")
    return [json_text(text, f"{where}[{i}]", "an NCCL error message") for i, text in enumerate(value)]


def _plan_count(count: int, where: str) -> int:
    """``count`` iterations (``where`` names them), no more than a record's plan holds: a critpath
    run times at most MAX_ITERS, and every reader of results.jsonl refuses a record of more."""
    if count > MAX_ITERS:
        raise NcclTestsFormatError(f"{where}: {count} is more than {MAX_ITERS}, the most iterations a critpath "
                                   "record's plan holds (MAX_ITERS, the bound of --iters)")
    return count


def parse_json(text: str, path: str) -> Parsed:
    try:
        data = loads_strict(text, path)  # a repeated key ("nwrong" twice) is refused, not the last taken
    except JsonFileError as exc:
        raise NcclTestsFormatError(str(exc)) from None
    if not isinstance(data, dict):
        raise NcclTestsFormatError(f"{path}:1: the JSON output of nccl-tests is an object")
    version = _get(data, ["version"], path)
    if isinstance(version, bool) or version not in JSON_VERSIONS:
        raise NcclTestsFormatError(f"{path}: field version: {version!r} is not a known nccl-tests JSON version "
                                   f"({', '.join(map(str, JSON_VERSIONS))})")
    config = _object(_get(data, ["config"], path), f"{path}: field config")
    where = f"{path}: field config.iterations"
    iters = _plan_count(json_integer(_get(data, ["config", "iterations"], path), where, low=1), where)
    results = _get(data, ["results"], path)
    if not isinstance(results, list) or not results:
        raise NcclTestsFormatError(f"{path}: field results: no result entries")
    if len(results) > MAX_ROWS:
        raise NcclTestsFormatError(f"{path}: field results: {len(results)} entries; an import holds at most "
                                   f"{MAX_ROWS} (the most cases a critpath run holds)")
    rows = [_json_row(entry, i, path, iters) for i, entry in enumerate(results)]
    _check_per_iter_flag(config, results, path)
    # writeDeviceReport: one devices entry per process (the first line of its "#  Rank" block), so
    # the rank count is processes x threads x GPUs per thread.
    listed = config.get("devices")
    if listed is None:
        listed = []
    elif not isinstance(listed, list):
        raise NcclTestsFormatError(f"{path}: field config.devices: {json.dumps(listed)[:40]} is not a list of processes")
    devices = [_json_device(d, i, path) for i, d in enumerate(listed)]
    nthreads = _config_count(config, "nthreads", path, 1, low=1)
    ngpus = _config_count(config, "ngpus", path, 1, low=1)
    ranks = max(1, len(listed)) * nthreads * ngpus
    ranks_from = f"{len(listed)} processes in config.devices x nthreads {nthreads} x ngpus {ngpus}"
    if listed:
        check_listed([Listed(d["index"], d["pid"], f"{path}: field config.devices[{i}]", f"config.devices[{i}]", json=True)
                      for i, d in enumerate(devices) if d["index"] is not None],
                     ranks, ranks_from, nthreads * ngpus, f"nthreads {nthreads} x ngpus {ngpus}")
        _check_roots(rows, ranks, ranks_from, ".root")
    args = _optional(data, "args", _words, f"{path}: field", [])
    code = _optional(data, "nccl_version", lambda v, w: json_integer(v, w, what="an NCCL_VERSION_CODE"),
                     f"{path}: field")
    validation = _optional(config, "validation", lambda v, w: v if isinstance(v, bool) else
                           json_integer(v, w, high=1, what="0 or 1"), f"{path}: field config")
    warmup = _plan_count(_config_count(config, "warmup_iters", path, 0, low=0), f"{path}: field config.warmup_iters")
    agg = _config_count(config, "aggregated_iterations", path, 1, low=1, high=MAX_AGG_ITERS)
    started = _json_started(data, path)
    trailer = _json_trailer(data, path)
    if data.get("errors") is not None:  # "" is no error: writeErrors writes it where NCCL holds none
        trailer.nccl_errors = [e for e in _json_errors(data["errors"], f"{path}: field errors") if e]
    return Parsed(rows, iters, warmup, agg,
                  ranks, ranks_from, "json", devices, None if code is None else nccl_version_text(code),
                  None, started, binary=(args[0], "field args[0]") if args else None,
                  validation=None if validation is None else bool(validation),
                  validation_where=f"{path}: field config.validation", trailer=trailer,
                  sweep=json_sweep(config, path))
