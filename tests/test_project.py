"""Project-level promises: the README's commands are what CI runs, and asv can load the suite."""
import re
import subprocess
import sys

from conftest import ROOT


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_opens_with_run_and_test_commands():
    run_cmd, test_cmd = _readme_commands()[:2]
    assert run_cmd.endswith("critpath run")
    assert "pytest" in test_cmd
    # Never a bare torch requirement: on a CPU box that pulls a multi-GB CUDA build.
    assert "torch==" in run_cmd and "torch==" in test_cmd


def test_ci_runs_the_readme_test_command():
    test_cmd = _readme_commands()[1]
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


def test_asv_check_passes():
    proc = subprocess.run(
        [sys.executable, "-m", "asv", "check", "-E", "existing:same"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No problems found" in proc.stdout
