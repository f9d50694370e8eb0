"""Server process lifecycle: each server runs in its own process, started and stopped by the harness.

- **start**: a fresh interpreter (spawn: no inherited locks or torch threads) imports the server
  module, binds (127.0.0.1 or a private Unix path by default) and only then reports its address
  over a pipe. ``start`` waits for that report with a deadline; a server that dies or never
  reports raises ``ServerStartError`` carrying the child's traceback or exit code.
- **stop**: bounded. Set the stop event, wait, then SIGTERM, then SIGKILL. Every serve loop polls
  the event at least every ``POLL_S``, so a clean stop takes about that long.
- **counters**: shared integers (connections, frames, malformed, oversized...) the server bumps and
  the parent reads at any time, including after the server is gone.
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import time
import traceback
from dataclasses import dataclass
from typing import Any, Optional

from harness.run.lifetime import die_with_parent
from harness.rpc.framing import RpcError

POLL_S = 0.05
COUNTERS = (
    "connections",   # accepted connections (or streams/peers)
    "frames",        # requests answered
    "malformed",     # frames with a bad header, answered with an error frame, connection closed
    "oversized",     # frames over the size limit, answered with an error frame, connection closed
    "truncated",     # connections that ended inside a frame (client vanished mid-request)
    "closed",        # connections that ended cleanly between frames
    "errors",        # anything else that ended a connection
    "stalls",        # fault proxy: injected stalls
    "drops",         # fault proxy: connections dropped on purpose
    "refused",       # connections turned away: the server already held its maximum open at once
    "idle",          # connections cut off after a peer stayed silent past the idle timeout
)


class ServerStartError(RpcError):
    pass


class ServerGone(RpcError):
    """The server process is no longer running."""


class Counters:
    """Named view over a shared array of int64; safe from many server threads."""

    def __init__(self, array) -> None:
        self.array = array

    def add(self, name: str, n: int = 1) -> None:
        i = COUNTERS.index(name)
        with self.array.get_lock():
            self.array[i] += n

    def snapshot(self) -> dict[str, int]:
        with self.array.get_lock():
            return {name: int(self.array[i]) for i, name in enumerate(COUNTERS)}


@dataclass
class Control:
    """What a serve function gets: report readiness, watch for stop, bump counters."""

    stop: Any  # multiprocessing Event
    counters: Counters
    _ready: Any  # Connection

    def ready(self, address: Any) -> None:
        self._ready.send(("ready", address))

    def stopping(self) -> bool:
        return self.stop.is_set()


def _child(target: str, config: Any, ready_conn, stop, array) -> None:
    # The server dies with the process that started it: a rank killed with SIGKILL (or by its own
    # parent's death) must not leave a listener behind.
    die_with_parent()
    try:
        module_name, _, func_name = target.partition(":")
        serve = getattr(importlib.import_module(module_name), func_name)
        serve(config, Control(stop, Counters(array), ready_conn))
    except BaseException:  # noqa: BLE001 - the parent must see why the server died
        try:
            ready_conn.send(("error", traceback.format_exc()))
        except (OSError, ValueError):
            pass
        raise SystemExit(1)


class ServerProcess:
    """One server in its own process. ``target`` is ``"module:function"``; the function is called
    as ``function(config, control)`` and must call ``control.ready(address)`` once bound."""

    def __init__(self, target: str, config: Any, start_timeout_s: float = 20.0) -> None:
        self.target = target
        self.config = config
        self.start_timeout_s = start_timeout_s
        self._ctx = mp.get_context("spawn")
        self._stop = self._ctx.Event()
        self._array = self._ctx.Array("q", len(COUNTERS))
        self.counters = Counters(self._array)
        self.process: Optional[mp.process.BaseProcess] = None
        self.address: Any = None
        self.stopped_by: Optional[str] = None

    def start(self) -> Any:
        parent_conn, child_conn = self._ctx.Pipe(duplex=False)
        self.process = self._ctx.Process(
            target=_child, args=(self.target, self.config, child_conn, self._stop, self._array),
            name=f"critpath-server-{self.target.rsplit('.', 1)[-1]}", daemon=True,
        )
        self.process.start()
        child_conn.close()
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if parent_conn.poll(POLL_S):
                try:
                    kind, value = parent_conn.recv()
                except EOFError:
                    kind, value = "error", "server closed its ready pipe without a word"
                if kind == "ready":
                    self.address = value
                    parent_conn.close()
                    return value
                self.stop(0.5)
                raise ServerStartError(f"{self.target} failed to start:\n{value}")
            if not self.process.is_alive():
                raise ServerStartError(f"{self.target} exited with code {self.process.exitcode} before it was ready")
            if time.monotonic() > deadline:
                self.stop(0.5)
                raise ServerStartError(f"{self.target} not ready within {self.start_timeout_s:g} s")

    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def check_alive(self) -> None:
        if not self.alive():
            code = self.process.exitcode if self.process is not None else None
            raise ServerGone(f"{self.target} server is gone (exit code {code})")

    @property
    def pid(self) -> Optional[int]:
        return self.process.pid if self.process is not None else None

    def stop(self, timeout_s: float = 3.0) -> str:
        """Stop within about ``timeout_s`` + 2 s whatever the server does; returns how it ended."""
        proc = self.process
        if proc is None:
            return "never started"
        if self.stopped_by is not None:
            return self.stopped_by
        self._stop.set()
        proc.join(timeout_s)
        how = "clean"
        if proc.is_alive():
            proc.terminate()
            proc.join(1.0)
            how = "terminated"
        if proc.is_alive():
            proc.kill()
            proc.join(1.0)
            how = "killed"
        self.stopped_by = how
        return how

    def __enter__(self) -> "ServerProcess":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

