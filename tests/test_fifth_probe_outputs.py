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
from harness.core.claim import CLAIM_FILE
from harness.core.git import over_repository
from harness.core.options import UsageError
from harness.core.store import RESULTS, RunDir, append_record, host_token

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
