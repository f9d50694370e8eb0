"""Which temporary worktrees critpath made, and whether the process that made them still lives.

A gate or history killed outright (SIGKILL, the OOM killer, a CI job cancelled hard) cannot
remove the worktree it added: git keeps it registered and its directory stays. So each one is
made inside a directory of its own that holds ``OWNER_FILE`` (the command, pid, the pid's start
time and the host), written before ``git worktree add``; each gate and history starts by removing
the registered worktrees whose owner on this host is gone. A worktree without the file, one whose
owner lives, and one that another host made (a shared filesystem) are never touched.
"""
from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

OWNER_FILE = "critpath-owner.json"  # beside the worktree, in the temporary directory that holds it


def _proc_stat(pid: int) -> Optional[tuple[str, str]]:
    """(state, start time in clock ticks since boot) of ``pid`` from /proc, or None where there is
    no /proc or no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may hold spaces and ')'
    return fields[0], fields[19]  # stat fields 3 and 22


@dataclass(frozen=True)
class Owner:
    command: str  # "critpath gate", "critpath history"
    pid: int
    host: str
    started: Optional[str]  # the pid's start time: a pid reused by another process is not the owner

    @classmethod
    def me(cls, command: str) -> "Owner":
        stat = _proc_stat(os.getpid())
        return cls(command, os.getpid(), socket.gethostname(), stat[1] if stat else None)

    def alive(self) -> bool:
        """False only when this host can tell that the owner is gone: no such pid, a zombie, or a
        pid that a later process reuses."""
        if self.host != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process: it exists
            pass
        stat = _proc_stat(self.pid)
        if stat is None:
            return True
        state, started = stat
        return state != "Z" and (self.started is None or started == self.started)

    def describe(self) -> str:
        return f"{self.command} (pid {self.pid} on {self.host})"

    def write(self, directory: Path) -> None:
        (directory / OWNER_FILE).write_text(json.dumps(asdict(self)) + "\n")


def owner_of(worktree: Path) -> Optional[Owner]:
    """The owner recorded beside ``worktree``, or None for a worktree critpath did not make."""
    try:
        data = json.loads((worktree.parent / OWNER_FILE).read_text())
        return Owner(str(data["command"]), int(data["pid"]), str(data["host"]), data.get("started"))
    except (OSError, ValueError, KeyError, TypeError):
        return None

