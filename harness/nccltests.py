"""Import nccl-tests output (the text table, or the ``-J`` JSON file) as critpath records.

A cluster's existing nccl-tests runs then feed the same reports, acceptance and gate.

What the import can and cannot say:
- nccl-tests prints, per size, the mean time over its timed iterations (``-n``) and algbw/busbw
  from that mean; no per-iteration times. Such a record holds ONE sample, the mean, and is
  flagged ``extra.imported.samples = "mean_only"`` with ``iters``: reports show "1 mean of N",
  and the claims check and acceptance refuse its percentiles.
- With per-iteration timing (JSON ``*_per_iter.times_us``, max over ranks per iteration), the
  record carries those real samples and is flagged ``"per_iteration"``.
- critpath's allreduce is in place, so an all_reduce_perf row becomes an ``allreduce`` record
  from the in-place columns (``algo=native, backend=nccl``); the out-of-place figures are kept in
  ``extra.imported.out_of_place``. Other collectives become family ``nccltests_<name>``.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from harness.family import CheckResult
from harness.records import Record

# nccl-tests type names -> critpath dtype names
DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64", "int8": "int8",
          "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
          "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2"}
# nccl-tests binary -> collective name (as in its "Collective test starting" line)
_COLLECTIVE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_HEADER = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+).*?warmup iters:\s*(\d+)\s+iters:\s*(\d+)(?:\s+agg iters:\s*(\d+))?")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s+(.*)$")
_COLUMNS = re.compile(r"^#\s*size\s+count\s+type\s+(redop\s+)?(root\s+)?(time|cputime)\b")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+).*?nccl-library=(\d+)")


class NcclTestsFormatError(ValueError):
    """Input that is not nccl-tests output; the message names file and line (or JSON field)."""


@dataclass
class Row:
    """One size of one nccl-tests run: the in-place and out-of-place figures."""

    line: int  # 1-based line in the source file (JSON: 0, see ``where``)
    where: str
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    in_place: Optional[dict]  # {"time_us", "algbw_gbps", "busbw_gbps", "wrong", "times_us"?}
    out_of_place: Optional[dict]
    iters: Optional[int] = None


@dataclass
class Parsed:
    collective: str
    rows: list[Row]
    iters: int
    warmup: int
    agg_iters: int
    devices: list[dict] = field(default_factory=list)
    nccl_version: Optional[str] = None
    tests_version: Optional[str] = None
    started_at: str = "unknown"
    fmt: str = "text"


def nccl_version_text(code: int) -> str:
    """NCCL_VERSION_CODE -> "2.21.5" (major*10000 + minor*100 + patch since 2.9)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _collective_from_name(name: str) -> Optional[str]:
    m = re.search(r"(all_reduce|all_gather|alltoall|reduce_scatter|broadcast|reduce|sendrecv|gather|scatter|hypercube)",
                  Path(name).name)
    return m.group(1) if m else None


def _side(cols: list[str], where: str, per_iter: bool) -> dict:
    def num(text: str, what: str) -> float:
        try:
            return float(text)
        except ValueError:
            raise NcclTestsFormatError(f"{where}: {what} is {text!r}, not a number") from None

    if num(cols[0], "time") <= 0:
        raise NcclTestsFormatError(f"{where}: time is {cols[0]}, not a positive number of microseconds")
    side = {"time_us": num(cols[0], "time"), "algbw_gbps": num(cols[1], "algbw"), "busbw_gbps": num(cols[2], "busbw"),
            "wrong": None if cols[3] == "N/A" else int(num(cols[3], "#wrong"))}
    if per_iter:
        side.update(i_min_us=num(cols[4], "i_min"), i_max_us=num(cols[5], "i_max"), i_p99_us=num(cols[6], "i_p99"))
    return side


