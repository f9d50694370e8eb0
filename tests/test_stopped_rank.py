"""A rank stopped by SIGSTOP mid-case: the case times out, and the record names the stopped rank,
the one that could not give a stack dump, rather than `rank: null` beside "killed ranks [0, 1]"."""
from __future__ import annotations

import json
import os
import signal

import pytest

from harness.cli import main
from harness.run import launcher

FIRST = "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,world=2"
# Long enough (some 50 collectives of 16 MiB) that rank 1 is still in it when it is stopped.
STOPPED_IN = "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=16777216,world=2"


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_rank_stopped_mid_case_is_named_in_the_timeout_record(tmp_path, monkeypatch):
    real_handle = launcher.Supervisor._handle
    stopped = []

    def handle(self, event, pending, state):
        if event[0] == "start" and event[1] == STOPPED_IN and not stopped:
            pid = state.procs[1].pid
            os.kill(pid, signal.SIGSTOP)  # as `kill -STOP` of one rank's pid from a shell
            stopped.append(pid)
        return real_handle(self, event, pending, state)

    monkeypatch.setattr(launcher.Supervisor, "_handle", handle)
    out = tmp_path / "run"
    assert main(["run", "--case", FIRST, "--case", STOPPED_IN, "--iters", "50", "--warmup", "2",
                 "--timeout", "3", "--out", str(out)]) == 1
    assert stopped, "the second case never started"
    first, second = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert first["status"] == "ok"
    assert second["status"] == "timeout" and second["error"]["rank"] == 1, second["error"]
    message = second["error"]["message"]
    assert "rank 1 was stopped (state T) and gave no stack dump" in message, message
    assert "ranks [0] were waiting for it in torch.distributed" in message, message


RING = "allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=1048576,world=2"


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_rank_stopped_while_its_peer_waits_in_the_ring_is_named_not_the_waiting_peer(tmp_path, monkeypatch):
    """The ring's wait is a Work handle's (C++): the waiting rank's stack ends in harness code
    (_exchange), not in torch.distributed. It is waiting for the stopped rank, not hung."""
    import threading

    real_handle = launcher.Supervisor._handle
    stopped = []

    def stop(pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)

    def handle(self, event, pending, state):
        if event[0] == "start" and event[1] == RING and not stopped:
            # inside the timing loop, where rank 0 then waits in _exchange's request.wait()
            threading.Timer(1.0, stop, (state.procs[1].pid,)).start()
        return real_handle(self, event, pending, state)

    monkeypatch.setattr(launcher.Supervisor, "_handle", handle)
    out = tmp_path / "run"
    assert main(["run", "--case", RING, "--iters", "1000000", "--warmup", "2", "--timeout", "4",
                 "--out", str(out)]) == 1
    assert stopped, "the ring case never started"
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    message = record["error"]["message"]
    assert record["status"] == "timeout" and record["error"]["rank"] == 1, record["error"]
    assert "rank 1 was stopped (state T) and gave no stack dump" in message, message
    assert "ranks [0] were waiting for it in torch.distributed" in message, message
    assert "hung in" not in message, message


class _Rank:
    """What hung_ranks reads of a rank's process: its pid, and no exit code while it lives."""

    def __init__(self, pid: int) -> None:
        self.pid, self.exitcode = pid, None


def _process(script: str):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", f"import signal, sys, time\n{script}\nprint(flush=True)\ntime.sleep(60)"],
                            stdout=subprocess.PIPE)
    proc.stdout.readline()  # its signal disposition is set
    return proc


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_the_one_rank_that_gives_no_stack_dump_is_named(tmp_path, monkeypatch):
    """Of two ranks one dumps a stack waiting in torch.distributed; the other ignores SIGUSR1 (not
    stopped, state S): it is the rank named, as silent. Two silent ranks: neither is named."""
    deaf = _process("signal.signal(signal.SIGUSR1, signal.SIG_IGN)")
    deaf_too = _process("signal.signal(signal.SIGUSR1, signal.SIG_IGN)")
    waiting = _process("signal.signal(signal.SIGUSR1, signal.SIG_IGN)")
    try:
        def dumped(rank: int) -> None:  # what faulthandler writes of a rank waiting for a peer
            (tmp_path / launcher.STACK_FILE.format(rank=rank)).write_text(
                'Stack (most recent call first):\n  File "/x/torch/distributed/distributed_c10d.py", line 1 in wait\n')

        monkeypatch.setattr(launcher.time, "sleep", lambda s: dumped(0))  # the dump lands while hung_ranks waits
        blamed, where = launcher.hung_ranks([_Rank(waiting.pid), _Rank(deaf.pid)], str(tmp_path))
        assert (blamed, where) == ([1], "rank 1 gave no stack dump; ranks [0] were waiting for it in torch.distributed")
        blamed, where = launcher.hung_ranks([_Rank(waiting.pid), _Rank(deaf.pid), _Rank(deaf_too.pid)], str(tmp_path))
        assert (blamed, where) == ([], "")
        os.kill(deaf_too.pid, signal.SIGSTOP)
        blamed, where = launcher.hung_ranks([_Rank(waiting.pid), _Rank(deaf.pid), _Rank(deaf_too.pid)], str(tmp_path))
        assert blamed == [2] and where.startswith("rank 2 was stopped (state T)"), where

        def in_own_code(rank: int) -> None:  # a rank busy in harness code beside the stopped one
            (tmp_path / launcher.STACK_FILE.format(rank=rank)).write_text(
                'Stack (most recent call first):\n  File "/x/harness/families/selftest.py", line 77 in step\n')

        monkeypatch.setattr(launcher.time, "sleep", lambda s: in_own_code(0))
        blamed, where = launcher.hung_ranks([_Rank(waiting.pid), _Rank(deaf_too.pid)], str(tmp_path))
        assert (blamed, where) == ([1], "rank 1 was stopped (state T) and gave no stack dump; "
                                        "rank 0 was in step (harness/families/selftest.py:77)")
    finally:
        for proc in (deaf, deaf_too, waiting):
            proc.kill()
            proc.wait()


@pytest.mark.integration
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_rank_stopped_while_the_pool_starts_is_held_by_the_start_limit_and_named():
    """A pool's start is bounded by start_timeout_s, not the case's --timeout; the record says so,
    and names the stopped rank."""
    from harness.core import registry
    from harness.run.timing import PlanPolicy

    records = []
    supervisor = launcher.Supervisor(world=2, backend="gloo", policy=PlanPolicy(warmup=0, iters=1), run_id="r",
                                     case_timeout_s=60, start_timeout_s=3, on_record=records.append)
    with supervisor:
        supervisor.start()
        os.kill(supervisor._pool.procs[1].pid, signal.SIGSTOP)  # before it could join the group
        supervisor.run([registry.parse(FIRST)])
    (record,) = records
    assert record.status == "timeout" and record.error.rank == 1, record.error
    assert record.error.message.startswith(
        "ranks did not start within 3 s (a pool's start, which --timeout does not bound); "
        "rank 1 was stopped (state T) and gave no stack dump"), record.error.message
