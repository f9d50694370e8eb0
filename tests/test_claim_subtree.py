"""A claim covers the tree below its directory: a writer below a directory another live process
holds is refused (exit 2, the holder named), and so is a claim of a directory below which another
live process holds one; the processes a holder started itself (a gate's workers and runs) are not.
Every holder here is a real process, and every refused command the real CLI in a process of its own."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, derived_record, run_cli

from harness.core.claim import BELOW_DEPTH, CLAIM_FILE, DirectoryClaimed, claim_dir
from harness.core.store import RESULTS, append_record

pytestmark = pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes

OK_CASE = "selftest/fault_rank=0,mode=noop,world=1"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
# Holds argv[1] as `critpath run` does; then, when given a command line after it, runs that as its
# own child (through argv[2] intermediate interpreters) and prints its exit status and stderr.
HOLD = """
import json, subprocess, sys
from harness.core.claim import claim_dir

claim_dir(sys.argv[1], "run")
print("held", flush=True)
depth, argv = int(sys.argv[2]), sys.argv[3:]
if argv:
    for _ in range(depth):
        argv = [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))", *argv]
    done = subprocess.run(argv, capture_output=True, text=True)
    print(json.dumps({"rc": done.returncode, "err": done.stderr}), flush=True)
sys.stdin.read()  # until the test closes it
"""


@pytest.fixture
def hold(live_script):
    """``hold(path, depth=0, *argv)``: a live process holding ``path``, released after the test."""
    return lambda path, depth=0, *argv: live_script(HOLD, path, depth, *argv, ready="held")


def finished_run(path: Path) -> Path:
    path.mkdir(parents=True)
    append_record(path / RESULTS, derived_record(OK_CASE, range(1000, 1200), run_id="r1"))
    (path / "run.json").write_text(json.dumps({"schema": "critpath.run/1", "run_id": "r1", "state": "finished",
                                               "cases_total": 1}))
    return path


def run_argv(out: Path) -> list[str]:
    return ["run", f"--case={OK_CASE}", "--iters", "5", "--out", str(out)]


def assert_refused_naming(done: subprocess.CompletedProcess, held: Path, holder: int, command: str = "run") -> None:
    assert done.returncode == 2, done.stderr
    assert f"{held} is in use: another process holds the lock on {held / CLAIM_FILE}; " in done.stderr
    assert f"the file names critpath {command} (pid {holder} on " in done.stderr
    assert "which is running" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["run --out G/inner", "report --out G/rep", "export --out G/sub/x.csv",
                                     "run --out LINK/inner"])
def test_a_writer_below_a_directory_another_live_process_holds_is_refused_naming_it(tmp_path, hold, command):
    """While `run --out G` ran, `run --out G/inner` and `report --out G/rep` were accepted and
    wrote below G; a link to G was no way round it either (the path is resolved first)."""
    held = tmp_path / "G"
    holder = hold(held)
    (tmp_path / "LINK").symlink_to(held)
    run = finished_run(tmp_path / "run")
    argv = {"run --out G/inner": run_argv(held / "inner"),
            "report --out G/rep": ["report", str(run), "--out", str(held / "rep")],
            "export --out G/sub/x.csv": ["export", str(run), "--format", "csv", "--out", str(held / "sub" / "x.csv")],
            "run --out LINK/inner": run_argv(tmp_path / "LINK" / "inner")}[command]
    if command.startswith("export"):
        (held / "sub").mkdir()
    before = sorted(p.relative_to(held) for p in held.rglob("*"))
    done = run_cli(*argv)
    assert_refused_naming(done, held, holder.pid)
    assert sorted(p.relative_to(held) for p in held.rglob("*")) == before  # nothing written below G
    holder.send_signal(signal.SIGKILL)  # a dead holder's claim file blocks nobody
    holder.wait(timeout=30)
    # finished_run holds no fingerprint.json, so its report says INCOMPLETE RUN and exits 1: written all the same
    assert run_cli(*argv).returncode == (1 if command.startswith("report") else 0)
    if command.startswith("report"):
        assert (held / "rep" / "report.md").is_file()


def test_a_run_into_a_live_workers_round_is_refused_and_the_round_stays_the_workers(tmp_path):
    """While `critpath worker --out W` held W, `run --out W/round-000` was accepted, and the worker
    then appended a second run's records into that round."""
    out = tmp_path / "W"
    worker = subprocess.Popen([sys.executable, "-m", "harness", "worker", "--out", str(out)], cwd=ROOT, env=ENV,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert json.loads(worker.stdout.readline())["event"] == "ready"
        done = run_cli(*run_argv(out / "round-000"))
        assert_refused_naming(done, out, worker.pid, "worker")
        assert not (out / "round-000").exists()
        worker.stdin.write(json.dumps({"cmd": "round", "round": 0, "cases": [{"id": OK_CASE, "iters": 5}]}) + "\n")
        worker.stdin.flush()
        reply = json.loads(worker.stdout.readline())
        assert reply["event"] == "round" and [r["status"] for r in reply["records"]] == ["ok"]
        records = [json.loads(line) for line in (out / "round-000" / RESULTS).read_text().splitlines()]
        assert len(records) == 1 and len({r["run_id"] for r in records}) == 1
    finally:
        worker.stdin.close()
        assert worker.wait(timeout=60) == 0


@pytest.mark.parametrize("command", ["run --out G", "report --out G"])
def test_a_claim_over_a_directory_another_live_process_holds_below_it_is_refused(tmp_path, hold, command):
    """The reverse: while `run --out G/inner` ran, `report --out G` (or `run --out G`) was accepted,
    two live writers in one tree."""
    tree, inner = tmp_path / "G", tmp_path / "G" / "deeper" / "inner"
    holder = hold(inner)
    run = finished_run(tmp_path / "run")
    argv = run_argv(tree) if command.startswith("run") else ["report", str(run), "--out", str(tree)]
    done = run_cli(*argv)
    assert_refused_naming(done, inner, holder.pid)
    assert sorted(p.name for p in tree.iterdir()) == ["deeper"]  # no claim, no output left in G


@pytest.mark.parametrize("depth", [0, 2])
def test_a_process_the_holder_started_writes_below_it_and_no_other_does(tmp_path, hold, depth):
    """The gate claims its --out and its workers and runs claim directories below it: a holder's
    own child (or a child of its child) may, as the gate's workers do; a process it did not start
    may not."""
    held = tmp_path / "G"
    holder = hold(held, depth, sys.executable, "-m", "harness", *run_argv(held / "mine"))
    child = json.loads(holder.stdout.readline())
    assert child["rc"] == 0, child["err"]
    assert (held / "mine" / RESULTS).is_file()
    assert_refused_naming(run_cli(*run_argv(held / "other")), held, holder.pid)
    assert not (held / "other").exists()


def test_the_walk_below_a_claim_goes_bounded_levels_deep_and_no_deeper(tmp_path, hold):
    """A holder BELOW_DEPTH levels down refuses a claim above; one deeper is past the walk's bound
    (read as unclaimed, never refused as a tree too deep to claim)."""
    tree = tmp_path / "G"
    deepest = tree.joinpath(*[f"d{i}" for i in range(BELOW_DEPTH + 1)])
    beyond = hold(deepest)
    with claim_dir(tree, "report"):
        pass
    beyond.stdin.close()  # given up: a holder of its parent would be refused over it
    beyond.wait(timeout=30)
    holder = hold(deepest.parent)
    with pytest.raises(DirectoryClaimed, match=f"{tree} holds another process's output: {deepest.parent} is in use"
                                               f".*pid {holder.pid} on "):
        claim_dir(tree, "report")


def test_a_holder_of_another_pid_namespace_is_no_ancestor_whatever_its_pid(tmp_path):
    """Two containers of one pod share a host name and a volume: a holder whose pid, counted in its
    own namespace, equals one of this process's ancestors' is still not the process that started
    it."""
    import json
    import os
    import socket

    from harness.core import claim

    def started_by(namespace):
        path = tmp_path / f"claim-{namespace}"
        path.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "command": "run",
                                    "argv": [], "started_at": "2026-01-01T00:00:00+00:00",
                                    "pid_namespace": namespace}))
        fd = os.open(path, os.O_RDONLY)
        try:
            return claim._started_by_holder(fd)
        finally:
            os.close(fd)

    assert started_by(claim.pid_namespace())  # this process's parent, in this namespace
    assert not started_by("pid:[1]")  # the same number in another namespace
