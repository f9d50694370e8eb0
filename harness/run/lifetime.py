"""Processes that must not outlive the process that started them."""
from __future__ import annotations

import ctypes
import os
import signal


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """If the parent is killed (SIGKILL leaves it no chance to clean up), take this process down
    too instead of leaving it blocked on a pipe or queue nobody reads. Linux only; a no-op
    elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)
    except (OSError, AttributeError):
        pass


def stop_with_parent() -> None:
    """A ``preexec_fn`` for a child that cleans up on SIGTERM (a gate, a critpath run): killed
    outright, its parent cannot stop it, so SIGTERM on the parent's death lets it stop the way it
    does on an interrupt instead of outliving the command that started it."""
    die_with_parent(signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an interrupt so that every context (worktrees, workers, child
    processes) unwinds as it does on Ctrl-C."""


def raise_on_sigterm(signum, frame) -> None:
    """A SIGTERM handler: ``signal.signal(signal.SIGTERM, raise_on_sigterm)``."""
    raise Terminated()


def interrupt_signal(exc: KeyboardInterrupt) -> int:
    """The signal an interrupt came from: SIGTERM for ``Terminated``, else SIGINT (Ctrl-C)."""
    return signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
