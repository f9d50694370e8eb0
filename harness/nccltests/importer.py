"""Import nccl-tests output (the text table, or the ``-J`` JSON file) as critpath records.

A cluster's existing nccl-tests runs then feed the same reports, acceptance and gate.

What the import can and cannot say:
- nccl-tests prints, per size, the mean time over its timed iterations (``-n``) and algbw/busbw
  from that mean; no per-iteration times. Such a record holds ONE sample, the mean, and is
  flagged ``extra.imported.samples = "mean_only"`` with ``iters``: reports show "1 mean of N",
  ``critpath show`` "mean only", and the claims check and acceptance refuse its percentiles.
- With per-iteration timing (JSON ``*_per_iter.times_us``, max over ranks per iteration), the
  record carries those real samples and is flagged ``"per_iteration"``.
- critpath's allreduce is in place, so an all_reduce_perf sum row becomes an ``allreduce`` record
  from the in-place columns (``algo=native, backend=nccl``). Both sides' figures and #wrong are
  kept in ``extra.imported.in_place`` / ``out_of_place``; the record's check counts both sides.
  Other collectives (and other reductions) become family ``nccltests_<name>``.
- Which collective wrote the output is read from the output itself (harness.nccltests.evidence),
  and only then from the file name; ``--collective`` is checked against the output. Ambiguous or
  contradicting evidence is refused (exit 2) with the evidence listed.
- The trailer (``Out of bounds values``, ``Avg bus bandwidth``) is kept and checked against the
  rows (harness.nccltests.trailer); a disagreement, or nccl-tests' own failed bandwidth check (-J),
  is reported, the command exits 1, and run.json says ``contradicted`` with it: every reader then
  takes the run as not whole (harness.core.store.incompleteness), so its rows decide no acceptance
  and no diagnosis. NCCL's last error message (-J ``errors``) is kept in the trailer and shown.
- A log that prints a case twice (cycles, ``-N``) is refused, never written as a run that holds a
  case twice, which no reader takes.
- Every value is checked before anything is written (harness.nccltests.values): a count that is
  not a whole number, a figure that is not finite, a string where a number belongs is refused with
  file, line (or JSON record) and field, exit 2. The input is bounded (harness.nccltests.limits).
- The directory is written in the order that lets a reader tell a whole import from a cut one:
  run.json saying ``importing``, the fingerprint, the records in batches (one fsync each), and last,
  atomically, run.json saying ``imported`` with the count of records. A killed import reads as
  incomplete (harness.core.store.incompleteness), from its records; one stopped by a signal (Ctrl-C,
  SIGTERM, SIGHUP) says ``interrupted``, as a stopped ``critpath run`` does.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator, Optional

from harness.core import taken
from harness.core.claim import claim_dir
from harness.core.family import CheckResult
from harness.core.fingerprintfile import IMPORTED, SCHEMA, gpu_key
from harness.core.imported import (
    IMPORTED_BACKEND,
    IMPORTED_TIMER,
    MEAN_ONLY,
    PER_ITERATION,
    case_id_of,
    check_of,
    family_params,
    figures_of,
    mean_samples_ns,
    samples_ns,
)
from harness.core.options import path_option, print_error, run_id_option
from harness.core.records import UNKNOWN_START, Record, is_started_at
from harness.core.runid import MAX_RUN_ID_CHARS, run_id_fault, run_id_part
from harness.core.runmeta import INTERRUPTED, RUN_SCHEMA
from harness.core.store import PLANNED, RUN_META, RunDir, planned_digest, read_meta
from harness.nccltests.consistency import check_figures
from harness.nccltests.evidence import COLLECTIVES, FOUND, Ambiguous, detect, ranks_text
from harness.nccltests.limits import RECORDS_PER_BATCH
from harness.nccltests.parse import (
    DTYPES,
    NcclTestsFormatError,
    Parsed,
    nccl_version_text,
)
from harness.nccltests.source import read_output
from harness.nccltests.sweep import check_sweep
from harness.core.imported import refusals
from harness.nccltests.trailer import trailer_checks
from harness.nccltests.validation import check_validation

__all__ = ["NcclTestsFormatError", "import_file", "nccl_version_text", "parse_file", "to_records"]


def parse_file(path: Path, collective: Optional[str] = None) -> Parsed:
    """The output at ``path``, its collective detected (or ``collective`` checked against it)."""
    return _parse_file(path, collective)[0]


def _parse_file(path: Path, collective: Optional[str]) -> tuple[Parsed, str]:
    path = Path(path)
    parsed, digest = read_output(path)
    try:
        parsed.detection = detect(parsed.observed(), str(path), collective)
    except Ambiguous as exc:
        raise NcclTestsFormatError(str(exc)) from None
    parsed.collective = parsed.detection.collective
    # only now: what algbw counts of the size, and the bus factor, are the collective's
    parsed.agreement = check_figures(parsed)
    # the sizes a row prints are the collective's share of its stepped size too
    if not check_sweep(parsed):
        _check_cases(parsed)  # no sweep to tell a second cycle by: a case printed twice is one
    check_validation(parsed)  # which sides print N/A depends on the collective as well
    return parsed, digest


def _check_cases(parsed: Parsed) -> None:
    """Each row a case of its own, where no sweep is known to tell a second cycle by
    (harness.nccltests.sweep). A run holds each case once, and every reader refuses one that holds
    a case twice (harness.core.store), so a log that prints a case again is refused here, by its
    row, not written as a run nothing can read. Which of two rows the case is would be a guess."""
    first_of: dict[str, object] = {}
    for row in parsed.rows:
        case_id = case_id_of(*_family(parsed, row))
        if case_id in first_of:
            raise NcclTestsFormatError(
                f"{row.where}: the case of {first_of[case_id].where} again ({case_id}): nccl-tests prints a "
                "case twice only when it runs more than one cycle (-N), and a run holds each case once. "
                "Import a log of one cycle (nccl-tests -N 1), or each cycle from a file of its own")
        first_of[case_id] = row


def checked_lines(parsed: Parsed) -> list[str]:
    """What the import checked of each side, and what it read past, as the command shows it."""
    agreement, (lines, first) = parsed.agreement, parsed.read_past
    said = []
    if agreement.sides_checked:
        said.append(f"time, algbw and busbw agree on {agreement.sides_checked} sides ({agreement.way}, "
                    "each figure within its printed digits)")
    if agreement.not_checked:
        said.append(f"time not compared with algbw{' on the other sides' if agreement.sides_checked else ''}: "
                    f"{agreement.not_checked}")
    if lines:
        said.append(f"read past {lines} line{'' if lines == 1 else 's'} in the table that hold no row (a launcher's "
                    f"messages), the first on line {first}")
    return said


def _check(row) -> Optional[CheckResult]:
    made = check_of(row.count, row.in_place, row.out_of_place)
    return CheckResult(*made) if made else None


def _family(parsed: Parsed, row) -> tuple[str, dict]:
    return family_params(parsed.collective, row.redop, row.root, DTYPES[row.dtype], row.size_bytes, parsed.ranks)


def to_records(parsed: Parsed, run_id: str, source_name: str) -> list[Record]:
    return list(iter_records(parsed, run_id, source_name, trailer_checks(parsed)))


def iter_records(parsed: Parsed, run_id: str, source_name: str, trailer: dict) -> Iterator[Record]:
    """One record per row, in the order of the rows."""
    detection = parsed.detection
    evidence = [e.line() for e in detection.evidence]
    for row in parsed.rows:
        # critpath's allreduce is in place; other collectives: in place too when present.
        side = row.in_place or row.out_of_place
        placement = "in_place" if row.in_place else "out_of_place"
        iters = row.iters or parsed.iters
        if side.get("times_us"):
            samples, kind = samples_ns(side["times_us"]), PER_ITERATION
        else:
            samples, kind = mean_samples_ns(side["time_us"]), MEAN_ONLY
        family, params = _family(parsed, row)
        case_id = case_id_of(family, params)
        yield Record(
            run_id=run_id, case_id=case_id, family=family, family_version=1, params=params, status="ok",
            backend=IMPORTED_BACKEND, world=parsed.ranks, started_at=parsed.started_at if is_started_at(parsed.started_at) else UNKNOWN_START,
            wall_s=0.0, samples_ns=samples,
            plan={"warmup": parsed.warmup, "iters": iters}, timer=IMPORTED_TIMER,
            metrics=figures_of(side),
            check=_check(row), reduction="nccl-tests" + (": per iteration, max over ranks" if kind == PER_ITERATION
                                                         else ": mean over iterations"),
            extra={"imported": {
                "source": "nccl-tests", "format": parsed.fmt, "file": source_name,
                "where": row.where.split(": ", 1)[-1] if parsed.fmt == "json" else f"line {row.line}",
                "samples": kind, "iters": iters, "agg_iters": parsed.agg_iters, "placement": placement,
                "collective": parsed.collective, "redop": row.redop, "root": row.root,
                "count": row.count, "type": row.dtype,
                # both sides as printed; the record's own side without the samples it already holds
                **{name: ({k: v for k, v in s.items() if k != "times_us"} if name == placement and s else s)
                   for name, s in (("in_place", row.in_place), ("out_of_place", row.out_of_place))},
                "ranks": parsed.ranks, "ranks_from": parsed.ranks_from,
                "collective_from": detection.source, "evidence": evidence,
                "trailer": trailer, "nccl_tests_version": parsed.tests_version,
            }},
        )


def fingerprint_of(parsed: Parsed, source: str) -> dict:
    hosts = sorted({d["host"] for d in parsed.devices if d.get("host")})
    per_node = {h: sum(1 for d in parsed.devices if d.get("host") == h) for h in hosts}
    listed = ({} if parsed.fmt == "text" or len(parsed.devices) == parsed.ranks else
              {"listed": "one device per process (nccl-tests JSON lists the first GPU of each)"})
    return {
        "schema": SCHEMA, "imported_from": f"nccl-tests {parsed.fmt} output {source}",
        "host": ",".join(hosts) or None, "backend": "nccl", "world": parsed.ranks, "launch": IMPORTED,
        "nccl_version": parsed.nccl_version,
        "layout": {"nodes": len(hosts), "ranks_per_node": max(per_node.values())}
        if hosts and not listed else {},
        "gpus": {"present": bool(parsed.devices), **listed, "devices": gpus_of(parsed.devices),
                 **({} if parsed.devices else {"reason": "the nccl-tests output lists no devices"})},
    }


def gpus_of(ranks: list[dict]) -> list[dict]:
    """One fingerprint GPU per GPU the log names, with the ranks that ran on it: nccl-tests lets
    ranks share a GPU, and a count of ranks is no count of GPUs. ``index`` is the CUDA device
    ordinal the log gives (of the first rank on it: each process numbers the GPUs it sees)."""
    gpus: dict = {}
    for i, rank in enumerate(ranks):
        entry = {"index": rank["device"], "name": rank["name"], "host": rank["host"], "pci": rank["pci"], "ranks": []}
        # A rank whose log gives neither ordinal nor bus id is a GPU of its own, that no pin can count.
        key = gpu_key(entry) or ("rank", i)
        held = gpus.setdefault(key, entry)["ranks"]
        if rank["index"] is not None:  # -J's rank field is optional
            held.append(rank["index"])
    return list(gpus.values())


def _batches(records: Iterator[Record], size: int) -> Iterator[list[Record]]:
    batch: list[Record] = []
    for record in records:
        batch.append(record)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def import_file(path: Path, out: Path, collective: Optional[str] = None, run_id: Optional[str] = None) -> list[Record]:
    """Import the output at ``path`` into the run directory ``out``; the records written (the
    first, for what the whole import says, and the failed ones are what the command shows)."""
    return list(_import(path, out, collective, run_id))


# An import's default run ID: this prefix, its file's stem (as a run ID may hold it), and its content hash.
_DEFAULT_ID_PREFIX = "nccl-tests-"
_DEFAULT_ID_HASH_HEX = 8


def default_run_id(path: Path, digest: str) -> str:
    """``nccl-tests-<stem>-<hash>``: a stem a run ID cannot hold (a space, a newline, 200 characters)
    is made one (harness.core.runid.run_id_part), so every default is a run ID."""
    room = MAX_RUN_ID_CHARS - len(_DEFAULT_ID_PREFIX) - 1 - _DEFAULT_ID_HASH_HEX
    return f"{_DEFAULT_ID_PREFIX}{run_id_part(path.stem, room)}-{digest[:_DEFAULT_ID_HASH_HEX]}"


def _import(path: Path, out: Path, collective: Optional[str], run_id: Optional[str]) -> Iterator[Record]:
    path, out = Path(path), Path(out)
    parsed, digest = _parse_file(path, collective)
    run_id = default_run_id(path, digest) if run_id is None else run_id
    if why := run_id_fault(run_id):
        raise NcclTestsFormatError(f"--run-id: {why}")
    refused = taken.refusal(out, claim_dir(out, "import-nccl-tests").contents())
    if refused:
        raise NcclTestsFormatError(refused)
    trailer = trailer_checks(parsed)
    detection = parsed.detection
    meta = {"schema": RUN_SCHEMA, "run_id": run_id, "source": str(path), "source_sha256": digest,
            "format": parsed.fmt, "collective": parsed.collective, "collective_from": detection.source,
            "evidence": [e.line() for e in detection.evidence], "ranks": parsed.ranks, "trailer": trailer,
            "checked": checked_lines(parsed), "started_at": parsed.started_at}
    run_dir = RunDir(out, run_id)
    # First a run.json that claims nothing: a directory cut short from here on reads as incomplete.
    run_dir.write_meta({**meta, "state": "importing"})
    total = ok = 0
    case_ids: list[str] = []
    try:
        run_dir.write_fingerprint(fingerprint_of(parsed, path.name))
        for batch in _batches(iter_records(parsed, run_id, path.name, trailer), RECORDS_PER_BATCH):
            run_dir.append_many(batch)
            total += len(batch)
            ok += sum(r.ok for r in batch)
            case_ids.extend(r.case_id for r in batch)
            yield from batch
        # Last, and atomically: the claim that every record is on disk, which readers check against
        # them; and, when the trailer disagrees with the rows, that they are not the whole story of
        # the run. Inside the try: a signal after the last batch, before this rename, is an
        # interrupted import too, not one left saying ``importing``.
        refused = refusals(trailer)
        contradicted = {"contradicted": "; ".join(refused)} if refused else {}
        # The cases it wrote are what it planned: a record swapped for another case reads as not whole.
        run_dir.write_meta({**meta, "state": "imported", "cases_total": total, "cases_ok": ok,
                            "cases_failed": total - ok, PLANNED: planned_digest(case_ids), **contradicted})
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (harness.run.lifetime): said as a run says it
        _write_interrupted(run_dir, meta)
        raise


def _write_interrupted(run_dir: RunDir, meta: dict) -> None:
    """run.json saying ``interrupted``, as a stopped ``critpath run`` leaves it. Best effort: a disk
    that refuses it leaves ``importing``, which reads as incomplete too, and the interrupt goes on."""
    try:
        run_dir.write_meta({**meta, "state": INTERRUPTED})
    except OSError:
        pass


def register(sub) -> None:
    p = sub.add_parser("import-nccl-tests", help="import nccl-tests output (text table or -J JSON) as a run directory")
    p.add_argument("file", type=path_option)
    p.add_argument("--out", type=path_option, required=True, help="run directory to write")
    p.add_argument("--collective", choices=COLLECTIVES,
                   help="which test wrote the output, when the output itself cannot tell (checked against it)")
    p.add_argument("--run-id", type=run_id_option,
                   help="letters, digits, '.', '_', '-' (default: nccl-tests-<file stem>-<content hash>)")
    p.set_defaults(func=cmd_import)


def cmd_import(args) -> int:
    try:
        records = import_file(args.file, args.out, args.collective, args.run_id)
    except NcclTestsFormatError as exc:
        print_error("import-nccl-tests", exc)
        return 2
    imported = records[0].extra["imported"]
    kind = imported["samples"].replace("_", " ")
    print(f"imported {len(records)} records ({records[0].family}, {kind}, {ranks_text(imported['ranks'])}) -> {args.out}")
    print(f"collective {imported['collective']}, {FOUND[imported['collective_from']]}:")
    for line in imported["evidence"]:
        print(f"  - {line}")
    for line in [*read_meta(args.out / RUN_META).get("checked", []), *imported["trailer"]["lines"]]:
        print(line)
    wrong = [r for r in records if not r.ok]
    if wrong:
        print(f"{len(wrong)} size(s) reported wrong results (#wrong > 0)", file=sys.stderr)
    for problem in refusals(imported["trailer"]):
        print(f"critpath import-nccl-tests: {args.file}: {problem}", file=sys.stderr)
    return 1 if wrong or refusals(imported["trailer"]) else 0
