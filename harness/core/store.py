"""Run directories: ``fingerprint.json``, ``run.json`` and ``results.jsonl``.

Records are appended one whole line per ``write`` on an ``O_APPEND`` descriptor, then fsynced, so a
run killed with SIGKILL leaves a file that loads, short only of the case in flight. JSON documents
are replaced atomically (``harness.core.atomic``). A write that fails (full disk) is rolled back
to the last whole line and raised, so what was written before stays valid.
"""
from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import os
import re
import secrets
import socket
import stat
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Optional, Sequence

from harness.core import atomic, fingerprintfile, runheld, runmeta
from harness.core.inputfile import InputFileError, kind, open_regular, read_bounded
from harness.core.jsonfile import JsonFileError, JsonLimits, check_limits, loads_strict
from harness.core.measurement import measurement_key
from harness.core.escape import for_terminal
from harness.core.imported import problems_of
from harness.core.options import CannotRun, UsageError
from harness.core.records import UNKNOWN_START, ErrorInfo, Record, RecordError
from harness.core.runfiles import FINGERPRINT, RESULTS, RUN_FILES, RUN_META, run_files
from harness.core.runmeta import PLANNED, planned_digest
from harness.core.scale import MAX_RUN_CASES
from harness.core.verify import verify

# The largest line a record can be: 20,000 samples (the full profile's cap) take about 0.3 MB.
MAX_RECORD_BYTES = 64 << 20
# What one record line may hold once parsed. A record's fields, parameters, figures and its
# family's report hold a few hundred keys at world 8 (a report per rank): 100,000 leaves room for
# thousands of ranks, and parses in some 30 MB (4 million keys in 55 MB took 1.3 GB). Values: a
# record's samples (at most records.MAX_SAMPLES, a million) or an nccl-tests import's per-iteration
# times of both sides (harness.nccltests.limits); 60 MB of floats, 15 million, took 750 MB. Depth:
# records nest 6 levels (extra.rank_reports[0].figures...).
RECORD_LIMITS = JsonLimits(keys=100_000, values=4_000_000, depth=32)
# A results file holds a line per record and critpath writes no other; a file of more lines than
# twice the records a run holds is not a run's, whatever its lines are (20 MB of blank lines took
# 26 s to be read as none).
MAX_RESULTS_LINES = 2 * MAX_RUN_CASES
# run.json's states that say the run is over (whole, if its records are its cases), and the states
# of an import, whose records are all imported ones
ENDED = ("finished", "imported")
IMPORT_STATES = ("importing", "imported")


class ResultsFileError(CannotRun):
    """A results file that cannot be read; the message names the file and line."""


# A run ID names a directory (reports/<run-id>) and is printed: its host part keeps only letters,
# digits and "-" (the first label of a host name: no dot), so a host name holding a slash, a
# newline or an escape makes no nested directory nor a terminal sequence; and at most
# HOST_TOKEN_MAX of them.
NOT_HOST_TOKEN = re.compile(r"[^A-Za-z0-9-]")
HOST_TOKEN_MAX = 32
HOST_DIGEST_HEX = 6  # of the raw name, when the token is not it: two hosts so changed stay apart


def host_token(host: str) -> str:
    """The host part of a run ID: ``host``'s first label as it is when it is a safe token (above);
    else with every other character as "-", cut, and a short digest of the raw name after it."""
    label = host.split(".")[0]
    token = NOT_HOST_TOKEN.sub("-", label[:HOST_TOKEN_MAX])
    if token == label:
        return token or "host"
    digest = hashlib.sha256(host.encode("utf-8", "surrogateescape")).hexdigest()[:HOST_DIGEST_HEX]
    return f"{token[:HOST_TOKEN_MAX - HOST_DIGEST_HEX - 1]}-{digest}"


