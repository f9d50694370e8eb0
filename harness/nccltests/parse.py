"""Read nccl-tests output, the text table or the ``-J`` JSON file, into rows and the run's facts.

Formats, as NVIDIA/nccl-tests writes them (src/util.cu at 2.19.6; older layouts from its history):

- Text, 2.13 and later: ``size count type redop root``, then per side (out-of-place first, then
  in-place) ``time algbw busbw #wrong``; with per-iteration timing also ``i_min i_max i_p99 i_cv%``;
  with ``-T`` a timestamp (two words) at the end. ``#wrong`` is N/A where not checked.
- Text before 2.13: each binary printed its own columns after ``type`` (none, ``redop``, ``root``
  or ``redop root``) and an ``error`` column (the largest deviation, ``%5.0le``) for ``#wrong``.
- The header ``# nThread T nGpus G ... iters: N``, one ``#  Rank r [Group g] Pid p on HOST device
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
from typing import Any, Optional

from harness.nccltests.evidence import Observed, ObservedRow, Side

# nccl-tests type names -> critpath dtype names
DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64", "int8": "int8",
          "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
          "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2", "char": "int8", "int": "int32"}
_BANNER = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_HEADER = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+).*?warmup iters:\s*(\d+)\s+iters:\s*(\d+)"
                     r"(?:\s+agg iters:\s*(\d+))?(?:\s+validation:\s*(\d+))?")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s+(.*)$")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+).*?nccl-library=(\d+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_COMMAND = re.compile(r"(?:^|[\s/])(\w+_perf(?:_mpi)?)(?:\s|$)")
# Open MPI --tag-output, Slurm srun --label
_TAGGED = re.compile(r"^\[\d+,\d+\]<(stdout|stderr)>:")
_LABELLED = re.compile(r"^\s*\d+: ")
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
_SIDE_FIGURES = ("algbw", "busbw")
_PER_ITER = ("i_min", "i_max", "i_p99", "i_cv%")
JSON_VERSIONS = (1, 2, 3)
JSON_PRINTED_HALF_ULP = 5e-7  # "%lf": six decimals


class NcclTestsFormatError(ValueError):
    """Input that is not nccl-tests output; the message names file and line (or JSON field)."""


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


@dataclass
class Trailer:
    """The lines nccl-tests prints after the table (``writeResultFooter``)."""

    avg_busbw_gbps: Optional[float] = None
    avg_busbw_half_ulp: float = 0.0
    avg_where: str = ""
    out_of_bounds: Optional[int] = None
    oob_where: str = ""


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
    started_at: str = "unknown"
    binary: Optional[tuple[str, str]] = None  # (name, where)
    columns: Optional[tuple[str, ...]] = None
    columns_where: str = ""
    validation: Optional[bool] = None
    trailer: Trailer = field(default_factory=Trailer)
    collective: Optional[str] = None  # set by detection
    detection: Any = None

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


def _number(text: str, what: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise NcclTestsFormatError(f"{where}: {what} is {text!r}, not a number") from None


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


def _side(words: list[str], layout: _Layout, where: str) -> tuple[dict, tuple[float, float]]:
    time = _number(words[0], "time", where)
    if time <= 0:
        raise NcclTestsFormatError(f"{where}: time is {words[0]}, not a positive number of microseconds")
    # time_printed: the time's own digits (nccl-tests prints 127.0, 5871.07 or 12646 by version
    # and magnitude), so tables show it as the log does; the number is time_us
    side = {"time_us": time, "time_printed": words[0], "algbw_gbps": _number(words[1], "algbw", where),
            "busbw_gbps": _number(words[2], "busbw", where), "wrong": None}
    if layout.side[3] == "#wrong":
        side["wrong"] = None if words[3] == "N/A" else int(_number(words[3], "#wrong", where))
    else:  # before 2.13: the largest deviation from the expected values, not a count
        side["max_error"] = None if words[3] == "N/A" else _number(words[3], "error", where)
    if len(layout.side) == 8:
        side.update(i_min_us=_number(words[4], "i_min", where), i_max_us=_number(words[5], "i_max", where),
                    i_p99_us=_number(words[6], "i_p99", where))
    return side, (half_ulp(words[1]), half_ulp(words[2]))


def _plain_lines(text: str):
    """(line number, line) without launcher prefixes or indentation; stderr-tagged lines are dropped."""
    for number, raw in enumerate(text.splitlines(), start=1):
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


def _row(cols: list[str], layout: _Layout, number: int, where: str) -> Row:
    if len(cols) == layout.width - 1 and "redop" in layout.optional and _NUMBER.fullmatch(cols[3]):
        cols = cols[:3] + [""] + cols[3:]  # an empty redop column (alltoall before 2.13, hypercube)
    if len(cols) != layout.width:
        raise NcclTestsFormatError(
            f"{where}: {len(cols)} columns, the table header says {layout.width} "
            f"(size count type {' '.join(layout.optional)}, then {' '.join(layout.side)} out-of-place and in-place)")
    try:
        size, count = int(cols[0]), int(cols[1])
    except ValueError:
        raise NcclTestsFormatError(f"{where}: size and count must be integers") from None
    if cols[2] not in DTYPES:
        raise NcclTestsFormatError(f"{where}: unknown data type {cols[2]!r}")
    values = dict(zip(layout.optional, cols[3:3 + len(layout.optional)]))
    root = None
    if "root" in values:
        if not re.fullmatch(r"-?\d+", values["root"]):
            raise NcclTestsFormatError(f"{where}: root is {values['root']!r}, not a rank or -1")
        root = int(values["root"])
    base, width = 3 + len(layout.optional), len(layout.side)
    out_of_place, oop_ulps = _side(cols[base:base + width], layout, where)
    in_place, ip_ulps = _side(cols[base + width:base + 2 * width], layout, where)
    return Row(number, where, size, count, cols[2], values.get("redop"), root, in_place, out_of_place,
               half_ulps={"out_of_place": oop_ulps, "in_place": ip_ulps})


def parse_text(text: str, path: str) -> Parsed:
    header = header_where = None
    headers: list[int] = []
    devices: list[dict] = []
    rows: list[Row] = []
    binary = None
    nccl_version = tests_version = None
    layout, columns_where = None, ""
    trailer = Trailer()
    for number, line in _plain_lines(text):
        where = f"{path}:{number}"
        if not line:
            continue
        if line.startswith("#"):
            if m := _BANNER.match(line):
                binary = (m.group(1), f"line {number}")
            elif m := _HEADER.match(line):
                headers.append(number)
                header, header_where = m.groups(), f"line {number}"
            elif m := _RANK.match(line):
                devices.append({"index": int(m.group(1)), "host": m.group(2), "device": int(m.group(3)),
                                "pci": m.group(4), "name": m.group(5).strip()})
            elif line.lstrip("# ").startswith("size ") and line.lstrip("# ").split()[:3] == ["size", "count", "type"]:
                layout, columns_where = _layout(line.lstrip("# ").split(), where), f"line {number}"
            elif m := _VERSION.match(line):
                tests_version, nccl_version = m.group(1), nccl_version_text(int(m.group(2)))
            elif m := _OOB.match(line):
                trailer.out_of_bounds, trailer.oob_where = int(m.group(1)), f"line {number}"
            elif m := _AVG.match(line):
                trailer.avg_busbw_gbps = _number(m.group(1), "Avg bus bandwidth", where)
                trailer.avg_busbw_half_ulp, trailer.avg_where = half_ulp(m.group(1)), f"line {number}"
            continue
        cols = line.split()
        if not cols[0].isdigit():
            if header is None and binary is None and (m := _COMMAND.search(line)):
                binary = (m.group(1), f"the command on line {number}")
            continue  # warnings and launcher noise between table rows
        if header is None:
            raise NcclTestsFormatError(f"{where}: a result row before the '# nThread ... iters:' header, which the "
                                       "import needs (iteration and rank counts): is this the whole output of an "
                                       "nccl-tests run?")
        rows.append(_row(cols, layout or _CURRENT, number, where))
    if len(headers) > 1:
        raise NcclTestsFormatError(f"{path}: {len(headers)} nccl-tests runs in one file (headers on lines "
                                   f"{', '.join(map(str, headers))}); import each run from a file of its own")
    if header is None:
        raise NcclTestsFormatError(f"{path}:1: no '# nThread ... iters:' header line; the import needs it "
                                   "(iteration and rank counts): is this the whole output of an nccl-tests run?")
    if not rows:
        raise NcclTestsFormatError(f"{path}: no result rows")
    nthreads, ngpus, warmup, iters, agg, validation = header
    per_process = int(nthreads) * int(ngpus)
    if devices:
        ranks = len({d["index"] for d in devices})
        ranks_from = f"{ranks} '#  Rank' lines"
    else:
        ranks = per_process
        ranks_from = f"nThread {nthreads} x nGpus {ngpus} ({header_where}), one process: no '#  Rank' lines"
    return Parsed(rows, int(iters), int(warmup), int(agg or 1), ranks, ranks_from,
                  (layout or _CURRENT).kind, devices, nccl_version, tests_version, binary=binary,
                  columns=(layout or _CURRENT).optional, columns_where=columns_where or "no column header",
                  validation=None if validation is None else validation != "0", trailer=trailer)


def _get(data: Any, path: list, file: str) -> Any:
    node = data
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
            raise NcclTestsFormatError(f"{file}: field {dotted} is missing") from None
    return node


def _num(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NcclTestsFormatError(f"{where}: {value!r} is not a number")
    return float(value)


def _json_side(entry: dict, key: str, where: str) -> Optional[dict]:
    side = entry.get(key)
    if side is None:
        return None  # writeBenchMarkLineNullBody: no out-of-place figures
    if not isinstance(side, dict):
        raise NcclTestsFormatError(f"{where}.{key}: {side!r} is not an object")
    time_key = "time" if "time" in side else "cpu_time"
    wrong = side.get("nwrong")
    time_us = _num(side.get(time_key), f"{where}.{key}.{time_key}")
    if time_us <= 0:  # as a text row's time: nccl-tests never prints a zero or negative mean
        raise NcclTestsFormatError(f"{where}.{key}.{time_key}: {time_us:g} is not a positive number of microseconds")
    result = {"time_us": time_us,
              "algbw_gbps": _num(side.get("alg_bw"), f"{where}.{key}.alg_bw"),
              "busbw_gbps": _num(side.get("bus_bw"), f"{where}.{key}.bus_bw"),
              "wrong": None if wrong is None else int(_num(wrong, f"{where}.{key}.nwrong"))}
    per_iter = entry.get(f"{key}_per_iter")
    if isinstance(per_iter, dict) and per_iter.get("times_us"):
        # writePerIterReport: the max over GPUs and processes per iteration; its own summary skips
        # the first skipped_iterations (-per_iter_skip), and so do the samples taken from it.
        skipped = int(_num(per_iter.get("skipped_iterations", 0), f"{where}.{key}_per_iter.skipped_iterations"))
        times = [_num(x, f"{where}.{key}_per_iter.times_us") for x in per_iter["times_us"]]
        result["times_us"] = times[skipped:]
        result["skipped_iterations"] = skipped
    return result


def _json_trailer(data: dict, path: str) -> Trailer:
    trailer = Trailer()
    oob = data.get("out_of_bounds")
    if isinstance(oob, dict) and "count" in oob:
        trailer.out_of_bounds = int(_num(oob["count"], f"{path}: field out_of_bounds.count"))
        trailer.oob_where = "field out_of_bounds"
    # JSON version 1 spelt it "average_bus_bandwidith" / "bandwidith" (fixed in nccl-tests 85ca91d)
    for key, value in (("average_bus_bandwidth", "bandwidth"), ("average_bus_bandwidith", "bandwidith")):
        avg = data.get(key)
        if isinstance(avg, dict) and value in avg:
            trailer.avg_busbw_gbps = _num(avg[value], f"{path}: field {key}.{value}")
            trailer.avg_busbw_half_ulp, trailer.avg_where = JSON_PRINTED_HALF_ULP, f"field {key}"
    return trailer


def parse_json(text: str, path: str) -> Parsed:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NcclTestsFormatError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise NcclTestsFormatError(f"{path}:1: the JSON output of nccl-tests is an object")
    version = _get(data, ["version"], path)
    if version not in JSON_VERSIONS:
        raise NcclTestsFormatError(f"{path}: field version: {version!r} is not a known nccl-tests JSON version "
                                   f"({', '.join(map(str, JSON_VERSIONS))})")
    config = _get(data, ["config"], path)
    iters = int(_num(_get(data, ["config", "iterations"], path), f"{path}: field config.iterations"))
    results = _get(data, ["results"], path)
    if not isinstance(results, list) or not results:
        raise NcclTestsFormatError(f"{path}: field results: no result entries")
    rows = []
    for i, entry in enumerate(results):
        where = f"{path}: results[{i}]"
        dtype = _get(data, ["results", i, "type"], path)
        if dtype not in DTYPES:
            raise NcclTestsFormatError(f"{where}.type: unknown data type {dtype!r}")
        root_text = str(entry.get("root", "")).strip()
        if not re.fullmatch(r"-?\d+", root_text):
            raise NcclTestsFormatError(f"{where}.root: {entry.get('root')!r} is not a rank or -1")
        actual = entry.get("actual_iterations")
        rows.append(Row(0, where, int(_num(_get(data, ["results", i, "size"], path), f"{where}.size")),
                        int(_num(_get(data, ["results", i, "count"], path), f"{where}.count")), dtype,
                        str(entry.get("redop", "")), int(root_text), _json_side(entry, "in_place", where),
                        _json_side(entry, "out_of_place", where),
                        None if actual is None else int(_num(actual, f"{where}.actual_iterations"))))
    # writeDeviceReport: one devices entry per process (the first line of its "#  Rank" block), so
    # the rank count is processes x threads x GPUs per thread.
    listed = config.get("devices") or []
    nthreads = int(_num(config.get("nthreads", 1), f"{path}: field config.nthreads"))
    ngpus = int(_num(config.get("ngpus", 1), f"{path}: field config.ngpus"))
    devices = [{"index": d.get("rank"), "host": d.get("hostname"), "device": d.get("device"),
                "pci": d.get("device_hex"), "name": d.get("device_info")} for d in listed]
    ranks = max(1, len(listed)) * nthreads * ngpus
    ranks_from = f"{len(listed)} processes in config.devices x nthreads {nthreads} x ngpus {ngpus}"
    args = data.get("args") or []
    code = data.get("nccl_version")
    validation = config.get("validation")
    warmup = int(_num(config.get("warmup_iters", 0), f"{path}: field config.warmup_iters"))
    agg = int(_num(config.get("aggregated_iterations", 1), f"{path}: field config.aggregated_iterations"))
    return Parsed(rows, iters, warmup, agg,
                  ranks, ranks_from, "json", devices, nccl_version_text(code) if isinstance(code, int) else None,
                  None, str(data.get("start_time", "unknown")),
                  binary=(str(args[0]), "field args[0]") if args else None,
                  validation=None if validation is None else bool(validation), trailer=_json_trailer(data, path))


def parse(text: str, path: str) -> Parsed:
    if text.lstrip().startswith("{"):
        return parse_json(text, path)
    return parse_text(text, path)
