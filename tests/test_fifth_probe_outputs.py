"""Every output written atomically, never over an input, never through a planted link, into a
directory one process holds; a refused start leaves its --out as it found it."""
from __future__ import annotations

import errno
import json
import os
import re
import socket
import subprocess
import sys

import pytest
from conftest import ROOT, derived_record, git

from harness.cli import main
from harness.core import temps
from harness.core.claim import CLAIM_FILE
from harness.core.git import over_repository
from harness.core.options import UsageError
from harness.core.store import RESULTS, RunDir, append_record, host_token
from harness.gate.outputs import GateResult, write_outputs
from harness.gate.stats import Policy

OK_CASE = "selftest/fault_rank=0,mode=noop,world=1"


# -- records never go through a link ----------------------------------------------------------------

def test_a_run_refuses_a_dangling_results_link_and_writes_nothing_through_it(tmp_path, capfd):
    """`run --out L1` with L1/results.jsonl a link to nothing exited 0 and created the link's
    target, outside the claimed directory, holding the records."""
    out, victim = tmp_path / "L1", tmp_path / "victim1"
    out.mkdir()
    (out / RESULTS).symlink_to(victim)
    assert main(["run", "--case", OK_CASE, "--iters", "5", "--out", str(out)]) == 2
    assert f"{out} already holds a run ({out / RESULTS})" in capfd.readouterr().err
    assert not victim.exists() and not victim.is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [RESULTS] and (out / RESULTS).is_symlink()


