"""What a result was measured on: host, CPU, kernel, Python, torch, backend, NCCL, GPUs, the
project's commit and the environment variables that change behaviour.

Missing pieces are facts, not errors: no GPU gives ``{"present": false, "reason": ...}``.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Optional

import harness
from harness.core.fingerprintfile import LOCAL, SCHEMA
from harness.core.git import run_git
from harness.core.scale import MAX_WORLD
from harness.run import nodefacts
from harness.run.launchenv import env_int

# Variables that change what a collective or the allocator does.
ENV_PATTERNS = re.compile(
    r"^(NCCL_|GLOO_|TORCH_|PYTORCH_|CUDA_|OMP_NUM_THREADS$|MKL_NUM_THREADS$|OPENBLAS_|"
    r"MASTER_ADDR$|MASTER_PORT$|WORLD_SIZE$|LOCAL_WORLD_SIZE$|SLURM_JOB_|SLURM_NNODES$|SLURM_NTASKS$|"
    r"GROUP_WORLD_SIZE$|TORCHELASTIC_RUN_ID$|CRITPATH_)"
)
# The checkout holding the harness package (its baselines/, its git commit), wherever a module sits in it.
PROJECT_ROOT = Path(harness.__file__).resolve().parent.parent


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def library_versions() -> dict:
    """Installed version of each library critpath runs on, from its own declared requirements
    (pyproject.toml, through the installed metadata), so the list is never kept by hand. Test and
    optional extras are left out: they do not run in a measurement."""
    try:
        requires = importlib.metadata.requires("critpath") or []
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        return {}
    # A requirement starts with its distribution name (PEP 508): "numpy>=1.24", "pyzmq>=25.0".
    names = sorted({re.match(r"[A-Za-z0-9._-]+", text).group(0) for text in requires if "extra ==" not in text})
    return {name: _version(name) for name in names if name != "torch"}  # torch has its own field


def git_commit(root: Path = PROJECT_ROOT) -> dict:
    try:
        commit = run_git(root, "rev-parse", "HEAD", timeout=10, check=True).stdout.strip()
        dirty = run_git(root, "status", "--porcelain", "--untracked-files=no", timeout=10, check=True).stdout.strip()
        return {"commit": commit, "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "reason": "not a git checkout; version " + str(_version("critpath"))}


def gpus() -> dict:
    """GPUs through NVML (nvidia-ml-py): name, memory, driver, NVLink state, and each GPU's node
    facts (harness.run.nodefacts: ECC, retired pages or remapped rows, clock event reasons, clocks,
    PCIe link max and now). A call a GPU does not support leaves its field None with the reason."""
    try:
        import pynvml  # here, in a try: a broken nvidia-ml-py is "no GPU" in the fingerprint, not a failed run
    except ImportError as exc:
        return {"present": False, "reason": f"nvidia-ml-py not importable: {exc}"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return {"present": False, "reason": f"NVML unavailable: {exc}"}
    try:
        return _nvml_gpus(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # a GPU lost mid-read must not cost the run its fingerprint
            pass


def _nvml_gpus(pynvml) -> dict:
    system: dict = {}
    nodefacts.record_call(system, ["driver_version"], "nvmlSystemGetDriverVersion",
                          lambda: _text(pynvml.nvmlSystemGetDriverVersion()))
    nodefacts.record_call(system, ["count"], "nvmlDeviceGetCount", lambda: int(pynvml.nvmlDeviceGetCount()))
    if system["count"] is None:
        return {"present": False, "reason": f"NVML gives no device count: {system['count_reason']}", **system}
    devices = []
    for i in range(system["count"]):
        info: dict = {"index": i}
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
        except Exception as exc:  # GPU is lost, no permission ...
            info["reason"] = nodefacts.why(exc, "nvmlDeviceGetHandleByIndex")
            devices.append(info)
            continue
        nodefacts.record_call(info, ["name"], "nvmlDeviceGetName", lambda: _text(pynvml.nvmlDeviceGetName(h)))
        nodefacts.record_call(info, ["uuid"], "nvmlDeviceGetUUID", lambda: _text(pynvml.nvmlDeviceGetUUID(h)))
        nodefacts.record_call(info, ["memory_total_bytes"], "nvmlDeviceGetMemoryInfo",
                              lambda: int(pynvml.nvmlDeviceGetMemoryInfo(h).total))
        info.update(nodefacts.read(pynvml, h))
        info.update(_nvlinks(pynvml, h))
        devices.append(info)
    return {
        "present": bool(devices),
        **system,
        "devices": devices,
        **({} if devices else {"reason": "NVML found no devices"}),
    }


def _nvlinks(pynvml, h) -> dict:
    """Active NVLinks: links are asked in order until the GPU says there are no more. A GPU that
    answers for no link at all (PCIe-only, or NVLink not supported) has nvlink_active None with the
    reason, not 0: a pin on 18 links cannot be judged from it."""
    links = []
    error = None
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            links.append(int(pynvml.nvmlDeviceGetNvLinkState(h, link)))
        except Exception as exc:  # past the GPU's last link, or not supported at all
            error = exc
            break
    if not links and error is not None:
        return {"nvlink_active": None, "nvlink_active_reason": nodefacts.why(error, "nvmlDeviceGetNvLinkState"),
                "nvlink_links": 0}
    return {"nvlink_active": sum(links), "nvlink_links": len(links)}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nccl_version() -> Optional[str]:
    try:
        import torch  # 1.5 s, which a fingerprint of a torch-free run (rpc, kv_alloc) does not pay

        if not torch.cuda.is_available():
            return None
        version = torch.cuda.nccl.version()
        return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    except Exception:
        return None


# Where a launcher says which node a process is on: torchrun's agent rank, Slurm's node index.
NODE_RANK_VARS = ("GROUP_RANK", "SLURM_NODEID")
# How many ranks a launcher starts on this node: torchrun's, then Slurm's (--ntasks-per-node).
LOCAL_WORLD_VARS = ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE")


def _first_set(env, names: tuple[str, ...]) -> Optional[str]:
    return next((name for name in names if env.get(name, "") != ""), None)


def node_rank(env=os.environ) -> Optional[tuple[str, int]]:
    """The launcher's node rank, as (variable, value): the first of NODE_RANK_VARS set, a node of a
    job of at most MAX_WORLD ranks (UsageError naming the variable otherwise); None without one."""
    var = _first_set(env, NODE_RANK_VARS)
    return None if var is None else (var, env_int(env, var, 0, MAX_WORLD - 1))


def local_world_var(env=os.environ) -> Optional[str]:
    """The variable that says how many ranks the launcher starts on this node: the first of LOCAL_WORLD_VARS set."""
    return _first_set(env, LOCAL_WORLD_VARS)


def local_world_size(env=os.environ) -> Optional[int]:
    """Ranks the launcher starts on this node (``local_world_var``), 1 to MAX_WORLD."""
    var = local_world_var(env)
    return None if var is None else env_int(env, var, 1, MAX_WORLD)


def launcher_layout(env=os.environ) -> tuple[Optional[tuple[str, int]], Optional[int]]:
    """The node rank and local world size, each refused (UsageError) when it is no integer in its
    range: a joined rank reads them before the ranks meet, so a bad one fails that rank alone
    instead of the identity every rank sends rank 0 later."""
    return node_rank(env), local_world_size(env)


def node_key(env=os.environ) -> str:
    """Identifies this process's node: the launcher's node rank when there is one (two torchrun
    agents on one host are two nodes), else the host name."""
    host = socket.gethostname()
    found = node_rank(env)
    return host if found is None else f"{host}#{found[0]}={found[1]}"


def rank_identity(rank: int, local_rank: int, env=os.environ) -> dict:
    """What rank 0 needs to know about one rank to describe the job's layout."""
    found, local_world = launcher_layout(env)
    return {
        "rank": rank,
        "local_rank": local_rank,
        "host": socket.gethostname(),
        "node": node_key(env),
        "node_rank": None if found is None else found[1],
        "local_world_size": local_world,
        "pid": os.getpid(),
        "torch": _version("torch"),
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
    }


