"""The run.json fields critpath reads of the run itself, checked once where run.json is loaded
(``harness.core.store.read_meta``), so that no reader meets a surprise later.

A run.json of another schema version is not read as this one; its ``run_id`` is the run its
records must be of (null would excuse any); its times are ISO 8601 instants that UTC can hold, or
an import's ``UNKNOWN_TIME`` (a log that printed none): year 1 an hour east of UTC was an
OverflowError in ``critpath report``.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Mapping, Optional

from harness.core.echo import shown
from harness.core.numbers import NumberError, check_float, check_int
from harness.core.options import MAX_SECONDS
from harness.core.runid import run_id_fault
from harness.core.scale import MAX_SAMPLES, MAX_WORLD
from harness.core.sizes import MAX_RUN_SIZE_BYTES

# The run.json this release writes and reads.
RUN_SCHEMA = "critpath.run/1"
# The start an import writes when its log printed no date.
UNKNOWN_TIME = "unknown"
# run.json's times: null (not yet: a run in progress has no end) or one of the above.
TIME_FIELDS = ("started_at", "finished_at")


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


def _check_options(options: object) -> None:
    """run.json's options within the bounds ``critpath run`` holds its command line to."""
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise RunMetaError(f"field options: {shown(options)} is not a mapping")
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
    if "run_id" in meta and (why := run_id_fault(meta["run_id"])):
        raise RunMetaError(f"field run_id: {why}")
    started, finished = (check_time(name, meta.get(name)) for name in TIME_FIELDS)
    if started and finished and (started.tzinfo is None) == (finished.tzinfo is None) and finished < started:
        raise RunMetaError(f"field finished_at: {meta['finished_at']} is before field started_at "
                           f"{meta['started_at']}")
    _check_options(meta.get("options"))
