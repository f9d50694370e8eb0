"""Samples the contention of one rank's timed window (the evidence harness.core.contention judges).

A window costs a few system calls at each end and nothing per iteration: PSI's cumulative ``some``
stall time (/proc/pressure/cpu) and the process's involuntary context switches (getrusage) are read
before and after, and their deltas kept; the allowed CPUs (sched_getaffinity) and the CPU the rank
ended on (/proc/self/stat) are read once, at the end. Where PSI is missing or unreadable (kernels
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
    NO_PRESSURE,
    PSI,
    TICK_ASSUMED,
    RankEvidence,
    cpu_list,
)

PSI_CPU = Path("/proc/pressure/cpu")
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
        if found and 0 < int(found.group(1)) <= MAX_TICK_HZ:
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


@dataclass(frozen=True)
class Window:
    """An open timed window: what ``stop`` subtracts from."""

    started_ns: int
    psi_us: Optional[int]
    nivcsw: int
    psi_path: Path = PSI_CPU

    @classmethod
    def start(cls, psi_path: Path = PSI_CPU) -> "Window":
        scheduler_tick()  # the first reading decompresses a file: outside the window
        # read the clock last, so the window holds the loop and not these reads
        psi, nivcsw = psi_some_us(psi_path), _nivcsw()
        return cls(time.perf_counter_ns(), psi, nivcsw, psi_path)

    def stop(self) -> RankEvidence:
        window_ns = max(1, time.perf_counter_ns() - self.started_ns)
        nivcsw, psi = _nivcsw(), psi_some_us(self.psi_path)
        cpus = usable_cpus()
        if self.psi_us is not None and psi is not None and psi >= self.psi_us:
            source, share = PSI, min(1.0, (psi - self.psi_us) * 1000 / window_ns)
        else:
            source, share = _load_per_cpu(len(cpus))
        hz, hz_source = scheduler_tick()
        return RankEvidence(window_ns=window_ns, pressure_source=source, pressure_share=share,
                            nivcsw=max(0, nivcsw - self.nivcsw), cpus_allowed=cpu_list(cpus), cpu_last=cpu_last(),
                            tick_hz=hz, tick_source=hz_source)


def _load_per_cpu(cpus: int) -> tuple[str, Optional[float]]:
    try:
        return LOADAVG, os.getloadavg()[0] / max(1, cpus)
    except OSError:
        return NO_PRESSURE, None
