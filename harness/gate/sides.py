"""The measuring processes of one side of an A/B: how a round of cases gets run from a tree.

Two kinds, chosen per gate from what both trees support (both sides always use the same kind,
or their processes would differ in make-up and the difference would count as change):

- ``WorkerSide``: a ``critpath worker`` process (``harness.run.rounds``) started from the side's tree,
  serving several rounds over a pipe. Start-up is paid once per worker, not per round.
- ``RunSide``: a fresh ``critpath run --case ...`` process per round, for a base tree older than
  the worker protocol.

Every process gets its own session, so a timeout or Ctrl-C stops it with everything it started
(rank pools, servers) in one ``killpg``; a worker also dies with the gate (PDEATHSIG).
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

from harness.gate.trees import Tree
from harness.core import registry
from harness.core.claim import remove_abandoned
from harness.core.procstat import stopped_state
from harness.core.records import ErrorInfo, Record, utc_now_iso
from harness.core.jsonfile import JsonFileError, loads_strict
from harness.core.store import RESULTS, ResultsFileError, append_record, load_records, new_run_id
from harness.run.protocol import MAX_WORKER_LINE_BYTES, WORKER_MESSAGE_LIMITS

STOP_GRACE_S = 10.0
# The backend of a worker's records: the gate starts it without --backend, so at the worker's default.
WORKER_BACKEND = "gloo"


class SideError(RuntimeError):
    """A side's process that died, hung or spoke out of turn; the message says which and why, and
    ``kind`` is the error kind a record of its case in flight gets ("timeout" for a hung one)."""

    def __init__(self, message: str, kind: str = "exit") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class RoundCase:
    case_id: str
    iters: Optional[int] = None  # None: calibrated from the warm-up (the first round of a gate)


@dataclass
class RoundResult:
    side: str
    generation: int
    number: int
    run_dir: Path
    wall_s: float
    records: dict[str, Record] = field(default_factory=dict)
    error: str = ""  # why some case of the round has no record, when one has none
    in_flight: str = ""  # the case a dead or hung process was running: its failure is a record the side wrote


def _read_records(run_dir: Path, asked: Sequence[str]) -> tuple[dict[str, Record], str]:
    """The round's records by the case IDs the gate ``asked`` for: a tree spells each case's ID its
    own way (a base before one canonical spelling wrote mitigation=none out, or spin_iters=0), so a
    record is found by its case, not its text."""
    if not (run_dir / RESULTS).exists():
        return {}, ""
    spelt = {registry.canonical_id(case_id): case_id for case_id in asked}
    try:
        return {spelt.get(registry.canonical_id(r.case_id), r.case_id): r for r in load_records(run_dir)}, ""
    except ResultsFileError as exc:
        return {}, str(exc)


def _stopped_note(proc: subprocess.Popen) -> str:
    """The note ``(stopped, state T)`` where a process that did not answer was stopped (SIGSTOP, a
    tracer), read before it is killed: that is why it could not answer. Empty otherwise."""
    state = stopped_state(proc.pid) if proc.poll() is None else None
    return f" (stopped, state {state})" if state else ""


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass


class WorkerSide:
    """One ``critpath worker`` of one side, for one generation of rounds."""

    def __init__(self, tree: Tree, side: str, generation: int, out_dir: Path, run_args: dict,
                 python: str = sys.executable, extra_env: Optional[Mapping[str, str]] = None) -> None:
        self.tree, self.side, self.generation = tree, side, generation
        self.env = {**tree.env(), **(extra_env or {})}  # extra_env: this pair's factors (harness.gate.factors)
        self.out_dir = Path(out_dir)
        self.run_args = run_args  # timeout_s, warmup, target_s
        self.python = python
        self.proc: Optional[subprocess.Popen] = None
        self._buffer = bytearray()  # appended in place: a long line is not copied per chunk
        self._log = None
        self._run_id: Optional[str] = None  # the worker's, from its records: a generation is one run

    def start(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.out_dir / "worker.log", "wb")
        args = [self.python, "-m", "harness", "worker", "--out", str(self.out_dir),
                "--timeout", str(self.run_args["timeout_s"])]
        self.proc = subprocess.Popen(args, cwd=self.tree.path, env=self.env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)

    def await_ready(self, timeout_s: float) -> None:
        message = self._expect("ready", timeout_s)
        if message.get("protocol") != 1:
            raise SideError(f"{self.side} worker speaks protocol {message.get('protocol')!r}, not 1")

    def prepare(self, case_ids: Sequence[str]) -> None:
        self._send({"cmd": "prepare", "cases": [{"id": c} for c in case_ids]})

    def await_prepared(self, timeout_s: float) -> None:
        self._expect("prepared", timeout_s)

    def run_round(self, number: int, cases: Sequence[RoundCase], timeout_s: float) -> RoundResult:
        run_dir = self.out_dir / f"round-{number:03d}"
        start = time.perf_counter()
        error, kind = "", ""
        try:
            self._send({"cmd": "round", "round": number, "cases": [{"id": c.case_id, "iters": c.iters} for c in cases],
                        "warmup": self.run_args.get("warmup"), "target_s": self.run_args.get("target_s")})
            reply = self._expect("round", timeout_s)
            answered = reply.get("round")
            if type(answered) is not int or answered != number:  # True == 1 in Python: no bool passes
                # Another round's reply: what the round directory holds is not known to be this
                # round's, and counting it would count some pair twice or pair the wrong rounds.
                return RoundResult(self.side, self.generation, number, run_dir, time.perf_counter() - start, {},
                                   f"{self.side} worker answered round {answered!r} where round "
                                   f"{number} was asked (a protocol error; log: {self._log_path})")
        except SideError as exc:
            error, kind = str(exc), exc.kind
            _kill_group(self.proc)  # dead or hung: nothing more of it may reach the round's records
        records, read_error = _read_records(run_dir, [c.case_id for c in cases])
        self._run_id = self._run_id or next((r.run_id for r in records.values()), None)
        in_flight = ""
        if kind and not read_error:
            in_flight, error = self._record_in_flight(run_dir, cases, records, error, kind)
        return RoundResult(self.side, self.generation, number, run_dir, time.perf_counter() - start, records,
                           error or read_error, in_flight)

    def _record_in_flight(self, run_dir: Path, cases: Sequence[RoundCase], records: dict, error: str,
                          kind: str) -> tuple[str, str]:
        """The case a dead or hung worker was running (the first asked without a record: it runs
        them in order) and the error, once its failure is a record in the round's results: the
        worker left none, and a reader of the gate's directories would otherwise find only the
        rounds it finished. Added to ``records``; ("", error) when every case has one."""
        case_id = next((c.case_id for c in cases if c.case_id not in records), "")
        if not case_id:
            return "", error
        record = Record.failure(registry.parse(case_id), self._run_id or new_run_id(), ErrorInfo(kind, error),
                                next((r.backend for r in records.values()), WORKER_BACKEND), utc_now_iso())
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            append_record(run_dir / RESULTS, record)
        except OSError as exc:
            return case_id, f"{error} (and its failure could not be recorded in {run_dir / RESULTS}: {exc})"
        self._run_id = record.run_id
        records[case_id] = record
        return case_id, error

    def stop(self) -> None:
        """Ask the worker to leave; kill it (and its session) if it does not within the grace."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                self._send({"cmd": "stop"})
                self._expect("bye", STOP_GRACE_S)
                self.proc.wait(timeout=STOP_GRACE_S)
        except (SideError, subprocess.TimeoutExpired):
            pass
        finally:
            _kill_group(self.proc)
            remove_abandoned(self.out_dir)
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            if self._log:
                self._log.close()

    def kill(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
            remove_abandoned(self.out_dir)  # the killed worker's claim: its lock died with it

    # -- the pipe ----------------------------------------------------------------------------

    def _send(self, message: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise SideError(self._dead_reason("closed its pipe")) from None

    def _expect(self, event: str, timeout_s: float) -> dict:
        message = self._read(timeout_s)
        if message.get("event") == "error":
            raise SideError(f"{self.side} worker refused a message: {message.get('message')}")
        if message.get("event") != event:
            raise SideError(f"{self.side} worker sent {message.get('event')!r} where {event!r} was due")
        return message

    @property
    def _log_path(self) -> Path:
        return self.out_dir / "worker.log"

    def _read(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                if len(self._buffer) > MAX_WORKER_LINE_BYTES:
                    _kill_group(self.proc)
                    raise SideError(f"{self.side} worker wrote a line of more than {MAX_WORKER_LINE_BYTES} bytes "
                                    f"(MAX_WORKER_LINE_BYTES) without a newline; killed it (log: {self._log_path})")
                left = deadline - time.monotonic()
                if left <= 0:
                    stopped = _stopped_note(self.proc)
                    _kill_group(self.proc)
                    raise SideError(f"{self.side} worker did not answer within {timeout_s:.0f} s{stopped}; killed it "
                                    f"(log: {self._log_path})", kind="timeout")
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise SideError(self._dead_reason("closed its output"))
                self._buffer += chunk
        end = self._buffer.index(b"\n")
        line = bytes(self._buffer[:end])
        del self._buffer[:end + 1]
        try:
            message = loads_strict(line, f"{self.side} worker's output", WORKER_MESSAGE_LIMITS)
        except JsonFileError as exc:
            raise SideError(f"{self.side} worker wrote a line that is no message: {exc} "
                            f"(log: {self._log_path})") from None
        if not isinstance(message, dict):
            raise SideError(f"{self.side} worker wrote {line[:200]!r}, not a JSON object (log: {self._log_path})")
        return message

    def _dead_reason(self, what: str) -> str:
        code = None
        try:
            code = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            pass
        tail = ""
        log = self._log_path
        if log.exists():
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            tail = f"; last log line: {lines[-1].strip()}" if lines else ""
        how = f"exit code {code}" if code is not None else "still running"
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        return f"{self.side} worker {what} ({how}){tail}"


class RunSide:
    """A fresh ``critpath run`` per round: for a tree that predates the worker protocol."""

    def __init__(self, tree: Tree, side: str, generation: int, out_dir: Path, run_args: dict,
                 python: str = sys.executable, extra_env: Optional[Mapping[str, str]] = None) -> None:
        self.tree, self.side, self.generation = tree, side, generation
        self.env = {**tree.env(), **(extra_env or {})}  # extra_env: this pair's factors (harness.gate.factors)
        self.out_dir = Path(out_dir)
        self.run_args = run_args
        self.python = python
        self._procs: list[subprocess.Popen] = []

    def start(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def await_ready(self, timeout_s: float) -> None:
        pass

    def prepare(self, case_ids: Sequence[str]) -> None:
        pass

    def await_prepared(self, timeout_s: float) -> None:
        pass

    def run_round(self, number: int, cases: Sequence[RoundCase], timeout_s: float) -> RoundResult:
        run_dir = self.out_dir / f"round-{number:03d}"
        args = [self.python, "-m", "harness", "run"]
        for c in cases:
            args.append(f"--case={c.case_id}")  # one word: a case ID is never read as an option
        # One process runs every case with one --iters: the largest fixed count asked for.
        fixed = [c.iters for c in cases if c.iters]
        if fixed:
            args += ["--iters", str(max(fixed))]
        if self.run_args.get("warmup") is not None:
            args += ["--warmup", str(self.run_args["warmup"])]
        args += ["--out", str(run_dir), "--timeout", str(self.run_args["timeout_s"])]
        start = time.perf_counter()
        error = ""
        with open(run_dir.with_suffix(".log"), "wb") as log:
            proc = subprocess.Popen(args, cwd=self.tree.path, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            self._procs.append(proc)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                error = f"{self.side} run exceeded {timeout_s:.0f} s{_stopped_note(proc)} and was killed"
            finally:
                _kill_group(proc)
                remove_abandoned(run_dir)  # a run killed at its limit or on an interrupt leaves its claim
                self._procs.remove(proc)
        records, read_error = _read_records(run_dir, [c.case_id for c in cases])
        if not records and not error:
            lines = [ln for ln in run_dir.with_suffix(".log").read_text(errors="replace").splitlines() if ln.strip()]
            error = read_error or f"{self.side} run exited {proc.returncode}: {(lines or ['(no output)'])[-1].strip()}"
        return RoundResult(self.side, self.generation, number, run_dir, time.perf_counter() - start, records, error)

    def stop(self) -> None:
        self.kill()

    def kill(self) -> None:
        for proc in list(self._procs):
            _kill_group(proc)
