"""``accept --run`` on a run directory that cannot be written: its outputs are claimed and checked
before the verdict is printed, so the refusal comes first and nothing says PASS."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
RUN = FIXTURES / "run_mixed"
PROFILE = {
    "schema": "critpath.accept/1", "name": "t", "world": 2, "nodes": 1,
    "checks": [{"name": "8 B p99", "case": "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,world=2",
                "statistic": "p99_us", "max": 1000, "source": "test bound A"}],
}


@pytest.fixture
def read_only_run(tmp_path):
    """A copy of a passing run in a directory no process can write: a read-only bind mount when this
    user may mount (root, whom file modes do not stop), the directory's mode 0o555 otherwise."""
    source = tmp_path / "source"
    shutil.copytree(RUN, source)
    if os.geteuid() != 0:
        source.chmod(0o555)
        yield source
        source.chmod(0o755)
        return
    view = tmp_path / "view"
    view.mkdir()
    bind = subprocess.run(["mount", "--bind", str(source), str(view)], capture_output=True, text=True)
    if bind.returncode != 0:
        pytest.skip(f"mount --bind not permitted here: {bind.stderr.strip()}")
    try:
        ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], capture_output=True, text=True)
        if ro.returncode != 0:
            pytest.skip(f"a read-only remount is not permitted here: {ro.stderr.strip()}")
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


@pytest.mark.parametrize("report", [True, False], ids=["report", "no-report"])
def test_an_unwritable_run_directory_is_refused_before_any_verdict(tmp_path, read_only_run, capsys, report):
    with pytest.raises(OSError):
        (read_only_run / "probe").write_text("x")  # the directory genuinely refuses a write
    profile = tmp_path / "p.yaml"
    profile.write_text(json.dumps(PROFILE))
    capsys.readouterr()
    code = main(["accept", "--profile", str(profile), "--run", str(read_only_run), *([] if report else ["--no-report"])])
    printed = capsys.readouterr()
    assert code == 2
    assert "PASS" not in printed.out and "acceptance t:" not in printed.out, printed.out
    assert f"could not claim {read_only_run}" in printed.err, printed.err
    # the same run judged with a writable --out passes: the refusal was the directory's alone
    out = tmp_path / "out"
    assert main(["accept", "--profile", str(profile), "--run", str(read_only_run), "--out", str(out),
                 *([] if report else ["--no-report"])]) == 0
    assert json.loads((out / "acceptance.json").read_text())["verdict"] == "PASS"


def test_an_output_refused_as_an_input_is_said_before_any_verdict(tmp_path, capsys):
    """report.md in --out that is the profile itself: refused (exit 2) before the verdict is printed."""
    out = tmp_path / "out"
    out.mkdir()
    profile = out / "report.md"
    profile.write_text(json.dumps(PROFILE))
    capsys.readouterr()
    code = main(["accept", "--profile", str(profile), "--run", str(RUN), "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 2 and "is an input of this command" in printed.err, printed.err
    assert "PASS" not in printed.out, printed.out
    assert not (out / "acceptance.json").exists()


@pytest.mark.parametrize("report", [True, False], ids=["report", "no-report"])
def test_a_full_disk_at_the_outputs_gives_no_verdict_that_says_exit_0(tmp_path, capsys, monkeypatch, report):
    """The outputs are written before the verdict is printed: ENOSPC while writing acceptance.json
    (and the report, one set) says the verdict could not be recorded, exit 2, and no PASS."""
    import errno

    from harness.core import atomic

    def full(files):
        path = next(iter(files))
        raise OSError(errno.ENOSPC, f"could not write {path}: No space left on device")

    monkeypatch.setattr(atomic, "write_set", full)
    profile = tmp_path / "p.yaml"
    profile.write_text(json.dumps(PROFILE))
    out = tmp_path / "out"
    capsys.readouterr()
    code = main(["accept", "--profile", str(profile), "--run", str(RUN), "--out", str(out),
                 *([] if report else ["--no-report"])])
    printed = capsys.readouterr()
    assert code == 2, printed
    assert "PASS" not in printed.out and "exit 0" not in printed.out and "report:" not in printed.out, printed.out
    assert "acceptance t: the verdict could not be recorded, so none is given (could not write " in printed.err
    assert "No space left on device" in printed.err, printed.err
    assert not (out / "acceptance.json").exists()
