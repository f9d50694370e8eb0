"""Shared fixtures: running critpath as a user would (a real subprocess) or in-process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` in a fresh process, from the project root, like a user."""
    full_env = {**os.environ, **(env or {})}
    # A test must never join an outer torchrun/Slurm job by accident.
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        full_env.pop(key, None)
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=ROOT, env=full_env,
        capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli
