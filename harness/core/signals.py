"""The signals that ask a command to stop, and a block of work they wait for."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

# The signals that ask a command to stop and that it unwinds from as from Ctrl-C: SIGTERM (a kill,
# a CI cancellation, a Slurm time limit) and SIGHUP (the terminal or ssh session closed), which by
# default ended a gate at once, exit 129, leaving its worktree, temporary directory and no gate.json.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """While the block runs, SIGINT and the stop signals are noted, not acted on; after it, each
    one noted is raised again, to the handler that was there before. For a few steps that must
    all happen or none (the renames of a set of output files): a signal between two of them left a
    report's markdown of one run beside its HTML of another. Python runs its handlers in the main
    thread only, so only there can it set these; elsewhere the block runs as it is. SIGKILL cannot
    be deferred."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    before = {signum: signal.signal(signum, lambda signum, frame: noted.append(signum))
              for signum in (signal.SIGINT, *STOP_SIGNALS)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)
