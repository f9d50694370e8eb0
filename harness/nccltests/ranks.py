"""The ranks an nccl-tests run lists, the text log's '#  Rank' lines and -J's config.devices, held
to what nccl-tests prints: one set of rules for both, each bound declared once.

From NVIDIA/nccl-tests' source (src/util.cu, writeDeviceReport, at a0b82b2, 2.19.6): each process
``proc`` prints ``nThreads x nGpus`` lines, line ``i`` of rank ``proc*nThreads*nGpus + i``, every one
with the process's ``getpid()``; the root gathers them in process order (MPI_Gather), and -J lists
the first line of each process (``parseRankInfo`` of its block). So a rank is printed once, is one
of the run's, and the ranks of one process share one Pid. Pids of different processes may be equal
(one pid namespace per container), and a block longer than MAX_LINE (2048 bytes) is cut, so neither
the Pids' distinctness nor a block's length is held.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from harness.core.scale import PID_MAX
from harness.nccltests.limits import MAX_DEVICE, MAX_GROUP
from harness.nccltests.values import NcclTestsFormatError

__all__ = ["BOUNDS", "Listed", "check_listed"]

# (low, high) of each field of a rank's line: MPI_Comm_split's color (a C int, never negative),
# getpid() (below Linux's PID_MAX_LIMIT), the CUDA device ordinal
BOUNDS = {"group": (0, MAX_GROUP), "pid": (1, PID_MAX - 1), "device": (0, MAX_DEVICE)}
_SOURCE = "src/util.cu, writeDeviceReport"


@dataclass(frozen=True)
class Listed:
    """One rank as the log lists it; ``at(field)`` names that field where it is written."""

    rank: int
    pid: int | None
    where: str  # "PATH:13", or "PATH: field config.devices[1]"
    place: str  # "line 13", or "config.devices[1]"
    json: bool = False

    def at(self, field: str) -> str:
        if self.json:
            return f"{self.where}.{field}:"
        return f"{self.where}: {'Rank' if field == 'rank' else 'Pid'}"


def check_listed(listed: Sequence[Listed], ranks: int, ranks_from: str, per_process: int, per_process_from: str) -> None:
    """NcclTestsFormatError naming the first rank listed twice, past the run's ranks, not the first
    of its process where -J lists only those, or of a process whose other ranks have another Pid."""
    first: dict[int, Listed] = {}
    process_pid: dict[int, Listed] = {}
    for entry in listed:
        if entry.rank in first:
            raise NcclTestsFormatError(f"{entry.at('rank')} {entry.rank} again ({first[entry.rank].place} lists it "
                                       f"too): nccl-tests lists each rank once ({_SOURCE})")
        first[entry.rank] = entry
    for entry in listed:
        if entry.rank >= ranks:
            raise NcclTestsFormatError(f"{entry.at('rank')} {entry.rank}, but the run has {ranks} ranks "
                                       f"({ranks_from}): its ranks are 0 to {ranks - 1}")
        if entry.json and entry.rank % per_process:
            raise NcclTestsFormatError(f"{entry.at('rank')} {entry.rank}, but -J lists the first rank of each process, "
                                       f"a multiple of its {per_process_from} ranks ({_SOURCE}, parseRankInfo)")
        if entry.pid is None:
            continue
        process = entry.rank // per_process
        other = process_pid.setdefault(process, entry)
        if other.pid != entry.pid:
            low = process * per_process
            raise NcclTestsFormatError(
                f"{entry.at('pid')} {entry.pid}, but {other.place} (rank {other.rank}) has Pid {other.pid}: ranks "
                f"{low} to {low + per_process - 1} are one process of {per_process_from} ranks, and nccl-tests "
                f"prints one getpid() for all of them ({_SOURCE})")
