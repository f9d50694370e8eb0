"""Processes that must not outlive the process that started them."""
from __future__ import annotations

import ctypes
import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from harness.core.signals import STOP_SIGNALS


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
    """A stop signal (``STOP_SIGNALS``), delivered as an interrupt so that every context
    (worktrees, workers, child processes) unwinds as it does on Ctrl-C."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_terminated(signum, frame) -> None:
    """The handler of every stop signal (``stop_signals_unwind``)."""
    raise Terminated(signum)


def on_stop_signals(handler) -> dict:
    """``handler`` for every stop signal this process does not ignore; the handlers before, by
    signal. One ignored from the start stays so: under ``nohup`` a closed terminal is meant to
    leave the command running."""
    return {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS
            if signal.getsignal(signum) is not signal.SIG_IGN}


@contextmanager
def stop_signals_unwind() -> Iterator[None]:
    """While the block runs, every stop signal raises ``Terminated``; the handlers before are put
    back after it. Only the main thread may set one: elsewhere (a test calling a command from a
    thread) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = on_stop_signals(raise_terminated)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def interrupt_signal(exc: KeyboardInterrupt) -> signal.Signals:
    """The signal an interrupt came from: the stop signal of a ``Terminated``, else SIGINT (Ctrl-C)."""
    return signal.Signals(exc.signum) if isinstance(exc, Terminated) else signal.SIGINT
