"""The run.json fields critpath reads of the run itself, checked once where run.json is loaded
(``harness.core.store.read_meta``), so that no reader meets a surprise later.

A run.json of another schema version is not read as this one; it holds the fields ``critpath run``
or an import writes and no other (``RUN_FIELDS``, ``IMPORT_FIELDS``); its ``run_id`` is the run its
records must be of (null would excuse any); its ``state`` one a writer gives; its times are ISO 8601
instants that UTC can hold, or an import's ``UNKNOWN_TIME`` (a log that printed none): year 1 an
hour east of UTC was an OverflowError in ``critpath report``. Its options are the command line's
(``OPTION_FIELDS``), each within the choices and bounds ``critpath run`` holds it to, and its
``argv`` the one its options keep. What only the records can refute (the backend, world and cases
the options name) is held to them once the run is read whole (``harness.core.runheld``).
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Iterable, Mapping, Optional

from harness.core.echo import shown
from harness.core.family import BACKENDS, PROFILES
from harness.core.numbers import NumberError, check_float, check_int
from harness.core.options import MAX_SECONDS
from harness.core.registry import FAMILY_MODULES
from harness.core.runid import run_id_fault
from harness.core.scale import MAX_RUN_CASES, MAX_SAMPLES, MAX_WORLD
from harness.core.sizes import MAX_RUN_SIZE_BYTES

# The run.json this release writes and reads.
RUN_SCHEMA = "critpath.run/1"
# The start an import writes when its log printed no date.
UNKNOWN_TIME = "unknown"
# run.json's times: null (not yet: a run in progress has no end) or one of the above.
TIME_FIELDS = ("started_at", "finished_at")
# run.json's digest of the planned case IDs (``planned_digest``): a run is whole when its records
# are those cases, not merely as many.
PLANNED = "cases_planned_sha256"
# The fields ``critpath run`` writes (harness.run.plan.RunJournal.meta) and the ones an import adds
# (harness.nccltests.importer): a run.json holding another is not one critpath wrote.
RUN_FIELDS = ("schema", "run_id", "state", "argv", "options", *TIME_FIELDS, "cases_total", PLANNED,
              "cases_ok", "cases_failed")
IMPORT_FIELDS = ("source", "source_sha256", "format", "collective", "collective_from", "evidence", "ranks", "trailer",
                 "checked", "contradicted")
# run.json's counts of cases, each a whole number of the cases a run or an import holds: a count
# of another type would be read as a count the records contradict, not as the fault it is.
COUNT_FIELDS = ("cases_total", "cases_ok", "cases_failed")
# The states a run's writer leaves: a local run interrupted (Ctrl-C, SIGTERM), a joined one aborted
# (a rank failed), an import under way or done.
STATES = ("running", "finished", "interrupted", "aborted", "importing", "imported")
# The state a stop signal (Ctrl-C, SIGTERM, SIGHUP) leaves, of a local run and of an import alike.
INTERRUPTED = "interrupted"
# The options run.json keeps: harness.run.plan.RunOptions's fields (a test holds the two together).
OPTION_FIELDS = ("families", "case_ids", "profile", "world", "backend", "sizes_bytes", "iters", "warmup",
                 "timeout_s", "out", "argv")
# The most words a run's command line holds: a --case and its ID for each case a run holds, and
# room for the other options.
MAX_ARGV_WORDS = 2 * MAX_RUN_CASES + 64
# Each option of a fixed set of values, and that set: a report prints the profile, and a reader of
# the backend selects records by it.
OPTION_CHOICES = {"profile": PROFILES, "backend": BACKENDS}


class RunMetaError(ValueError):
    """A run.json field critpath cannot read; the message starts with ``field NAME:``."""


def check_time(name: str, stamp: object) -> Optional[datetime]:
    """The instant ``stamp`` names (None: not recorded or unknown), refused where it names none."""
    if stamp is None or stamp == UNKNOWN_TIME:
        return None
    if not isinstance(stamp, str):
        raise RunMetaError(f"field {name}: {shown(stamp)} is not an ISO 8601 time")
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        raise RunMetaError(f"field {name}: {shown(stamp)} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        return when  # shown as written, not taken for UTC or local time
    try:
        when.astimezone(timezone.utc)
    except OverflowError:
        raise RunMetaError(f"field {name}: {shown(stamp)} is out of the range of dates UTC can hold "
                           f"(years 1 to 9999)") from None
    return when


def instants(meta: Mapping) -> tuple[Optional[datetime], Optional[datetime]]:
    """run.json's (started_at, finished_at) as instants, each None where it names none: not yet
    (null), unknown, or a time without a zone, which is no instant to hold a record's start to."""
    times = (check_time(name, meta.get(name)) for name in TIME_FIELDS)
    return tuple(t if t is not None and t.tzinfo is not None else None for t in times)


def _check_texts(value: object, name: str, most: int) -> list:
    """``value`` as a list of at most ``most`` strings, refused naming ``name`` where it is not one."""
    if not isinstance(value, list):
        raise RunMetaError(f"field {name}: {shown(value)} is not a list of strings")
    if len(value) > most:
        raise RunMetaError(f"field {name}: {len(value)} items, more than the {most} a run's command line gives")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise RunMetaError(f"field {name}.{index}: {shown(item)} is not a string")
    return value


