"""sockperf (C, Mellanox/NVIDIA) TCP ping-pong on loopback: the reference the Python figures are
divided by, so "harness overhead" is a measured ratio rather than a claim.

sockperf prints one-way latency (RTT / 2) unless told otherwise; we pass ``--full-rtt`` so its
percentiles are round trips, like every figure of the rpc family. The server is started on a
free loopback port, checked ready by connecting to it, and killed after the client is done.
"""
from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Optional

PERCENTILE_LINE = re.compile(r"percentile\s+(\d+\.\d+)\s*=\s*([\d.]+)")
MIN_LINE = re.compile(r"<MIN> observation\s*=\s*([\d.]+)")
READY_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SockperfResult:
    rtt_p50_us: float
    rtt_p99_us: float
    rtt_min_us: float
    msg_bytes: int
    duration_s: int
    command: str


def available() -> Optional[str]:
    return shutil.which("sockperf")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"sockperf server exited with code {server.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"sockperf server not listening on 127.0.0.1:{port} within {READY_TIMEOUT_S:g} s")


def parse(output: str) -> tuple[dict[float, float], float]:
    percentiles = {float(p): float(v) for p, v in PERCENTILE_LINE.findall(output)}
    found = MIN_LINE.findall(output)
    if 50.0 not in percentiles or not found:
        raise ValueError(f"no percentiles in sockperf output: {output[-400:]!r}")
    return percentiles, float(found[-1])


def _dies_with_parent() -> list[str]:
    """A prefix that makes the command die with this process (util-linux setpriv sets the
    parent-death signal before exec): a preexec_fn would do it too, but is unsafe in a process
    with threads, which a rank is."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def tcp_pingpong(msg_bytes: int, duration_s: int = 1) -> SockperfResult:
    exe = available()
    if exe is None:
        raise FileNotFoundError("sockperf is not installed")
    port = _free_port()
    server = subprocess.Popen([*_dies_with_parent(), exe, "server", "--tcp", "-i", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, server)
        argv = [exe, "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(port), "-m", str(msg_bytes),
                "-t", str(duration_s), "--full-rtt"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=duration_s + 20)
        if done.returncode != 0:
            raise RuntimeError(f"sockperf ping-pong exited {done.returncode}: {done.stderr[-300:]}")
        percentiles, min_us = parse(done.stdout + done.stderr)
        return SockperfResult(percentiles[50.0], percentiles.get(99.0, float("nan")), min_us, msg_bytes,
                              duration_s, " ".join(argv[:1] + ["ping-pong"] + argv[2:]))
    finally:
        server.kill()
        server.wait(5)
