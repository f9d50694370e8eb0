"""A set of output files (a report's markdown, HTML and plots; a gate's JSON, JUnit and markdown)
is renamed in whole under a stop signal: one between two renames left a report.md of one run
beside a report.html of another (harness.core.atomic.write_set)."""
from __future__ import annotations

import os
import signal

import pytest

from harness.core import atomic
from harness.run.lifetime import Terminated, stop_signals_unwind


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_between_two_renames_waits_for_the_last(tmp_path, monkeypatch, signum):
    paths = [tmp_path / name for name in ("gate.json", "gate.xml", "gate.md")]
    for path in paths:
        path.write_text("old\n")
    install, renamed = atomic._install, []

    def install_then_signal(tmp, path, *args, **kwargs):
        install(tmp, path, *args, **kwargs)
        renamed.append(path)
        if len(renamed) == 1:
            os.kill(os.getpid(), signum)  # after the first rename, before the second

    monkeypatch.setattr(atomic, "_install", install_then_signal)
    with pytest.raises(KeyboardInterrupt) as stopped, stop_signals_unwind():
        atomic.write_set({path: b"new\n" for path in paths})
    assert isinstance(stopped.value, Terminated) == (signum != signal.SIGINT)
    assert renamed == paths and [path.read_text() for path in paths] == ["new\n"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)  # no temporary left
