"""An interrupt (Ctrl-C, or SIGTERM unwinding as one) while a rank pool is being started: the pool
was not yet the supervisor's, so nothing removed its directory or killed the ranks already started.
The directory stayed in TMPDIR for good (no later run sweeps another TMPDIR), which is what a
killed `critpath history` left once in CI."""
from __future__ import annotations

import os

import pytest

from harness.run import launcher
from harness.run.launcher import POOL_DIR_PREFIX, Supervisor
from harness.run.timing import PlanPolicy

pytestmark = pytest.mark.integration


def _pool_dirs(where) -> list[str]:
    return [name for name in os.listdir(where) if name.startswith(POOL_DIR_PREFIX)]


@pytest.mark.parametrize("interrupted_at", [1, 2])  # the first rank's start, or the second's
def test_an_interrupt_while_ranks_start_removes_the_pool_and_its_ranks(tmp_path, monkeypatch, interrupted_at):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    started = []
    real_start = launcher.mp.context.SpawnProcess.start

    def start(proc):
        if len(started) + 1 == interrupted_at:
            raise KeyboardInterrupt  # as the SIGTERM handler raises it, between two ranks' starts
        real_start(proc)
        started.append(proc)

    monkeypatch.setattr(launcher.mp.context.SpawnProcess, "start", start)
    supervisor = Supervisor(world=2, backend="gloo", policy=PlanPolicy(warmup=0, iters=1), run_id="r",
                            case_timeout_s=10)
    with pytest.raises(KeyboardInterrupt):
        with supervisor:
            supervisor.start()
    assert _pool_dirs(tmp_path) == []
    assert all(proc.exitcode is not None for proc in started)  # killed and reaped, not left to run
