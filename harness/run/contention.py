"""Samples the contention of one rank's timed window (the evidence harness.core.contention judges).

A window costs a few system calls at each end and nothing per iteration: PSI's cumulative ``some``
stall time (/proc/pressure/cpu) and the process's involuntary context switches (getrusage) are read
before and after, and their deltas kept; the allowed CPUs (sched_getaffinity) and the CPU the rank
ended on (/proc/self/stat) are read once, at the end. For the foreign-CPU term the host's idle
time (/proc/stat) and the CPU time of the rank and the processes it started (getrusage, and
/proc/PID/stat of its descendants: an rpc case's servers are the case's own work) are read at both
ends as well; the descendants cost a scan of /proc at each end, outside the loop. Where PSI is missing or unreadable (kernels
before 4.20, ``psi=0``, some containers) the 1-minute load average per usable CPU stands in, and
the evidence says so by its source. The kernel's tick is read once per process: /proc/config.gz
costs about 2 ms to decompress.
"""
from __future__ import annotations

import functools
import gzip
import os
import re
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from harness.core.contention import (
    ASSUMED_TICK_HZ,
    LOADAVG,
    MAX_TICK_HZ,
    MIN_TICK_HZ,
    NO_PRESSURE,
    NS_PER_S,
    PSI,
    TICK_ASSUMED,
    RankEvidence,
    cpu_list,
)

PSI_CPU = Path("/proc/pressure/cpu")
PROC_STAT = Path("/proc/stat")
PROC = Path("/proc")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
# /proc/stat's aggregate "cpu" line: user nice system idle iowait ...; idle and iowait are fields 4, 5
STAT_IDLE_FIELDS = (3, 4)
# /proc/<pid>/stat: ppid is field 4, utime and stime fields 14 and 15 (proc(5)), counted as above
STAT_PPID_FIELD, STAT_UTIME_FIELD, STAT_STIME_FIELD = 4, 14, 15
PROC_CONFIG = Path("/proc/config.gz")
BOOT_CONFIG = "/boot/config-{release}"
SELF_STAT = Path("/proc/self/stat")
# /proc/<pid>/stat's field 39, "processor": the CPU the task last ran on (proc(5)); fields are
# counted from 1 and the text after the command's closing parenthesis starts at field 3.
STAT_PROCESSOR_FIELD = 39
_HZ = re.compile(rb"^CONFIG_HZ=([0-9]+)$", re.MULTILINE)


@functools.cache
def scheduler_tick() -> tuple[int, str]:
    """(CONFIG_HZ, where it was read) of this kernel, once per process."""
    return tick_from((PROC_CONFIG, Path(BOOT_CONFIG.format(release=os.uname().release))))


def tick_from(paths: Iterable[Path]) -> tuple[int, str]:
    """(CONFIG_HZ, the file it was read from) from the first of ``paths`` that says it (gzipped or
    plain), or (ASSUMED_TICK_HZ, TICK_ASSUMED) where none does."""
    for path in paths:
        try:
            text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        found = _HZ.search(text)
        if found and MIN_TICK_HZ <= int(found.group(1)) <= MAX_TICK_HZ:
            return int(found.group(1)), str(path)
    return ASSUMED_TICK_HZ, TICK_ASSUMED