def parse_text(text: str, path: str, collective: Optional[str] = None) -> Parsed:
    header = None
    devices: list[dict] = []
    rows: list[Row] = []
    coll = collective
    nccl_version = tests_version = None
    layout = None  # (columns before the figures, figures per side) from the column header
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"{path}:{number}"
        if not line:
            continue
        if line.startswith("#"):
            if m := _COLLECTIVE.match(line):
                coll = coll or _collective_from_name(m.group(1))
            elif m := _HEADER.match(line):
                header = (int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5) or 1))
            elif m := _RANK.match(line):
                devices.append({"index": int(m.group(1)), "host": m.group(4), "device": int(m.group(5)),
                                "pci": m.group(6), "name": m.group(7).strip()})
            elif m := _COLUMNS.match(line):
                base = 2 + bool(m.group(1)) + bool(m.group(2)) + 1
                layout = (base, 8 if "i_min" in line else 4)
            elif m := _VERSION.match(line):
                tests_version, nccl_version = m.group(1), nccl_version_text(int(m.group(2)))
            continue
        cols = line.split()
        if not cols[0].isdigit():
            continue  # warnings and launcher noise between table rows
        if header is None:
            raise NcclTestsFormatError(f"{where}: a result row before the '# nThread ... iters:' header; is this nccl-tests output?")
        # The column header says the layout: size count type [redop] [root], then per side (out-of-place,
        # in-place) time algbw busbw #wrong, plus i_min i_max i_p99 i_cv% with per-iteration timing.
        # Without a header line, assume the current layout (with redop and root).
        base, width = layout or (5, 8 if len(cols) == 21 else 4)
        if len(cols) != base + 2 * width:
            raise NcclTestsFormatError(f"{where}: {len(cols)} columns, the table header says {base + 2 * width} "
                               "(size count type redop root, then time algbw busbw #wrong out-of-place and in-place)")
        per_iter = width == 8
        try:
            size, count = int(cols[0]), int(cols[1])
        except ValueError:
            raise NcclTestsFormatError(f"{where}: size and count must be integers") from None
        if cols[2] not in DTYPES:
            raise NcclTestsFormatError(f"{where}: unknown data type {cols[2]!r}")
        out_of_place = _side(cols[base:base + width], where, per_iter)
        in_place = _side(cols[base + width:base + 2 * width], where, per_iter)
        root = int(cols[base - 1]) if base == 5 and re.fullmatch(r"-?\d+", cols[base - 1]) else -1
        redop = cols[3] if base >= 4 else ""
        rows.append(Row(number, where, size, count, cols[2], redop, root, in_place, out_of_place))
    if header is None:
        raise NcclTestsFormatError(f"{path}:1: no '# nThread ... iters:' header line; is this nccl-tests output?")
    if not rows:
        raise NcclTestsFormatError(f"{path}: no result rows")
    if coll is None:
        coll = _collective_from_name(path)
    if coll is None:
        raise NcclTestsFormatError(f"{path}: cannot tell which collective this is (no 'Collective test starting' line); "
                           "pass --collective")
    nthreads, ngpus, warmup, iters, agg = header
    return Parsed(coll, rows, iters, warmup, agg, devices, nccl_version, tests_version, fmt="text")


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


