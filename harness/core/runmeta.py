"""The run.json fields critpath reads of the run itself, checked once where run.json is loaded
(``harness.core.store.read_meta``), so that no reader meets a surprise later.

A run.json of another schema version is not read as this one; its ``run_id`` is the run its
records must be of (null would excuse any); its times are ISO 8601 instants that UTC can hold, or
an import's ``UNKNOWN_TIME`` (a log that printed none): year 1 an hour east of UTC was an
OverflowError in ``critpath report``.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Mapping

from harness.core.echo import shown

# The run.json this release writes and reads.
RUN_SCHEMA = "critpath.run/1"
# The start an import writes when its log printed no date.
UNKNOWN_TIME = "unknown"
# run.json's times: null (not yet: a run in progress has no end) or one of the above.
TIME_FIELDS = ("started_at", "finished_at")


class RunMetaError(ValueError):
    """A run.json field critpath cannot read; the message starts with ``field NAME:``."""


def _check_time(name: str, stamp: object) -> None:
    if stamp is None or stamp == UNKNOWN_TIME:
        return
    if not isinstance(stamp, str):
        raise RunMetaError(f"field {name}: {shown(stamp)} is not an ISO 8601 time")
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        raise RunMetaError(f"field {name}: {shown(stamp)} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        return  # shown as written, not taken for UTC or local time
    try:
        when.astimezone(timezone.utc)
    except OverflowError:
        raise RunMetaError(f"field {name}: {shown(stamp)} is out of the range of dates UTC can hold "
                           f"(years 1 to 9999)") from None


def check(meta: Mapping) -> None:
    """RunMetaError naming the first field of ``meta`` critpath cannot read as its run's."""
    schema = meta.get("schema", RUN_SCHEMA)
    if schema != RUN_SCHEMA:
        raise RunMetaError(f"field schema: {shown(schema)} is not {RUN_SCHEMA!r}, the run.json this release reads")
    if "run_id" in meta and not (isinstance(meta["run_id"], str) and meta["run_id"]):
        raise RunMetaError(f"field run_id: {shown(meta['run_id'])} is not a run ID (the ID its records carry)")
    for name in TIME_FIELDS:
        _check_time(name, meta.get(name))
