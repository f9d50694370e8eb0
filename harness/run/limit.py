"""A case's time limit (``--timeout``), judged when the case ends as well as while it runs.

The supervisor looks at the clock between events, every ``POLL_S``, and a joined rank's watchdog
is a timer thread: a case that ends before either looks (a limit shorter than one poll, or a timer
not yet scheduled on a busy core) would otherwise be recorded as ok though it ran past its limit.
Its end is therefore held to the limit too, on the same monotonic clock that started it.
"""
from __future__ import annotations

# A pool of local ranks' start (spawning them, importing torch, joining the group), bounded apart
# from --timeout: a short --timeout is a case's limit, and a loaded machine's start can take longer.
POOL_START_TIMEOUT_S = 120.0


def overran_by(elapsed_s: float, limit_s: float) -> str:
    """Why a case that ran ``elapsed_s`` is no ok case under a limit of ``limit_s``; "" within it."""
    if elapsed_s <= limit_s:
        return ""
    return f"case did not finish within {limit_s:g} s (it ended after {elapsed_s:.3g} s)"