@pytest.mark.parametrize("target", ["missing", "existing"])
def test_a_record_is_never_appended_through_a_link(tmp_path, target):
    victim = tmp_path / "victim"
    if target == "existing":
        victim.write_text("mine\n")
    (tmp_path / RESULTS).symlink_to(victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        append_record(tmp_path / RESULTS, derived_record(OK_CASE, range(1000, 1100)))
    assert (victim.read_text() == "mine\n") if target == "existing" else not victim.exists()


# -- a worker holds its --out -------------------------------------------------------------------------

def _worker(out, **kw) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return subprocess.Popen([sys.executable, "-m", "harness", "worker", "--out", str(out)], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


ROUND = json.dumps({"cmd": "round", "round": 0, "cases": [{"id": OK_CASE, "iters": 5}], "warmup": 1}) + "\n"


def test_two_workers_into_one_out_are_refused_at_once_and_after(tmp_path):
    """Two workers sent the same round both exited 0, and one results.jsonl held two records of
    one case with two run IDs."""
    out = tmp_path / "W"
    first = _worker(out)
    try:
        assert json.loads(first.stdout.readline())["event"] == "ready"  # it holds W now
        second = _worker(out)
        stdout, stderr = second.communicate(ROUND + '{"cmd": "stop"}\n', timeout=120)
        assert second.returncode == 2 and stdout == ""
        assert f"{out} is in use" in stderr and "critpath worker" in stderr
        first.stdin.write(ROUND + '{"cmd": "stop"}\n')
        first.stdin.close()
        assert first.wait(timeout=120) == 0
    finally:
        first.kill()
        first.wait()
    later = _worker(out)
    stdout, stderr = later.communicate(ROUND + '{"cmd": "stop"}\n', timeout=120)
    assert later.returncode == 2 and stdout == "" and f"{out} already holds a worker's rounds" in stderr
    records = [json.loads(line) for line in (out / "round-000" / RESULTS).read_text().splitlines()]
    assert len(records) == 1


# -- a run ID is a safe token whatever the host is called ---------------------------------------------

HOSTILE_HOST = "h<i>/x</i>\n\x1b[2J(//e"


def test_a_hostile_host_name_makes_one_plain_directory(tmp_path, monkeypatch, capfd):
    """A host so named made nested directories whose names held a newline and an ESC."""
    monkeypatch.setattr(socket, "gethostname", lambda: HOSTILE_HOST)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--case", OK_CASE, "--iters", "5"]) == 0
    (run_dir,) = (tmp_path / "reports").iterdir()
    assert run_dir.is_dir() and re.fullmatch(r"[0-9]{8}-[0-9]{6}-[A-Za-z0-9-]+-[0-9a-f]{4}", run_dir.name)
    assert json.loads((run_dir / "run.json").read_text())["run_id"] == run_dir.name


def test_host_tokens_keep_a_plain_name_and_keep_two_changed_ones_apart():
    assert host_token("node7.cluster.example") == "node7"
    assert host_token("") == "host"
    changed = {host_token(h) for h in (HOSTILE_HOST, HOSTILE_HOST.replace("/", "?"), "a" * 300, "a" * 301)}
    assert len(changed) == 4
    assert all(re.fullmatch(r"[A-Za-z0-9-]{1,32}", t) for t in changed)


# -- no output of a gate lands in the repository it measures ------------------------------------------

@pytest.mark.parametrize("option, where, why", [
    ("--markdown", "harness/__init__.py", "is a file git tracks in the repository being measured"),
    ("--out", "harness", "holds"),
    ("--out", ".", "is the repository being measured"),
    ("--out", "..", "is a directory that holds the repository"),
])
def test_a_gate_refuses_an_output_over_the_repository_it_measures(tmp_repo, tmp_path, capfd, option, where, why):
    """`gate --markdown harness/__init__.py` appended the gate's table to the candidate's tracked source."""
    source = (tmp_repo / "harness" / "__init__.py").read_bytes()
    before = sorted(p.name for p in tmp_path.iterdir())
    given = {"--out": str(tmp_path / "g"), "--markdown": None, option: str(tmp_repo / where)}
    argv = ["gate", "--base", "HEAD", "--case", OK_CASE, "--repo", str(tmp_repo)]
    argv += [x for opt, path in given.items() if path for x in (opt, path)]
    assert main(argv) == 2
    err = capfd.readouterr().err
    assert f"{option} {os.path.abspath(tmp_repo / where)} {why}" in err
    assert (tmp_repo / "harness" / "__init__.py").read_bytes() == source
    assert git(tmp_repo, "status", "--porcelain") == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no gate.json, no claim, no --out made


def test_a_gate_output_inside_the_repository_where_git_tracks_nothing_is_not_refused(tmp_repo):
    assert over_repository(tmp_repo, tmp_repo / "reports" / "gate-1") == ""
    assert over_repository(tmp_repo, tmp_repo.parent / "elsewhere") == ""


# -- a claim on a full disk ------------------------------------------------------------------------

def test_a_claim_on_a_full_disk_names_its_file_and_leaves_none(tmp_path, monkeypatch, capfd):
    """`[Errno 28] No space left on device` named no file, and an empty .critpath-claim stayed."""
    real_write = os.write

    def full_for_claims(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(CLAIM_FILE):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_for_claims)
    kept = tmp_path / "kept"
    kept.mkdir()
    for out in (tmp_path / "new", kept):
        assert main(["run", "--case", OK_CASE, "--iters", "5", "--out", str(out)]) == 2
        assert f"could not claim {out}: {out / CLAIM_FILE}: No space left on device" in capfd.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and list(kept.iterdir()) == []


# -- a refused start leaves --out as it found it -------------------------------------------------------

def test_a_start_refused_after_its_fingerprint_leaves_the_out_as_it_was(tmp_path, monkeypatch, capfd):
    """A start whose run.json could not be written left fingerprint.json, and the retry was refused
    as "already holds a run"."""
    def full(self, data):
        raise OSError(errno.ENOSPC, f"could not write {self.path / 'run.json'}: No space left on device")

    monkeypatch.setattr(RunDir, "write_meta", full)
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (tmp_path / "new", empty):
        assert main(["run", "--case", OK_CASE, "--iters", "5", "--out", str(out)]) == 2
        assert "No space left on device" in capfd.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"] and list(empty.iterdir()) == []
    monkeypatch.undo()
    assert main(["run", "--case", OK_CASE, "--iters", "5", "--out", str(empty)]) == 0  # the retry runs


def test_a_run_json_link_to_nothing_is_refused_before_the_start_writes(tmp_path, capfd):
    out = tmp_path / "L4"
    out.mkdir()
    (out / "run.json").symlink_to(tmp_path / "victim")
    assert main(["run", "--case", OK_CASE, "--iters", "5", "--out", str(out)]) == 2
    assert sorted(p.name for p in out.iterdir()) == ["run.json"] and not (tmp_path / "victim").exists()


# -- the outputs of one command are one set ---------------------------------------------------------

def _run_of(path, family):
    path.mkdir()
    lines = (ROOT / "tests" / "fixtures" / "run_mixed" / RESULTS).read_text().splitlines(keepends=True)
    (path / RESULTS).write_text("".join(line for line in lines if f'"family":"{family}"' in line))
    return path


# records without run.json: a run that is not whole, so its report exits 1 (and says so at its top)
REPORT_OF_RECORDS_ONLY = 1


def _files(path):
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _fill_after_one_output(monkeypatch):
    """From now on the disk fills once one temporary of a command's outputs was written: the fsync
    of the next fails, as a full disk's delayed allocation makes it."""
    real_fsync, synced = os.fsync, []

    def fsync(fd):
        if temps.is_temp_name(os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))):
            synced.append(fd)
            if len(synced) > 1:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_a_report_on_a_full_disk_leaves_the_previous_report_whole(tmp_path, capfd, monkeypatch):
    """`report A --out r` on a full disk made report.md A's while report.html stayed base's."""
    base, other, out = _run_of(tmp_path / "base", "allreduce"), _run_of(tmp_path / "other", "pipeline"), tmp_path / "r"
    assert main(["report", str(base), "--out", str(out)]) == REPORT_OF_RECORDS_ONLY
    before = _files(out)
    assert {"report.md", "report.html", "plots/allreduce_latency.png"} <= set(before)
    with monkeypatch.context() as full:
        _fill_after_one_output(full)
        assert main(["report", str(other), "--out", str(out)]) == 2
    err = capfd.readouterr().err
    assert f"could not write {out}" in err and "No space left on device" in err
    assert _files(out) == before  # every file the earlier report's, and no temporary


