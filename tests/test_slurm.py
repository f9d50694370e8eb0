"""The sbatch examples under a real Slurm: examples/slurm/local-cluster.sh starts munged,
slurmctld and slurmd on this host (node localhost at 127.0.0.1, its own munge key and ports),
and each example is submitted with sbatch as a user would. Skipped, with the reason, where
Slurm is not installed, not run as root, or the cluster cannot start."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, free_port
from harness.core.store import load_records

SCRIPT = ROOT / "examples" / "slurm" / "local-cluster.sh"
TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "sinfo")
JOB_TIMEOUT_S = 120
DONE_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
               "DEADLINE"}
# A job inherits the submitter's environment: an outer launcher's variables would make the
# ranks join the wrong job.
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
               "TORCHELASTIC_RUN_ID", "OUT", "FAMILIES", "SIZES", "NPROC_PER_NODE", "RDZV_PORT")

missing = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing), reason=f"Slurm/munge not installed ({', '.join(missing)} not on PATH; Debian: "
                                             "apt-get install slurmctld slurmd slurm-client munge)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="a one-host Slurm needs root (slurmd starts job steps as the submitter)"),
]


@pytest.fixture(scope="module")
def cluster():
    # munged wants its socket's directory searchable by all, which pytest's 0700 tmp dirs are not.
    parent = Path(tempfile.mkdtemp(prefix="critpath-slurm-test-"))
    parent.chmod(0o755)
    state = parent / "cluster"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in LAUNCH_VARS}
    env.update(CRITPATH_SLURM_DIR=str(state), CRITPATH_SLURMCTLD_PORT=str(free_port()),
               CRITPATH_SLURMD_PORT=str(free_port()), SLURM_CONF=str(state / "slurm.conf"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    start = subprocess.run([str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=90)
    if start.returncode != 0:
        shutil.rmtree(parent, ignore_errors=True)
        pytest.skip(f"one-host Slurm did not start: {(start.stdout + start.stderr)[-1500:]}")
    pids = [int((state / "run" / f"{d}.pid").read_text()) for d in ("munged", "slurmctld", "slurmd")]
    try:
        yield env
    finally:
        stop = subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=60)
        shutil.rmtree(parent, ignore_errors=True)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert not state.exists()
    assert [p for p in pids if Path(f"/proc/{p}").exists()] == [], "a daemon outlived stop"


def _job_state(job_id: str, env) -> dict:
    out = subprocess.run(["scontrol", "show", "job", job_id, "-o"], env=env, capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def _sbatch(env, script: str, *sbatch_args: str, **job_env: str):
    """Submits ``script`` from the project root, waits for the job, returns its final fields and log."""
    log = Path(env["CRITPATH_SLURM_DIR"]).parent / f"{Path(script).stem}-%j.log"
    proc = subprocess.run(["sbatch", "--parsable", f"--output={log}", *sbatch_args, script], cwd=ROOT,
                          env={**env, **job_env}, capture_output=True, text=True, timeout=30, check=True)
    job_id = proc.stdout.strip().split(";")[0]
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while (job := _job_state(job_id, env))["JobState"] not in DONE_STATES:
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], env=env, timeout=30)
            break
        time.sleep(0.2)
    log = Path(str(log).replace("%j", job_id))
    text = log.read_text() if log.exists() else "(no job output)"
    return job_id, job, f"job {job_id}: {job['JobState']} reason {job.get('Reason')}\n{text}"


def _check_run(out: Path, job_id: str, world: int, logs: str):
    records = load_records(out)
    assert records, logs
    assert all(r.ok and r.world == world and r.reduction == "max_over_ranks" for r in records), logs
    assert all(len(r.extra["rank_reports"]) == world for r in records)  # every rank's report reached rank 0
    fingerprint = json.loads((out / "fingerprint.json").read_text())
    assert fingerprint["env"]["SLURM_JOB_ID"] == job_id  # measured inside this Slurm job, not beside it
    assert fingerprint["launch"] == "joined"  # the launcher's processes were the ranks, none spawned by critpath
    return records, fingerprint["layout"]


def test_two_slurm_tasks_are_two_ranks(cluster, tmp_path):
    out = tmp_path / "run"
    job_id, job, logs = _sbatch(cluster, "examples/slurm/critpath-1x2-cpu.sbatch", OUT=str(out))
    assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0"), logs
    records, layout = _check_run(out, job_id, 2, logs)
    assert len(records) == 3 * 4  # native, ring, tree at the example's 4 sizes
    assert layout["nodes"] == 1 and layout["node_of_rank"] == [0, 0] and layout["local_ranks"] == [0, 1]
    assert [r["node"] for r in layout["ranks"]] == [f"{socket.gethostname()}#SLURM_NODEID=0"] * 2
    env = json.loads((out / "fingerprint.json").read_text())["env"]
    assert (env["MASTER_ADDR"], env["GLOO_SOCKET_IFNAME"]) == ("127.0.0.1", "lo")


def test_multi_node_example_runs_its_torchrun_agent_under_srun(cluster, tmp_path):
    # The 2x8 GPU example, cut down to what this host has: one node, 2 ranks, no GPUs. Its body
    # (head node from the node list, srun starting one torchrun agent, c10d rendezvous) is the
    # same as on a cluster.
    out = tmp_path / "run"
    job_id, job, logs = _sbatch(cluster, "examples/slurm/critpath-2x8.sbatch", "--nodes=1", "--gpus-per-node=0",
                                "--cpus-per-task=2", OUT=str(out), NPROC_PER_NODE="2", FAMILIES="allreduce", SIZES="8,1M")
    assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0"), logs
    records, layout = _check_run(out, job_id, 2, logs)
    assert len(records) == 3 * 2
    assert layout["nodes"] == 1 and layout["ranks_per_node"] == [2]
    assert [r["node_rank"] for r in layout["ranks"]] == [0, 0]  # torchrun's GROUP_RANK
