"""Which temporary worktrees critpath made, and whether the process that made them still lives.

A gate or history killed outright (SIGKILL, the OOM killer, a CI job cancelled hard) cannot
remove the worktree it added: git keeps it registered and its directory stays. So each one is
made inside a directory of its own that holds ``OWNER_FILE`` (the command, pid, the pid's start
time and the host), written before ``git worktree add``; each gate and history starts by removing
the registered worktrees whose owner on this host is gone. A worktree without the file, one whose
owner lives, and one that another host made (a shared filesystem) are never touched.

The file is anyone's to write, so it is read as untrusted: one that is not a small regular file
(a FIFO, a link to /dev/zero) or does not parse with the fields and types ``Owner.me`` writes is
not critpath's (``Malformed``), and its worktree is left.
"""
from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Union

from harness.core.inputfile import InputFileError, read_bounded
from harness.core.jsonfile import JsonFileError, JsonLimits, loads_strict
from harness.core.procstat import STARTTIME_FIELD, STATE_FIELD, stat_fields
from harness.core.scale import PID_MAX

OWNER_FILE = "critpath-owner.json"  # beside the worktree, in the temporary directory that holds it
COMMAND_PREFIX = "critpath "  # every owner is a critpath command
# An owner file is four short fields on one line (some 100 bytes; a host name is at most 255).
MAX_OWNER_BYTES = 4096
OWNER_LIMITS = JsonLimits(keys=4, values=4, depth=1)


def _proc_stat(pid: int) -> Optional[tuple[str, str]]:
    """(state, start time in clock ticks since boot) of ``pid`` from /proc, or None where there is
    no /proc or no such process."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    return fields[STATE_FIELD], fields[STARTTIME_FIELD]


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


class Malformed(ValueError):
    """An owner file that is not one critpath wrote; the message says which field is wrong."""


def parse_owner(text: Union[str, bytes]) -> Owner:
    """The owner an owner file's text records; Malformed naming the field that is not as
    ``Owner.write`` writes it."""
    try:
        data = loads_strict(text, OWNER_FILE, OWNER_LIMITS)
    except JsonFileError as exc:
        raise Malformed(f"not JSON as critpath writes it: {exc.why}") from None
    if not isinstance(data, dict) or set(data) != {"command", "pid", "host", "started"}:
        raise Malformed("expected exactly the fields command, pid, host, started")
    command, pid, host, started = data["command"], data["pid"], data["host"], data["started"]
    if not isinstance(command, str) or not command.startswith(COMMAND_PREFIX):
        raise Malformed(f"command {command!r} is not a critpath command")
    if type(pid) is not int or not 0 < pid <= PID_MAX:
        raise Malformed(f"pid {pid!r} is not a process id (1 to {PID_MAX})")
    if not isinstance(host, str) or not host:
        raise Malformed(f"host {host!r} is not a host name")
    if started is not None and not (isinstance(started, str) and started.isdigit()):
        raise Malformed(f"started {started!r} is not a start time in clock ticks")
    return Owner(command, pid, host, started)


def owner_of(worktree: Path) -> Optional[Owner]:
    """The owner recorded beside ``worktree``; None when there is no owner file; Malformed when
    there is one that critpath did not write."""
    try:
        text = read_bounded(worktree.parent / OWNER_FILE, "critpath owner file", MAX_OWNER_BYTES)
    except FileNotFoundError:
        return None
    except (OSError, InputFileError) as exc:  # a FIFO, a device, a directory, too large
        raise Malformed(f"unreadable: {exc}") from None
    return parse_owner(text)