def test_a_report_removes_the_plots_an_earlier_report_left_and_keeps_other_files(tmp_path):
    base, other, out = _run_of(tmp_path / "base", "allreduce"), _run_of(tmp_path / "other", "pipeline"), tmp_path / "r"
    assert main(["report", str(base), "--out", str(out)]) == REPORT_OF_RECORDS_ONLY
    (out / "plots" / "mine.png").write_bytes(b"not critpath's")
    (out / "plots" / "notes.txt").write_text("mine too\n")
    assert main(["report", str(other), "--out", str(out)]) == REPORT_OF_RECORDS_ONLY
    assert sorted(p.name for p in (out / "plots").iterdir()) == ["mine.png", "notes.txt", "pipeline_bubble.png"]


def test_gate_outputs_on_a_full_disk_are_the_previous_set_whole(tmp_path, monkeypatch):
    out, summary = tmp_path / "g", tmp_path / "summary.md"
    summary.write_text("earlier steps\n")
    write_outputs(GateResult("ab", "p50_ns", "process", Policy()), out, summary)
    before, summed = _files(out), summary.read_bytes()
    assert set(before) == {"gate.json", "gate.xml", "gate.md"}
    failed = GateResult("ab", "p50_ns", "process", Policy(), error="another result")
    with monkeypatch.context() as full:
        _fill_after_one_output(full)
        with pytest.raises(OSError, match="could not write .*No space left on device"):
            write_outputs(failed, out, summary)
    assert _files(out) == before and summary.read_bytes() == summed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g", "summary.md"]