def psi_some_us(path: Path = PSI_CPU) -> Optional[int]:
    """PSI's cumulative CPU ``some`` stall time in microseconds; None where it cannot be read."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            found = re.search(r"\btotal=([0-9]+)\b", line)
            return int(found.group(1)) if found else None
    return None


def usable_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def cpu_last(path: Path = SELF_STAT) -> Optional[int]:
    """The CPU the process last ran on, where /proc says; None elsewhere."""
    try:
        fields = path.read_text().rpartition(")")[2].split()
        return int(fields[STAT_PROCESSOR_FIELD - 3])
    except (OSError, UnicodeDecodeError, IndexError, ValueError):
        return None


def _nivcsw() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


def _clock_tick_ns() -> int:
    return NS_PER_S // os.sysconf("SC_CLK_TCK")


def host_idle(path: Path = PROC_STAT) -> Optional[tuple[int, int]]:
    """(idle and iowait time of all CPUs in ns, the online CPUs) from /proc/stat; None where it
    cannot be read."""
    try:
        lines = path.read_text().splitlines()
        fields = lines[0].split()
        if fields[0] != "cpu":
            return None
        idle = sum(int(fields[1 + i]) for i in STAT_IDLE_FIELDS) * _clock_tick_ns()
    except (OSError, UnicodeDecodeError, IndexError, ValueError):
        return None
    cpus = sum(1 for line in lines[1:] if line.startswith("cpu") and line[3:4].isdigit())
    return (idle, cpus) if cpus else None


def _proc_stat_fields(pid: str) -> Optional[list[str]]:
    try:
        # the command (field 2) may hold spaces and parentheses: the fields after its last ")" are fixed
        return (PROC / pid / "stat").read_text().rpartition(")")[2].split()
    except (OSError, UnicodeDecodeError):
        return None  # gone, or not ours to read


def descendants_cpu_ns(root: int) -> int:
    """CPU time of the live processes descended from ``root`` (not ``root`` itself), from /proc."""
    parent_of: dict[int, int] = {}
    cpu_of: dict[int, int] = {}
    try:
        pids = [name for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        fields = _proc_stat_fields(pid)
        try:
            parent_of[int(pid)] = int(fields[STAT_PPID_FIELD - 3])
            cpu_of[int(pid)] = int(fields[STAT_UTIME_FIELD - 3]) + int(fields[STAT_STIME_FIELD - 3])
        except (TypeError, IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for pid, parent in parent_of.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        total += cpu_of[pid]
        todo += children.get(pid, ())
    return total * _clock_tick_ns()


def self_cpu_ns() -> int:
    """CPU time of this process, every thread, exact (getrusage)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round((usage.ru_utime + usage.ru_stime) * NS_PER_S)


@functools.cache
def host_id() -> Optional[str]:
    """This host's boot ID (ranks of one host share it, and its /proc/stat); None where unreadable."""
    try:
        text = BOOT_ID.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    # 48 bits of it tell a job's hosts apart and keep a rank's column short
    return text.replace("-", "")[:12] if re.fullmatch(r"[0-9a-fA-F-]{12,64}", text) else None


@dataclass(frozen=True)
class Window:
    """An open timed window: what ``stop`` subtracts from."""

    started_ns: int
    psi_us: Optional[int]
    nivcsw: int
    psi_path: Path = PSI_CPU
    idle: Optional[tuple[int, int]] = None  # host_idle() at the start
    self_ns: int = 0
    descendants_ns: int = 0

    @classmethod
    def start(cls, psi_path: Path = PSI_CPU) -> "Window":
        scheduler_tick()  # the first reading decompresses a file: outside the window
        host_id()
        # Read the clock last, so the window holds the loop and not these reads. The scan of /proc
        # for descendants comes first here and last in stop, so that its own CPU time falls outside
        # both the host's window (idle) and this process's (getrusage).
        descendants = descendants_cpu_ns(os.getpid())
        own = self_cpu_ns()
        psi, nivcsw, idle = psi_some_us(psi_path), _nivcsw(), host_idle()
        return cls(time.perf_counter_ns(), psi, nivcsw, psi_path, idle, own, descendants)

    def stop(self) -> RankEvidence:
        window_ns = max(1, time.perf_counter_ns() - self.started_ns)
        idle = host_idle()
        own = self_cpu_ns() - self.self_ns + descendants_cpu_ns(os.getpid()) - self.descendants_ns
        nivcsw, psi = _nivcsw(), psi_some_us(self.psi_path)
        cpus = usable_cpus()
        if self.psi_us is not None and psi is not None and psi >= self.psi_us:
            source, share = PSI, min(1.0, (psi - self.psi_us) * 1000 / window_ns)
        else:
            source, share = _load_per_cpu(len(cpus))
        hz, hz_source = scheduler_tick()
        foreign: dict = {}
        if self.idle is not None and idle is not None and idle[1] == self.idle[1] and idle[0] >= self.idle[0] \
                and host_id() is not None:
            # a descendant that exited in the window takes its CPU time with it: never below zero
            foreign = {"host_idle_ns": idle[0] - self.idle[0], "own_cpu_ns": max(0, own),
                       "host_cpus": idle[1], "host_id": host_id()}
        return RankEvidence(window_ns=window_ns, pressure_source=source, pressure_share=share,
                            nivcsw=max(0, nivcsw - self.nivcsw), cpus_allowed=cpu_list(cpus), cpu_last=cpu_last(),
                            tick_hz=hz, tick_source=hz_source, **foreign)


def _load_per_cpu(cpus: int) -> tuple[str, Optional[float]]:
    try:
        return LOADAVG, os.getloadavg()[0] / max(1, cpus)
    except OSError:
        return NO_PRESSURE, None