def node_layout(identities: list[dict]) -> dict:
    """The job's node layout from every rank's identity (in rank order): nodes in order of their
    first rank, ranks per node, host names, local ranks, and whether ranks are node-major
    (contiguous per node, which the hierarchical cost models assume)."""
    order: list[str] = []
    members: dict[str, list[int]] = {}
    for ident in identities:
        if ident["node"] not in members:
            order.append(ident["node"])
            members[ident["node"]] = []
        members[ident["node"]].append(ident["rank"])
    node_index = {key: i for i, key in enumerate(order)}
    node_of_rank = [node_index[ident["node"]] for ident in identities]
    ranks_per_node = [len(members[key]) for key in order]
    return {
        "nodes": len(order),
        "ranks_per_node": ranks_per_node,
        "uniform": len(set(ranks_per_node)) == 1,
        "node_major": all(node_of_rank[i] <= node_of_rank[i + 1] for i in range(len(node_of_rank) - 1)),
        "hosts": [identities[members[key][0]]["host"] for key in order],
        "node_keys": order,
        "node_of_rank": node_of_rank,
        "local_ranks": [ident["local_rank"] for ident in identities],
        "ranks": identities,
    }


def collect(backend: str, world: int, launch: str, layout: Optional[dict] = None) -> dict:
    """``layout``: ``node_layout`` of a joined job; a local launch is ``world`` ranks on this host."""
    if layout is None:
        host = socket.gethostname()
        layout = {
            "nodes": 1, "ranks_per_node": [world], "uniform": True, "node_major": True, "hosts": [host],
            "node_keys": [host], "node_of_rank": [0] * world, "local_ranks": list(range(world)), "ranks": None,
        }
    uname = platform.uname()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "schema": SCHEMA,
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "kernel": f"{uname.system} {uname.release}",
        "machine": uname.machine,
        "python": sys.version.split()[0],
        "torch": _version("torch"),
        "critpath": _version("critpath"),
        "libraries": library_versions(),
        "backend": backend,
        "world": world,
        "launch": launch,
        "layout": layout,
        # Asking torch for its NCCL version costs a torch import (about a second here), which a
        # torch-free gloo/CPU process never pays otherwise; NCCL is not in play there anyway.
        "nccl_version": nccl_version() if backend == "nccl" or "torch" in sys.modules else None,
        "gpus": gpus(),
        "git": git_commit(),
        "env": {k: v for k, v in sorted(os.environ.items()) if ENV_PATTERNS.match(k)},
    }


if __name__ == "__main__":
    # ``python -m harness.run.fingerprint``: what a run on this machine would record about it (one
    # local rank, gloo), GPUs and their node facts included.
    import json

    print(json.dumps(collect("gloo", 1, LOCAL), indent=2))
