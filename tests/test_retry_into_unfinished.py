"""A retry into the --out of a killed import or run: refused, saying that what is there is a run or an
import that did not finish (its run.json state and its records), and that it may be removed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.store import RESULTS
from harness.nccltests import limits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from nccltests_biglog import write_log  # examples/ is on the path from here

# The command stops itself right after its first fsync of results.jsonl, to be SIGKILLed there:
# no timing decides what is on disk.
_STOP_AFTER_FIRST_RECORDS = """
import os, signal, sys
real = os.fsync
def fsync(fd):
    real(fd)
    if os.readlink(f"/proc/self/fd/{fd}").endswith("/results.jsonl"):
        os.kill(os.getpid(), signal.SIGSTOP)
os.fsync = fsync
from harness.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _killed_after_first_records(*argv: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.Popen([sys.executable, "-c", _STOP_AFTER_FIRST_RECORDS, *argv], cwd=ROOT,
                            env={**env, "PYTHONPATH": str(ROOT)}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), "the command ended before its first records were on disk"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the command and any rank it started
        proc.wait()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_a_retry_into_a_killed_import_says_the_import_did_not_finish(tmp_path, capsys):
    log, out = tmp_path / "all_reduce.txt", tmp_path / "run"
    write_log(log, 2 * limits.RECORDS_PER_BATCH + 7)
    _killed_after_first_records("import-nccl-tests", str(log), "--out", str(out))
    capsys.readouterr()
    assert main(["import-nccl-tests", str(log), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (f"{out} holds an import that did not finish (run.json state importing, "
            f"{limits.RECORDS_PER_BATCH} records): choose another --out, or remove it") in err, err


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
@pytest.mark.slow  # real processes, killed
def test_a_retry_into_a_killed_run_says_the_run_did_not_finish(tmp_path, capsys):
    out = tmp_path / "run"
    cases = ["selftest/fault_rank=0,mode=noop,world=1", "selftest/fault_rank=0,mode=noop,world=2"]
    _killed_after_first_records("run", *(w for case in cases for w in ("--case", case)), "--iters", "5",
                                "--out", str(out))
    assert (out / RESULTS).read_bytes().count(b"\n") == 1
    capsys.readouterr()
    assert main(["run", "--case", cases[0], "--iters", "5", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out} holds a run that did not finish (run.json state running, 1 record): choose another --out, or remove it" \
        in err, err


def test_a_finished_run_and_a_directory_of_other_files_are_refused_as_what_they_are(tmp_path, capsys):
    out = tmp_path / "run"
    case = "selftest/fault_rank=0,mode=noop,world=1"
    assert main(["run", "--case", case, "--iters", "5", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["run", "--case", case, "--iters", "5", "--out", str(out)]) == 2
    assert f"{out} already holds a run ({out / RESULTS}); choose another --out" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    log = Path(__file__).parent / "fixtures" / "nccl_tests" / "all_reduce_h100.txt"
    assert main(["import-nccl-tests", str(log), "--out", str(other)]) == 2
    assert f"{other} is not empty ({other / 'notes.txt'}); choose another --out" in capsys.readouterr().err