def parse_json(text: str, path: str, collective: Optional[str] = None) -> Parsed:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NcclTestsFormatError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise NcclTestsFormatError(f"{path}:1: the JSON output of nccl-tests is an object")
    version = _get(data, ["version"], path)
    if version not in (1, 2):
        raise NcclTestsFormatError(f"{path}: field version: {version!r} is not a known nccl-tests JSON version (1, 2)")
    config = _get(data, ["config"], path)
    iters = int(_num(_get(data, ["config", "iterations"], path), f"{path}: field config.iterations"))
    results = _get(data, ["results"], path)
    if not isinstance(results, list) or not results:
        raise NcclTestsFormatError(f"{path}: field results: no result entries")
    coll = collective
    if coll is None:
        for arg in data.get("args", [])[:1]:
            coll = _collective_from_name(str(arg))
    if coll is None:
        coll = _collective_from_name(path)
    if coll is None:
        raise NcclTestsFormatError(f"{path}: cannot tell which collective this is (args[0] names no nccl-tests binary); "
                           "pass --collective")
    rows = []
    for i, entry in enumerate(results):
        where = f"{path}: results[{i}]"
        sides = {}
        for key in ("in_place", "out_of_place"):
            side = entry.get(key) if isinstance(entry, dict) else None
            if side is None:
                sides[key] = None
                continue
            t = side.get("time", side.get("cpu_time"))
            wrong = side.get("nwrong")
            sides[key] = {"time_us": _num(t, f"{where}.{key}.time"), "algbw_gbps": _num(side.get("alg_bw"), f"{where}.{key}.alg_bw"),
                          "busbw_gbps": _num(side.get("bus_bw"), f"{where}.{key}.bus_bw"),
                          "wrong": None if wrong is None else int(_num(wrong, f"{where}.{key}.nwrong"))}
            per_iter = entry.get(f"{key}_per_iter")
            if isinstance(per_iter, dict) and per_iter.get("times_us"):
                sides[key]["times_us"] = [_num(x, f"{where}.{key}_per_iter.times_us") for x in per_iter["times_us"]]
        dtype = _get(data, ["results", i, "type"], path)
        if dtype not in DTYPES:
            raise NcclTestsFormatError(f"{where}.type: unknown data type {dtype!r}")
        root_text = str(entry.get("root", "-1")).strip()
        rows.append(Row(0, where, int(_num(_get(data, ["results", i, "size"], path), f"{where}.size")),
                        int(_num(_get(data, ["results", i, "count"], path), f"{where}.count")), dtype,
                        str(entry.get("redop", "")), int(root_text) if re.fullmatch(r"-?\d+", root_text) else -1,
                        sides["in_place"], sides["out_of_place"], entry.get("actual_iterations")))
    devices = [{"index": d.get("rank"), "host": d.get("hostname"), "device": d.get("device"),
                "pci": d.get("device_hex"), "name": d.get("device_info")} for d in config.get("devices", [])]
    code = data.get("nccl_version")
    return Parsed(coll, rows, iters, int(config.get("warmup_iters", 0)), int(config.get("aggregated_iterations", 1)),
                  devices, nccl_version_text(code) if isinstance(code, int) else None, None,
                  str(data.get("start_time", "unknown")), fmt="json")


def parse_file(path: Path, collective: Optional[str] = None) -> Parsed:
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise NcclTestsFormatError(f"{path}: cannot read: {exc}") from None
    if text.lstrip().startswith("{"):
        return parse_json(text, str(path), collective)
    return parse_text(text, str(path), collective)


def to_records(parsed: Parsed, run_id: str, source_name: str) -> list[Record]:
    world = len(parsed.devices) or 1
    records = []
    for row in parsed.rows:
        # critpath's allreduce is in place; other collectives: in place too when present.
        side = row.in_place or row.out_of_place
        placement = "in_place" if row.in_place else "out_of_place"
        dtype = DTYPES[row.dtype]
        iters = row.iters or parsed.iters
        if side.get("times_us"):
            samples = tuple(max(1, round(t * 1e3)) for t in side["times_us"])
            kind = "per_iteration"
        else:
            samples = (max(1, round(side["time_us"] * 1e3)),)
            kind = "mean_only"
        if parsed.collective == "all_reduce":
            family, params = "allreduce", {"algo": "native", "backend": "nccl", "dtype": dtype,
                                           "size_bytes": row.size_bytes, "world": world}
        else:
            family = f"nccltests_{parsed.collective}"
            params = {"dtype": dtype, "size_bytes": row.size_bytes, "world": world, "redop": row.redop or "none",
                      "root": row.root}
        case_id = family + "/" + ",".join(f"{k}={v}" for k, v in sorted(params.items()))
        other = row.out_of_place if placement == "in_place" else None
        check = None if side["wrong"] is None else CheckResult(side["wrong"], row.count)
        records.append(Record(
            run_id=run_id, case_id=case_id, family=family, family_version=1, params=params, status="ok",
            backend="nccl", world=world, started_at=parsed.started_at, wall_s=0.0, samples_ns=samples,
            plan={"warmup": parsed.warmup, "iters": iters}, timer="nccl-tests (CUDA events)",
            metrics={"time_us": side["time_us"], "algbw_gbps": side["algbw_gbps"], "busbw_gbps": side["busbw_gbps"]},
            check=check, reduction="nccl-tests" + (": per iteration, max over ranks" if kind == "per_iteration" else
                                                  ": mean over iterations"),
            extra={"imported": {
                "source": "nccl-tests", "format": parsed.fmt, "file": source_name, "where": row.where.split(": ", 1)[-1]
                if parsed.fmt == "json" else f"line {row.line}", "samples": kind, "iters": iters,
                "agg_iters": parsed.agg_iters, "placement": placement, "collective": parsed.collective,
                "out_of_place": other, "nccl_tests_version": parsed.tests_version,
            }},
        ))
    return records


