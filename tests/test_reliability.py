"""Inputs that cannot hurt: each malformed input is an error naming file, line or field (exit 2),
never a traceback, a hang or a silently loosened threshold."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from conftest import ROOT, RUN_FINGERPRINT

from harness.cli import main


def test_a_reader_that_leaves_the_pipe_early_is_not_an_error():
    # `critpath list | head -1`: exit 0 and nothing on stderr.
    proc = subprocess.Popen([sys.executable, "-m", "harness", "list"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # the reader leaves
    code = proc.wait(timeout=60)
    err = proc.stderr.read().decode()
    assert code == 0 and "Broken pipe" not in err and "Traceback" not in err, err


PROFILE = """name: dup
world: 2
cases: ["selftest/fault_rank=0,mode=noop,world=1"]
checks:
  - name: noop p99
    case: "selftest/fault_rank=0,mode=noop,world=1"
    statistic: p99_ns
    max: 1000
    max: 100000000
    source: test
"""


def test_a_doubled_key_in_a_profile_is_refused_naming_both_lines(tmp_path, capsys):
    path = tmp_path / "dup.yaml"
    path.write_text(PROFILE)
    assert main(["accept", "--profile", str(path), "--run", str(ROOT / "tests" / "fixtures" / "run_mixed"),
                 "--out", str(tmp_path / "out")]) == 2
    assert f"{path}:9: duplicate key 'max' (first at line 8)" in capsys.readouterr().err


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    from harness.gate.config import ConfigError, load_config

    path = tmp_path / "bomb.yaml"
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]  # 9**9 strings if expanded
    path.write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb.yaml:2: an alias \(\*a0\) is not accepted"):
        load_config(path)
    assert time.perf_counter() - start < 5


def test_yaml_that_is_not_utf8_is_named(tmp_path):
    from harness.claims.baselines import BaselineError, load_file

    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"schema: critpath.baselines/1\narticle: caf\xe9\n")
    with pytest.raises(BaselineError, match=r"latin1.yaml:2: not UTF-8"):
        load_file(path)


def test_a_line_nested_too_deep_and_a_run_json_that_is_not_utf8_are_named(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    assert main(["show", str(run)]) == 2
    from harness.core.store import MAX_RECORD_BYTES, RECORD_LIMITS

    assert f"{run / 'results.jsonl'}:1: nested 100000 deep; at most {RECORD_LIMITS.depth} levels are read" in \
        capsys.readouterr().err

    (run / "results.jsonl").write_bytes(b'{"a": "' + b"x" * MAX_RECORD_BYTES + b'"}\n')
    assert main(["show", str(run)]) == 2
    assert f"{run / 'results.jsonl'}:1: a line of more than {MAX_RECORD_BYTES} bytes" in capsys.readouterr().err
    (run / "results.jsonl").write_text("")
    (run / "run.json").write_bytes(b'{"run_id": "caf\xe9"}')
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 2
    assert f"{run / 'run.json'}: not UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e9"])
def test_a_timeout_that_no_timer_can_hold_is_refused(value, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--case", "selftest/fault_rank=0,mode=noop,world=1", "--timeout", value])
    assert exit_.value.code == 2 and "must be a finite number of seconds" in capsys.readouterr().err


def test_a_sweep_too_long_to_mean_anything_is_refused_before_it_is_built(tmp_path, capsys):
    start = time.perf_counter()
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--families", "allreduce", "--sizes", "1:1G:+1", "--out", str(tmp_path / "run")])
    assert exit_.value.code == 2 and "gives 1073741824 sizes; at most 4096" in capsys.readouterr().err
    assert time.perf_counter() - start < 5  # refused, not expanded (it used to exhaust memory)
    assert main(["run", "--families", "allreduce", "--sizes", "4:16K:+4", "--out", str(tmp_path / "run")]) == 2
    assert "a run holds at most 10000" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# -- runs that survive being killed ------------------------------------------------------------

def _kill_loop():
    import importlib.util

    spec = importlib.util.spec_from_file_location("kill_loop", ROOT / "examples" / "kill_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("signal_name, state", [("KILL", "running"), ("TERM", "interrupted")])
def test_a_run_killed_during_an_rpc_case_leaves_no_process_listener_or_directory(tmp_path, signal_name, state):
    import argparse
    import random

    loop = _kill_loop()
    random.seed(0)
    args = argparse.Namespace(signal=signal_name, kill_rank=False, families="rpc", max_delay=8.0)
    row = loop.trial(args, 0, tmp_path)  # killed 2-8 s in: an echo server (or sockperf) is up
    assert row["processes_left"] == 0 and row["listeners_left"] == 0 and row["pool_dirs_left"] == 0, row
    assert row["show_exit"] in (0, 1) and row["records"] >= 0 and row["state"] == state, row


def test_a_killed_or_empty_run_is_never_shown_or_judged_as_a_whole_one(tmp_path, capsys):
    import json
    import shutil

    from conftest import derived_record

    from harness.core.store import RunDir

    run = RunDir(tmp_path / "killed", "killed")
    cases = ["selftest/fault_rank=0,mode=noop,world=1", "selftest/fault_rank=0,mode=spin,spin_iters=10,world=1"]
    run.write_fingerprint(RUN_FINGERPRINT)  # written first, as a run does
    run.write_meta({"schema": "critpath.run/1", "run_id": "killed", "state": "running", "cases_total": 2})
    assert main(["show", str(run.path)]) == 1  # killed before its first record: no results file yet
    assert "incomplete: 0 of 2 cases, run.json says running" in capsys.readouterr().err
    run.results.touch()  # an empty results file reads the same
    assert main(["show", str(run.path)]) == 1  # nothing recorded yet: not "0 ok, 0 failed"
    assert "incomplete: 0 of 2 cases, run.json says running" in capsys.readouterr().err
    run.append(derived_record(cases[0], [100, 110, 120], run_id="killed"))
    assert main(["show", str(run.path)]) == 1
    assert "incomplete: 1 of 2 cases" in capsys.readouterr().err
    # compare refuses a side that did not finish
    whole = tmp_path / "whole"
    shutil.copytree(run.path, whole)
    meta = json.loads((whole / "run.json").read_text())
    (whole / "run.json").write_text(json.dumps({**meta, "state": "finished", "cases_total": 1}))
    assert main(["show", str(whole)]) == 0
    assert main(["compare", str(whole), str(run.path), "--out", str(tmp_path / "cmp")]) == 2
    assert "incomplete: 1 of 2 cases" in json.loads((tmp_path / "cmp" / "gate.json").read_text())["error"]
    # the report says so where it starts
    # and its exit, as show's: a script that reads only the exit is told too
    assert main(["report", str(run.path), "--out", str(tmp_path / "report")]) == 1
    assert "INCOMPLETE RUN (killed: incomplete: 1 of 2 cases" in (tmp_path / "report" / "report.md").read_text()
    assert "critpath report: killed: incomplete: 1 of 2 cases" in capsys.readouterr().err


def test_a_start_that_fails_on_a_full_disk_names_the_file_leaves_nothing_and_can_be_retried(tmp_path, monkeypatch,
                                                                                            capsys):
    import errno
    import os

    from harness.core import store

    out = tmp_path / "run"
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.os, "fsync", full)
    case = "selftest/fault_rank=0,mode=noop,world=1"
    assert main(["run", "--case", case, "--out", str(out)]) == 2
    assert f"could not write {out / 'fingerprint.json'}: No space left on device" in capsys.readouterr().err
    # no temporary left to make the directory look taken, nor the directory the start made
    assert not out.exists()
    monkeypatch.setattr(store.os, "fsync", real_fsync)
    assert main(["run", "--case", case, "--out", str(out)]) == 0  # the retry with the same --out
    assert main(["run", "--case", case, "--out", str(out)]) == 2
    assert f"already holds a run ({out / 'results.jsonl'})" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("fault_rank", [0, 1])
def test_a_hang_record_names_the_rank_that_hung(tmp_path, fault_rank):
    import json

    out = tmp_path / "run"
    assert main(["run", "--case", f"selftest/fault_rank={fault_rank},mode=hang,world=2", "--timeout", "5",
                 "--out", str(out)]) == 1
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "timeout" and record["error"]["rank"] == fault_rank
    assert f"rank {fault_rank} hung in step (harness/families/selftest.py:" in record["error"]["message"]
    assert f"ranks [{1 - fault_rank}] were waiting for it in torch.distributed" in record["error"]["message"]


def test_a_run_killed_between_its_fingerprint_and_run_json_is_called_killed(tmp_path, capsys):
    # killed in that instant, a run left only fingerprint.json: readers said "no such results
    # file" and a retry into it "already holds a run", neither saying it was killed
    from harness.cli import main

    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "fingerprint.json").write_text("{}\n")
    assert main(["show", str(killed)]) == 2
    assert "holds only fingerprint.json, a run killed before it wrote run.json" in capsys.readouterr().err
    assert main(["run", "--case", "selftest/fault_rank=0,mode=noop,world=1", "--iters", "5",
                 "--out", str(killed)]) == 2
    assert "holds a run killed before it wrote run.json (only fingerprint.json)" in capsys.readouterr().err
    assert sorted(p.name for p in killed.iterdir()) == ["fingerprint.json"]
