"""A process's /proc/PID/stat, as its fields (proc(5)): one reader for every use of it."""
from __future__ import annotations

from typing import Optional

STAT_BYTES = 4096  # a few hundred bytes; the command name in it is at most 64
STATE_FIELD = 0  # proc(5)'s field 3, the first after the command name: R, S, D, T (stopped), Z ...
PPID_FIELD = 1  # field 4
STARTTIME_FIELD = 19  # field 22: the start, in clock ticks since boot
# States of a process that cannot run until it is continued: by a signal (SIGSTOP), by a tracer.
STOPPED_STATES = ("T", "t")


def stat_fields(pid: int) -> Optional[list[str]]:
    """The fields of ``pid``'s stat after its command name (which may hold spaces and ")"), so
    index 0 is proc(5)'s field 3; None where there is no /proc or no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read(STAT_BYTES)
    except OSError:
        return None
    return raw.rpartition(b")")[2].decode("ascii", "replace").split()


def state_of(pid: int) -> Optional[str]:
    """``pid``'s state letter (T: stopped by a signal, t: by a tracer), None when unknown."""
    fields = stat_fields(pid)
    return fields[STATE_FIELD] if fields else None


def stopped_state(pid: int) -> Optional[str]:
    """``pid``'s state letter where it is stopped (it cannot answer until continued), else None."""
    state = state_of(pid)
    return state if state in STOPPED_STATES else None