def fingerprint_of(parsed: Parsed, source: str) -> dict:
    hosts = sorted({d["host"] for d in parsed.devices if d.get("host")})
    per_node = {h: sum(1 for d in parsed.devices if d.get("host") == h) for h in hosts}
    return {
        "schema": "critpath.fingerprint/1", "imported_from": f"nccl-tests {parsed.fmt} output {source}",
        "host": ",".join(hosts) or None, "backend": "nccl", "world": len(parsed.devices) or None, "launch": "imported",
        "nccl_version": parsed.nccl_version,
        "layout": {"nodes": len(hosts), "ranks_per_node": max(per_node.values())} if hosts else {},
        "gpus": {"present": bool(parsed.devices), "devices": [
            {"index": d["index"], "name": d["name"], "host": d["host"], "pci": d["pci"]} for d in parsed.devices],
            **({} if parsed.devices else {"reason": "the nccl-tests output lists no devices"})},
    }


def import_file(path: Path, out: Path, collective: Optional[str] = None, run_id: Optional[str] = None) -> list[Record]:
    from harness.store import RunDir

    path = Path(path)
    parsed = parse_file(path, collective)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:8]
    run_id = run_id or f"nccl-tests-{path.stem}-{digest}"
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise NcclTestsFormatError(f"{out} already holds a run; choose another --out")
    records = to_records(parsed, run_id, path.name)
    run_dir = RunDir(out, run_id)
    run_dir.write_fingerprint(fingerprint_of(parsed, path.name))
    run_dir.write_meta({"schema": "critpath.run/1", "run_id": run_id, "state": "imported", "source": str(path),
                        "format": parsed.fmt, "collective": parsed.collective, "started_at": parsed.started_at,
                        "cases_total": len(records), "cases_ok": sum(r.ok for r in records),
                        "cases_failed": sum(not r.ok for r in records)})
    for record in records:
        run_dir.append(record)
    return records


def register(sub) -> None:
    p = sub.add_parser("import-nccl-tests", help="import nccl-tests output (text table or -J JSON) as a run directory")
    p.add_argument("file", type=Path)
    p.add_argument("--out", type=Path, required=True, help="run directory to write")
    p.add_argument("--collective", help="e.g. all_reduce, when the output does not say (older nccl-tests)")
    p.add_argument("--run-id", help="default: nccl-tests-<file stem>-<content hash>")
    p.set_defaults(func=cmd_import)


def cmd_import(args) -> int:
    import sys

    try:
        records = import_file(args.file, args.out, args.collective, args.run_id)
    except NcclTestsFormatError as exc:
        print(f"critpath import-nccl-tests: error: {exc}", file=sys.stderr)
        return 2
    wrong = [r for r in records if not r.ok]
    kind = records[0].extra["imported"]["samples"]
    print(f"imported {len(records)} records ({records[0].family}, {kind.replace('_', ' ')}) -> {args.out}")
    if wrong:
        print(f"{len(wrong)} size(s) reported wrong results (#wrong > 0)", file=sys.stderr)
    return 1 if wrong else 0
