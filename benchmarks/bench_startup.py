"""asv: how long commands that measure nothing take, start to exit, as a user runs them.

Target (issue: start-up): each <= 1 s on a 2-core runner. The figure is the median wall time of
REPEATS fresh ``python -m harness ...`` processes; what dominates it is imports, which is why no
such command may import torch, scipy.stats or matplotlib before it needs them
(tests/test_project.py keeps that true without timing anything).

    asv run --environment existing:same --set-commit-hash $(git rev-parse HEAD) --bench Startup
"""
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "fixtures" / "run_mixed"
NCCL_LOG = ROOT / "tests" / "fixtures" / "nccl_tests" / "all_reduce_h100.txt"
REPEATS = 5

COMMANDS = {
    "help": ["--help"],
    "list": ["list"],
    "show": ["show", str(RUN)],
    "model": ["model", "--ranks", "8,16,1024,16384", "--no-plots", "--out", "{tmp}/model"],
    "baselines": ["baselines"],
    "accept_run": ["accept", "--profile", str(ROOT / "baselines" / "profiles" / "cpu-ci.yaml"), "--run", str(RUN),
                   "--no-report", "--out", "{tmp}/accept"],
    # The same verdict with its report: seven plots drawn, which no start-up work makes cheap.
    "accept_run_report": ["accept", "--profile", str(ROOT / "baselines" / "profiles" / "cpu-ci.yaml"), "--run",
                          str(RUN), "--out", "{tmp}/accept"],
    "import_nccl_tests": ["import-nccl-tests", str(NCCL_LOG), "--collective", "all_reduce", "--out", "{tmp}/imported"],
}


class Startup:
    timeout = 300
    params = (list(COMMANDS),)
    param_names = ["command"]

    def track_wall_s(self, command):
        walls = []
        for _ in range(REPEATS):
            with tempfile.TemporaryDirectory() as tmp:
                argv = [a.replace("{tmp}", tmp) for a in COMMANDS[command]]
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "harness", *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=False)
                walls.append(time.perf_counter() - start)
        return statistics.median(walls)

    track_wall_s.unit = "s"
