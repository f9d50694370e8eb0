"""The bounds of the gate's line protocol with its workers (``harness/run/rounds.py``), declared
apart so that the gate reads them without importing what a worker runs."""
from __future__ import annotations

from harness.core.jsonfile import JsonLimits
from harness.core.store import MAX_RUN_CASES

# The longest line either side writes: a round names each case with its status and count, some
# 300 bytes a case, 3 MB for the most cases a run holds. A side past this is misbehaving (a worker
# writing forever without a newline took 3 min and 365 MB of the gate's buffer; 400 MB of spaces on
# a worker's stdin took 826 MB).
MAX_WORKER_LINE_BYTES = 16 << 20
# What one message may hold once parsed: a few keys per case, at most MAX_RUN_CASES cases, nested
# four levels. A line of 200,000 "[" was a RecursionError naming nothing, on either side.
WORKER_MESSAGE_LIMITS = JsonLimits(keys=10 * MAX_RUN_CASES, values=20 * MAX_RUN_CASES, depth=8)
