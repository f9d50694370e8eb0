"""What identifies one measurement whatever run it is filed under: the rule by which two run
directories are known to hold one run though their run IDs differ.

Nothing in a run directory is sealed. ``store.run_digests`` pins which bytes a verdict judged, not
who wrote them, and verification (``harness.core.verify``) recomputes figures from samples, which
the run ID takes no part in: a copy whose run ID is rewritten in every record, in run.json and in
its directory's name reads as a run of its own. What a copy cannot have without measuring again is
other samples: a record of one case, started at one instant, whose per-iteration samples are
another record's is that record. So a record is keyed by its case ID, its start and its samples,
and two runs sharing a key are one run (``store.run_copies``).

Records with no per-iteration samples are not keyed: a failed record has none, and an imported
mean-only record holds one number, which two clusters' logs can print alike.
"""
from __future__ import annotations

from typing import Optional

from harness.core.figures import is_mean_only
from harness.core.records import Record


def measurement_key(record: Record) -> Optional[tuple]:
    """The key of what ``record`` measured, the same under any run ID; None where it has no
    per-iteration samples to know it by."""
    if not record.samples_ns or is_mean_only(record):
        return None
    return (record.case_id, record.started_at, record.samples_ns)