def _check_selection(options: Mapping) -> None:
    """The options that choose a run's cases and how they run, each one a run can be given."""
    unknown = next((key for key in options if key not in OPTION_FIELDS), None)
    if unknown is not None:
        raise RunMetaError(f"field options: {shown(unknown)} is not an option critpath run keeps "
                           f"({', '.join(OPTION_FIELDS)})")
    for name, choices in OPTION_CHOICES.items():
        if options.get(name) is not None and options[name] not in choices:
            raise RunMetaError(f"field options.{name}: {shown(options[name])} is not one of {', '.join(choices)}")
    if options.get("families") is not None:
        families = _check_texts(options["families"], "options.families", len(FAMILY_MODULES))
        other = next((f for f in families if f not in FAMILY_MODULES), None)
        if other is not None:
            raise RunMetaError(f"field options.families: {shown(other)} is not a critpath family "
                               f"({', '.join(FAMILY_MODULES)})")
        again = next((i for i, f in enumerate(families) if f in families[:i]), None)
        if again is not None:  # the command line refuses a family given twice (options.comma_separated)
            raise RunMetaError(f"field options.families.{again}: {shown(families[again])} is given twice, "
                               "which --families refuses")
    if options.get("case_ids") is not None:
        _check_texts(options["case_ids"], "options.case_ids", MAX_RUN_CASES)
    if options.get("argv") is not None:
        _check_texts(options["argv"], "options.argv", MAX_ARGV_WORDS)
    if options.get("out") is not None and not isinstance(options["out"], str):
        raise RunMetaError(f"field options.out: {shown(options['out'])} is not a path")


def _check_options(options: object) -> None:
    """run.json's options: the ones ``critpath run`` keeps, within the choices and bounds it holds
    its command line to."""
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise RunMetaError(f"field options: {shown(options)} is not a mapping")
    _check_selection(options)
    try:
        for name, low in (("iters", 1), ("warmup", 0)):
            if options.get(name) is not None:
                check_int(options[name], f"field options.{name}", low, MAX_SAMPLES)
        if options.get("world") is not None:
            check_int(options["world"], "field options.world", 1, MAX_WORLD)
        sizes = options.get("sizes_bytes")
        if sizes is not None:
            if not isinstance(sizes, list):
                raise RunMetaError(f"field options.sizes_bytes: {shown(sizes)} is not a list of sizes")
            for index, size in enumerate(sizes):
                check_int(size, f"field options.sizes_bytes.{index}", 1, MAX_RUN_SIZE_BYTES)
        timeout_s = options.get("timeout_s")
        if timeout_s is not None:
            check_float(timeout_s, "field options.timeout_s", 0.0, MAX_SECONDS)
            if timeout_s == 0:
                raise RunMetaError("field options.timeout_s: must be a number of seconds in "
                                   f"(0, {MAX_SECONDS:g}], got 0")
    except NumberError as exc:
        raise RunMetaError(str(exc)) from None


def check(meta: Mapping) -> None:
    """RunMetaError naming the first field of ``meta`` critpath cannot read as its run's."""
    schema = meta.get("schema", RUN_SCHEMA)
    if schema != RUN_SCHEMA:
        raise RunMetaError(f"field schema: {shown(schema)} is not {RUN_SCHEMA!r}, the run.json this release reads")
    unknown = next((key for key in meta if key not in RUN_FIELDS + IMPORT_FIELDS), None)
    if unknown is not None:
        raise RunMetaError(f"field {shown(unknown)}: not a field of a run.json ({RUN_SCHEMA} has "
                           f"{', '.join(RUN_FIELDS)}, and an import's {', '.join(IMPORT_FIELDS)})")
    if meta.get("state") is not None and meta["state"] not in STATES:
        raise RunMetaError(f"field state: {shown(meta['state'])} is not a state a run is left in ({', '.join(STATES)})")
    if "run_id" in meta and (why := run_id_fault(meta["run_id"])):
        raise RunMetaError(f"field run_id: {why}")
    for name in COUNT_FIELDS:
        if meta.get(name) is not None:
            try:
                check_int(meta[name], f"field {name}", 0, MAX_RUN_CASES)
            except NumberError as exc:
                raise RunMetaError(str(exc)) from None
    started, finished = (check_time(name, meta.get(name)) for name in TIME_FIELDS)
    if started and finished and (started.tzinfo is None) == (finished.tzinfo is None) and finished < started:
        raise RunMetaError(f"field finished_at: {meta['finished_at']} is before field started_at "
                           f"{meta['started_at']}")
    _check_options(meta.get("options"))
    _check_argv(meta)


def _check_argv(meta: Mapping) -> None:
    """run.json's ``argv`` is the command line its options keep: both are written from one."""
    if meta.get("argv") is None:
        return
    argv = _check_texts(meta["argv"], "argv", MAX_ARGV_WORDS)
    options = meta.get("options")
    kept = options.get("argv") if isinstance(options, Mapping) else None
    if kept is None or kept == argv:
        return
    index = next((i for i, (a, b) in enumerate(zip(argv, kept)) if a != b), min(len(argv), len(kept)))
    said = [shown(words[index]) if index < len(words) else "(none)" for words in (argv, kept)]
    raise RunMetaError(f"field argv.{index}: {said[0]}, but field options.argv.{index} is {said[1]}; both are the "
                       "command line that made the run")


def is_import(meta: Mapping) -> bool:
    """Whether ``meta`` is an import's run.json: it holds the fields only an import writes, from its
    first write on (harness.nccltests.importer). Its state is not asked: a state its records do not
    fit leaves the run not whole (``harness.core.store.incompleteness``)."""
    return any(key in meta for key in IMPORT_FIELDS)


def planned_digest(case_ids: Iterable[str]) -> str:
    """The digest run.json keeps of the cases a run plans (``PLANNED``): of their IDs, sorted, one a
    line. A digest rather than the list: run.json is rewritten after every case, and 10,000 IDs
    would make that a megabyte each time."""
    return hashlib.sha256("\n".join(sorted(case_ids)).encode()).hexdigest()