def new_run_id(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{host_token(socket.gethostname())}-{secrets.token_hex(2)}"


def _open_results(path: Path) -> int:
    """``path`` opened to append records: never through a symbolic link (one planted in a run's
    directory would put the records outside it, wherever it points), never a FIFO or device."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"{path} is a symbolic link, not a results file critpath made; "
                             "records are never written through one: remove it") from None
        raise OSError(exc.errno, f"could not append to {path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UsageError(f"{path} is {kind(mode)}, not a results file critpath made; remove it")
    return fd


def append_record(path: Path, record: Record) -> None:
    append_records(path, [record])


# The kind of error of a record written as failed because its line is more than a reader loads.
RECORD_TOO_LARGE = "RecordTooLarge"


def _line_of(record: Record) -> str:
    """``record`` as a results line that its readers load: held to MAX_RECORD_BYTES and
    RECORD_LIMITS, the limits ``iter_records`` reads by. A record past them would make its run
    unreadable; it is written as a failed record naming the limit (samples, metrics and extra
    left out), and the run goes on."""
    text = record.to_json()
    raw = text.encode()
    if len(raw) > MAX_RECORD_BYTES:
        why = f"its line is {len(raw)} bytes; a record is at most {MAX_RECORD_BYTES} bytes (MAX_RECORD_BYTES)"
    else:
        try:
            check_limits(raw, f"the record for {record.case_id}", RECORD_LIMITS)
            return text
        except JsonFileError as exc:
            why = f"{exc.why} (RECORD_LIMITS)"
    error = ErrorInfo(RECORD_TOO_LARGE, f"the record is more than a reader loads, so it was not kept: {why}")
    return replace(record, status="failed", samples_ns=(), metrics={}, check=None, extra={}, error=error).to_json()


def append_records(path: Path, records: Sequence[Record]) -> None:
    """``records`` appended as whole lines with one write and one fsync: all of them, or (a full
    disk) none of them."""
    if not records:
        return
    record = records[-1]
    line = "".join(_line_of(r) + "\n" for r in records).encode()
    fd = _open_results(Path(path))
    try:
        before = os.fstat(fd).st_size
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(f"short write ({written} of {len(line)} bytes)")
            os.fsync(fd)
        except OSError as exc:
            # Leave no half line behind: the file must stay loadable.
            os.ftruncate(fd, before)
            what = f"the record for {record.case_id}" if len(records) == 1 else f"{len(records)} records"
            message = f"could not append {what} to {path}: {exc.strerror or exc}"
            raise (OSError(exc.errno, message) if exc.errno else OSError(message)) from exc
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Skipped:
    line: int
    reason: str


def _lines(path: Path) -> Iterator[tuple[int, bytes, str]]:
    """(line number, line, problem) of the results file ``path``, read a line at a time so that no
    more than one record's worth is ever held; problem is '' or why the line cannot be a record."""
    try:
        f = open_regular(path, "results file")
    except (FileNotFoundError, NotADirectoryError):
        if (path.parent / FINGERPRINT).is_file() and not (path.parent / RUN_META).exists():
            # a run writes its fingerprint, then run.json, then its records: killed in between
            raise ResultsFileError(f"{path}: no such results file: {path.parent} holds only {FINGERPRINT}, a run "
                                   f"killed before it wrote {RUN_META}") from None
        raise ResultsFileError(f"{path}: no such results file") from None
    except InputFileError as exc:
        raise ResultsFileError(str(exc)) from None
    with f:
        number = 0
        while True:
            blob = f.readline(MAX_RECORD_BYTES + 2)  # a whole record and its newline, and one byte more
            if not blob:
                return
            number += 1
            if number > MAX_RESULTS_LINES:
                raise ResultsFileError(f"{path}:{number}: more than {MAX_RESULTS_LINES} lines; a results file holds "
                                       f"a record a line, and a run at most {MAX_RUN_CASES} records")
            if len(blob) - blob.endswith(b"\n") > MAX_RECORD_BYTES:
                yield number, b"", (f"a line of more than {MAX_RECORD_BYTES} bytes; "
                                    f"a record is at most {MAX_RECORD_BYTES} bytes")
                while blob and not blob.endswith(b"\n"):  # the rest of the long line, a chunk at a time
                    blob = f.readline(1 << 20)
            elif not blob.endswith(b"\n"):
                yield number, blob, "truncated record (no newline at the end of the file)"
            else:
                yield number, blob, ""


# How far past its run's finished_at a record may start: run.json's times are whole seconds
# (RunJournal writes utc_now_iso("seconds"), which truncates), a record's are milliseconds.
RUN_TIME_ROUNDING = _dt.timedelta(seconds=1)


def _run_window(path: Path) -> tuple[Optional[_dt.datetime], Optional[_dt.datetime]]:
    """The run's (start, end) from the run.json beside the results file ``path`` (None for each it
    does not give: a bare file, a run still going, an import whose log printed no zone)."""
    run_dir = run_dir_of(path)
    if run_dir is None:
        return None, None
    return runmeta.instants(read_meta(run_dir / RUN_META))


def _check_within_run(record: Record, window: tuple, where: str) -> None:
    """A record starts within its run: after run.json's started_at (written before the first case)
    and by its finished_at (written after the last)."""
    started, finished = window
    if record.started_at == UNKNOWN_START or (started is None and finished is None):
        return
    when = _dt.datetime.fromisoformat(record.started_at)
    if started is not None and when < started:
        raise RecordError(f"field started_at: {record.started_at} is before its run started ({RUN_META} "
                          f"started_at {started.isoformat()})", where)
    if finished is not None and when - finished > RUN_TIME_ROUNDING:  # a difference: no date to overflow
        raise RecordError(f"field started_at: {record.started_at} is after its run finished ({RUN_META} "
                          f"finished_at {finished.isoformat()})", where)


def iter_records(path: Path, skip_invalid: bool = False, skipped: list | None = None) -> Iterator[Record]:
    """Yield records from ``path``. Any invalid line raises ``ResultsFileError`` naming file and
    line, unless ``skip_invalid``: then it is appended to ``skipped`` and reading goes on. A record
    of a run directory is held to its run.json's start and end (``_check_within_run``)."""
    path = Path(path)
    window = _run_window(path)
    records = 0
    for number, blob, problem in _lines(path):
        where = f"{path}:{number}"
        if not problem and not blob.strip():
            continue
        records += 1  # or a line that cannot be one, which counts as well: skipped, it is still there
        if records > MAX_RUN_CASES:
            raise ResultsFileError(f"{where}: more than {MAX_RUN_CASES} records; a run holds at most {MAX_RUN_CASES}")
        try:
            if problem:
                raise RecordError(problem, where)
            try:
                data = loads_strict(blob, where, RECORD_LIMITS)
            except JsonFileError as exc:
                raise RecordError(exc.why, where) from None
            if not isinstance(data, dict):
                raise RecordError("a record must be a JSON object", where)
            record = verify(Record.from_dict(data, where), where)
            _check_within_run(record, window, where)
            yield record
        except RecordError as exc:
            if not skip_invalid:
                raise ResultsFileError(str(exc)) from None
            if skipped is not None:
                skipped.append(Skipped(number, str(exc)))


# run.json and fingerprint.json are a few kB; a node's facts and many GPUs' fingerprints stay far below.
MAX_RUN_JSON_BYTES = 16 << 20


def read_json(path: Path) -> dict:
    """A run's JSON document (run.json, fingerprint.json): {} when absent, an error naming the file
    when it is not a UTF-8 JSON object."""
    path = Path(path)
    try:
        raw = read_bounded(path, "run's JSON document", MAX_RUN_JSON_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except InputFileError as exc:
        raise ResultsFileError(str(exc)) from None
    try:
        data = loads_strict(raw, str(path))
    except JsonFileError as exc:
        raise ResultsFileError(str(exc)) from None
    if not isinstance(data, dict):
        raise ResultsFileError(f"{path}:1: expected a JSON object, got {type(data).__name__}")
    return data


def _read_checked(path: Path, check, error: type[ValueError]) -> dict:
    """``read_json`` of ``path``, whose fields ``check`` raises ``error`` for, naming the field."""
    data = read_json(path)
    try:
        check(data)
    except error as exc:
        raise ResultsFileError(f"{path}: {exc}") from None
    return data


def read_fingerprint(path: Path) -> dict:
    """A run's fingerprint.json: {} when absent; ResultsFileError naming the file and field when a
    field critpath reads is of the wrong type (harness.core.fingerprintfile). Every reader of a
    run's fingerprint reads it through here."""
    return _read_checked(path, fingerprintfile.check, fingerprintfile.FingerprintError)


def read_meta(path: Path) -> dict:
    """A run's run.json: {} when absent; ResultsFileError naming the file and field when a field
    critpath reads of the run itself is not one it can (harness.core.runmeta). Every reader of a
    run's run.json reads it through here."""
    return _read_checked(path, runmeta.check, runmeta.RunMetaError)


def run_dir_of(path: Path) -> Optional[Path]:
    """The run directory ``path`` is, or whose results file it is; None for a results file of
    another name than results.jsonl, a bare file. A results.jsonl is its directory's, judged whole
    or not exactly as the directory is, with or without a run.json beside it: the name is the one a
    run writes, and a copy of a killed run's records is no more whole than the run. A symlink is
    judged where it leads: the run.json beside the real file is the one that speaks for it."""
    path = Path(path)
    if path.is_dir():
        return path
    real = Path(os.path.realpath(path))
    if real.name == RESULTS:
        return real.parent
    return None


def _is_import(record) -> bool:
    extra = getattr(record, "extra", None)
    return isinstance(extra, Mapping) and "imported" in extra


def of_runs(records: Sequence, where: str = "one results file") -> str:
    """"mixed: records of 2 runs ..." when ``records`` are not all of one run, "" when they are. One
    results file is one run: records of another (two runs written into one directory at once, files
    joined by hand) make it none of them."""
    run_ids = list(dict.fromkeys(getattr(r, "run_id", None) for r in records))
    if len(run_ids) > 1:
        return f"mixed: records of {len(run_ids)} runs in {where} ({', '.join(map(str, run_ids[:3]))})"
    return ""


def recorded_twice(records: Sequence) -> str:
    """"not whole: a case recorded more than once ..." when one is, "" when none is."""
    times = Counter(getattr(r, "case_id", None) for r in records)
    twice = [f"{case_id} ({n} times)" for case_id, n in times.items() if n > 1]
    if twice:
        return f"not whole: a case recorded more than once: {', '.join(twice[:3])}{' ...' if len(twice) > 3 else ''}"
    return ""


def _not_these_cases(meta: dict, records: Sequence) -> str:
    """Why the records are not the cases run.json says the run holds, each once; "" when they are
    (or when they are only fewer: how far the run got is ``incompleteness``'s to say)."""
    state, total = meta.get("state"), meta.get("cases_total")
    counted = isinstance(total, int) and not isinstance(total, bool) and total >= 1
    if state in ENDED and not counted:
        return f"not whole: {RUN_META}: field cases_total: {total!r} is not a count of planned cases"
    imports = sum(_is_import(r) for r in records)
    # An import's states, or the interrupted one with an import's fields: an import stopped by a signal.
    an_import = state in IMPORT_STATES or (state == runmeta.INTERRUPTED and runmeta.is_import(meta))
    if an_import and imports < len(records):
        return f"not whole: {RUN_META} says {state}, and {len(records) - imports} of its records were not imported"
    if not an_import and imports:
        return f"not whole: {RUN_META} says {state}, a critpath run, and {imports} of its records are imports"
    twice = recorded_twice(records)
    if twice:
        return twice
    if counted and len(records) > total:
        return f"not whole: {len(records)} records where {RUN_META} planned {total} cases"
    planned = meta.get(PLANNED)
    # A run of the previous release says how many cases it planned, not which: its count decides. So
    # does a newer one whose digest an edit deleted (docs/reports.md says so): a known gap, kept for them.
    if counted and len(records) == total and planned is not None and planned != planned_digest(
            r.case_id for r in records):
        return (f"not whole: its {len(records)} records are not the {total} cases {RUN_META} planned "
                f"(field {PLANNED} differs from their IDs')")
    return ""


# run.json's counts of a run's outcomes, each with what a record must be to count in it. A run.json
# of an older release may lack them; where one is, it is held to the records.
OUTCOME_COUNTS = (("cases_ok", "ok", lambda r: r.ok), ("cases_failed", "not ok", lambda r: not r.ok))


def _counts_contradiction(meta: dict, records: Sequence) -> str:
    """Why run.json's counts of outcomes are not its records' ("contradicted: ..."), "" when they are."""
    wrong = []
    for name, what, counts in OUTCOME_COUNTS:
        said = meta.get(name)
        if said is None:
            continue
        held = sum(1 for r in records if counts(r))
        if not isinstance(said, int) or isinstance(said, bool) or said != held:
            wrong.append(f"field {name}: {said!r}, and {held} of its {len(records)} records are {what}")
    return f"contradicted: {RUN_META}: {'; '.join(wrong)}" if wrong else ""


def incompleteness(meta: dict, records: Sequence, directory: bool = True, fingerprint: Optional[Mapping] = None) -> str:
    """Why a run is not whole ("incomplete: 37 of 87 cases, run.json says running", "mixed: records
    of 2 runs ...", "not whole: a case recorded more than once ..."), read from its records against
    its run.json; "" when run.json says it finished (or was imported) and its records are exactly the
    cases it planned, each once, all of its run, as many ok and failed as it says. A run directory
    without a run.json is not whole:
    ``critpath run`` and an import write it, and write it last; nor is one without its
    fingerprint.json, which both write before the first record, and without which nothing says
    where the run ran, or with one lacking a field every fingerprint holds (``fingerprintfile.
    REQUIRED``; ``fingerprint`` None: the caller judges none). A bare results file (``directory``
    False: not named results.jsonl) has nothing beside it to say how far its run got, and is taken
    as it is unless it holds records of two runs or a case twice."""
    mixed = of_runs(records)
    if mixed:
        return mixed
    run_ids = [getattr(records[0], "run_id", None)] if records else []
    if not directory:  # a bare file: nothing beside it to say how far it got, but one run, each case once
        return recorded_twice(records)
    if not meta:
        return f"incomplete: {len(records)} cases and no run.json, which a whole run writes last"
    if run_ids and meta.get("run_id") not in (None, run_ids[0]):  # None: absent (null is refused on read)
        return f"mixed: its records are of run {run_ids[0]}, its {RUN_META} of run {meta.get('run_id')}"
    # An import whose trailer disagrees with its rows: they are not the whole run. Its records say
    # so as its run.json does (runheld holds the one to the other), so neither alone makes it whole.
    contradicted = meta.get("contradicted") or problems_of(
        [r.extra["imported"] for r in records if _is_import(r)])
    if contradicted:
        return f"contradicted: {contradicted}"
    state, total = meta.get("state"), meta.get("cases_total")
    wrong = _not_these_cases(meta, records)
    if wrong:
        return wrong
    if state in ENDED and len(records) == total:
        lacks = fingerprintfile.lacking(fingerprint) if fingerprint is not None else ()
        if lacks and not fingerprint:  # all it claims holds, and nothing says where it ran
            return f"incomplete: {len(records)} cases and no {FINGERPRINT}, which a run writes before its first case"
        if lacks:  # {"host": "h"} says no more of where it ran than none
            return (f"incomplete: {len(records)} cases and a {FINGERPRINT} without field {', '.join(lacks)}, "
                    f"which every run's holds")
        return _counts_contradiction(meta, records)
    of = f" of {total}" if isinstance(total, int) and not isinstance(total, bool) else ""
    return f"incomplete: {len(records)}{of} cases, run.json says {state or 'nothing'}"


def run_documents(path: Path) -> tuple[dict, dict]:
    """(run.json, fingerprint.json) of the run ``path`` is, or whose results file it is ({} for a
    document it lacks, and both for a bare results file: ``run_dir_of``)."""
    run_dir = run_dir_of(path)
    if run_dir is None:
        return {}, {}
    return read_meta(run_dir / RUN_META), read_fingerprint(run_dir / FINGERPRINT)


def run_incompleteness(path: Path, records: Sequence) -> str:
    """``incompleteness`` of the run ``path`` is, or whose results file it is (of its records alone
    for a bare results file: ``run_dir_of``)."""
    return run_of(path, records, *run_documents(path)).incomplete


def load_records(run_dir: Path, skip_invalid: bool = False, skipped: list | None = None) -> list[Record]:
    run_dir = Path(run_dir)
    path = run_dir / RESULTS if run_dir.is_dir() else run_dir
    if run_dir.is_dir() and not path.exists() and (run_dir / RUN_META).exists():
        return []  # a run killed before its first record: empty, and run.json says how far it got
    return list(iter_records(path, skip_invalid, skipped))


@dataclass(frozen=True)
class LoadedRun:
    """One run read whole: its records (verified), run.json and fingerprint.json, and the label a
    report or comparison shows it by (its run ID unless told). The report, the records frame,
    acceptance and diagnosis all read a run as this."""

    path: Path
    label: str
    records: tuple[Record, ...]
    fingerprint: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return run_id_of(self.path, self.records, self.meta)

    @cached_property  # judged from every record: once per run, however many read it
    def incomplete(self) -> str:
        """Why the run is not whole (``incompleteness``), "" when it is."""
        return incompleteness(self.meta, self.records, run_dir_of(self.path) is not None, self.fingerprint)

    def families(self) -> list[str]:
        """The families of its records, in the order they first appear."""
        return list(dict.fromkeys(r.family for r in self.records))

    def of(self, family: str) -> list[Record]:
        return [r for r in self.records if r.family == family]

    def only(self, family: str) -> "LoadedRun":
        """This run holding only the records of ``family``: what a family's plots and findings are
        given, so the code that draws them never names its family."""
        return replace(self, records=tuple(self.of(family)))


def run_id_of(path: Path, records: Sequence[Record], meta: dict) -> str:
    """A run's ID: as run.json gives it, else its first record's, else its directory's name."""
    return meta.get("run_id") or (records[0].run_id if records else Path(path).name)


def run_of(path: Path, records: Sequence[Record], meta: Optional[dict] = None, fingerprint: Optional[dict] = None,
           label: Optional[str] = None) -> LoadedRun:
    """A run whose records its caller has read already (a run just measured, one shown with
    --skip-invalid), without reading the directory again; refused naming the file and field of a
    document its records refute (``_held_together``): every LoadedRun is made here."""
    meta = meta or {}
    return _held_together(LoadedRun(Path(path), label or run_id_of(path, records, meta), tuple(records),
                                    fingerprint or {}, meta))


def load_run(path: Path, label: Optional[str] = None) -> LoadedRun:
    """The run directory ``path`` (or its results file) read whole; ResultsFileError when it is
    none, or for an invalid record (naming file and line: none is skipped)."""
    run_dir = run_dir_of(path)
    if run_dir is None:
        raise ResultsFileError(f"{path}: not a run directory")
    return run_of(run_dir, load_records(run_dir), *run_documents(run_dir), label=label)


def load_whole(path: Path) -> LoadedRun:
    """The run ``path`` is (or whose results file it is) read whole, refused with ResultsFileError
    naming it unless it is whole (``incompleteness``): what a command that concludes from a run's
    records (a comparison, a verdict, a fitted model) reads it with. A bare results file (``run_dir_of``)
    is taken as it is, each case once, all of one run."""
    path = Path(path)
    run = run_of(path, load_records(path), *run_documents(path))
    if run.incomplete:  # a killed, mixed or duplicated run's cases are not its measurement
        raise ResultsFileError(f"{path}: {run.incomplete}")
    return run


# The file of each document a LoadedRun holds, by the name harness.core.runheld gives it.
_DOCUMENT_FILES = {runheld.FINGERPRINT: FINGERPRINT, runheld.META: RUN_META, runheld.RESULTS: RESULTS}


def _held_together(run: LoadedRun) -> LoadedRun:
    """``run``, refused naming the file and field of a fingerprint.json or run.json field its records
    refute (``harness.core.runheld``)."""
    refuted = runheld.contradiction(run)
    run_dir = run_dir_of(run.path)
    if refuted is not None and run_dir is not None:
        document, name, why = refuted
        raise ResultsFileError(f"{run_dir / _DOCUMENT_FILES[document]}: {f'field {name}: ' if name else ''}{why}")
    return run




def run_digests(path: Path) -> dict[str, Optional[str]]:
    """The SHA-256 of each file of the run directory ``path`` (None for one it lacks): what a
    verdict on the run judged, so that a log keeping them pins those bytes. They say which bytes were
    judged, not who wrote them: a local file carries nothing that authenticates it."""
    digests: dict[str, Optional[str]] = {}
    for name in RUN_FILES:
        try:
            f = open_regular(Path(path) / name, "run file")
        except (FileNotFoundError, NotADirectoryError):
            digests[name] = None
            continue
        except InputFileError as exc:
            raise ResultsFileError(str(exc)) from None
        digest = hashlib.sha256()
        with f:  # a chunk at a time: a results file can be far larger than what is worth holding
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        digests[name] = digest.hexdigest()
    return digests


def distinct_runs(paths: Iterable[Path], why: str = "each run counts once") -> list[Path]:
    """``paths`` as given, refused with ResultsFileError when two name one run: the same directory
    (through a link, a trailing ``/.``, or as its results.jsonl) given twice would count one run's
    records twice, in a pooled fit, a table or a diagnosis. Copies of one run in two directories are
    caught once read, by their run ID or their measurements (``distinct_run_ids``). ``why`` ends the refusal: what
    counting it twice would do."""
    paths = [Path(p) for p in paths]
    first: dict[str, Path] = {}
    for path in paths:
        key = os.path.realpath(run_dir_of(path) or path)
        if key in first:
            raise ResultsFileError(f"{path} is given twice (as {first[key]} and {path}); {why}")
        first[key] = path
    return paths


def run_copies(runs: Sequence["LoadedRun"]) -> Iterator[tuple["LoadedRun", "LoadedRun", str]]:
    """Each of ``runs`` that is an earlier one's copy, as (copy, original, how it is known): it holds
    the original's run ID, or one of its measurements under another run ID
    (``measurement.measurement_key``: a copy whose run ID was rewritten in every record), or it is
    an import of the log another was imported from (``_imported_log``). The one
    rule by which every command that counts runs knows a run given twice."""
    first: dict[str, "LoadedRun"] = {}
    measured: dict[tuple, tuple["LoadedRun", Record]] = {}
    logs: dict[str, "LoadedRun"] = {}
    for run in runs:
        found = None
        log = _imported_log(run)
        if log in logs:  # a mean-only import has no samples of its own to know it by: its log has
            found = logs[log], (f"run {for_terminal(run.run_id)} in {run.path} and run "
                                f"{for_terminal(logs[log].run_id)} in {logs[log].path} are imports of one log "
                                f"({RUN_META} field source_sha256 {for_terminal(log)[:16]}...)")
        ids = dict.fromkeys(r.run_id for r in run.records)
        for run_id in ids if found is None else ():
            if run_id in first:
                found = first[run_id], f"run {for_terminal(run_id)} is in {first[run_id].path} and in {run.path}"
                break
        keyed = {key: record for record in run.records if (key := measurement_key(record)) is not None}
        if found is None:
            for key, record in keyed.items():
                if key in measured:
                    original, theirs = measured[key]
                    found = original, (
                        f"run {for_terminal(record.run_id)} in {run.path} is run {for_terminal(theirs.run_id)} in "
                        f"{original.path} under another run ID: their records of {for_terminal(record.case_id)} "
                        f"started at {for_terminal(record.started_at)} hold the same samples")
                    break
        if found is not None:
            yield run, *found
            continue
        if log is not None:
            logs[log] = run
        first.update(dict.fromkeys(ids, run))
        measured.update({key: (run, record) for key, record in keyed.items()})


def _imported_log(run: "LoadedRun") -> Optional[str]:
    """The SHA-256 of the log an import was read from (run.json's ``source_sha256``), None for a
    critpath run: two imports of one log are one measurement, whatever each fingerprint says."""
    digest = run.meta.get("source_sha256") if runmeta.is_import(run.meta) else None
    return digest if isinstance(digest, str) and digest else None


def distinct_run_ids(runs: Sequence["LoadedRun"], why: str = "a copy of a run counts once") -> Sequence["LoadedRun"]:
    """``runs``, refused with ResultsFileError when two directories hold one run (``run_copies``): a
    copy of a run is the same process's evidence, not a second run. ``why`` as for
    ``distinct_runs``."""
    for _copy, _original, how in run_copies(runs):
        raise ResultsFileError(f"{how}; {why}")
    return runs


def run_inputs(paths: Iterable[Path]) -> list[Path]:
    """Every file a reader of these runs reads: each run's records, run.json and fingerprint.json
    (a bare results file, ``run_dir_of``, is itself the input)."""
    files: list[Path] = []
    for path in map(Path, paths):
        run_dir = run_dir_of(path)
        files += run_files(run_dir) if run_dir is not None else [path]
    return files


class RunDir:
    """The directory of one run; the single writer of its files."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def results(self) -> Path:
        return self.path / RESULTS

    def append(self, record: Record) -> None:
        append_record(self.results, record)

    def append_many(self, records: Sequence[Record]) -> None:
        append_records(self.results, records)

    def write_fingerprint(self, data: dict) -> None:
        atomic.write_json(self.path / FINGERPRINT, data, run_writer=True)

    def write_meta(self, data: dict) -> None:
        atomic.write_json(self.path / RUN_META, data, run_writer=True)

    def remove_start(self) -> None:
        """Remove what a start wrote (fingerprint.json, run.json), before any record: the directory
        held none of the run's files when it was claimed (``RunJournal.open``), so these are its."""
        for name in (FINGERPRINT, RUN_META):
            try:
                (self.path / name).unlink(missing_ok=True)
            except OSError:
                pass  # the error that stopped the start is the one to report

    def done_case_ids(self) -> set[str]:
        if not self.results.exists():
            return set()
        return {r.case_id for r in iter_records(self.results, skip_invalid=True)}
