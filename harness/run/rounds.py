"""``critpath worker``: one process that measures the same cases round after round, on request.

The regression gate needs many repeats of a few cases. A fresh ``critpath run`` per repeat
spends seconds starting Python, importing torch and spawning ranks for a fraction of a second of
measurement. A worker starts once, then serves rounds over a pipe: each round runs its cases
(set-up, warm-up, timed loop, check, teardown, exactly as ``critpath run`` does) and appends the
records to its own run directory. The gate starts a fresh worker per side every few rounds, so
between-process variance is still sampled (see docs/gate.md for the measured trade-off).

- One-rank cases run in this process: nothing to spawn. A family that imports torch gets a
  one-rank process group, as a spawned rank would.
- Multi-rank cases run on a pool of spawned ranks that stays up between rounds
  (``harness.run.launcher.Supervisor``); a failed case ends that pool and the next round gets a fresh one.
- Only the imports a case needs are made: a torch-free family never loads torch.

Protocol (JSON lines; version ``PROTOCOL``). Stdout carries only protocol lines: anything else
the process prints goes to stderr, which the gate keeps as the worker's log.

    worker -> {"event": "ready", "protocol": 1, "harness_file": ..., "pid": ...}
    gate   -> {"cmd": "prepare", "cases": [{"id": ...}]}      (optional: import, start rank pools)
    worker -> {"event": "prepared"}
    gate   -> {"cmd": "round", "round": 0, "cases": [{"id": ..., "iters": 3000 | null}],
               "warmup": 20 | null, "target_s": 0.3}
    worker -> {"event": "round", "round": 0, "run_dir": ..., "records": [{"case_id", "status", "iters"}]}
               (each round numbered above the last one served: a number served already, or one
               below it, is refused, so no round's records are appended twice or counted twice)
    gate   -> {"cmd": "stop"}
    worker -> {"event": "bye"}

A message the worker cannot act on gets {"event": "error", "message": ...} and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Optional, Sequence, TextIO

import harness
from harness.core import registry
from harness.core.claim import Claim, claim_dir
from harness.core.family import BACKENDS, RankContext
from harness.core.fingerprintfile import WORKER, WORKER_WORLD
from harness.core.jsonfile import JsonFileError, loads_strict
from harness.core.numbers import check_float, check_int
from harness.core.options import MAX_SECONDS, UsageError, path_option, seconds
from harness.core.records import MAX_SAMPLES, ErrorInfo, Record, utc_now_iso
from harness.core.store import RunDir, new_run_id, run_files
from harness.run import fingerprint
from harness.run.driver import Collectives, run_case
from harness.run.lifetime import die_with_parent, on_stop_signals
from harness.run.protocol import MAX_WORKER_LINE_BYTES, WORKER_MESSAGE_LIMITS
from harness.run.plan import LOCAL_WORLD_RULE, MAX_LOCAL_WORLD, PROFILE_POLICY
from harness.run.timing import PlanPolicy

PROTOCOL = 1
MAX_ITERS = MAX_SAMPLES  # per case and round, when the gate sets the window: what a record holds
ROUND_PREFIX = "round-"
ROUND_DIR = ROUND_PREFIX + "{:03d}"


def register(sub) -> None:
    p = sub.add_parser("worker", help="serve rounds of cases over stdin/stdout (used by critpath gate)",
                       description="Measure cases round after round on request, over a JSON-lines pipe. "
                                   "critpath gate starts these; see harness/run/rounds.py for the protocol.")
    p.add_argument("--out", type=path_option, required=True, help="directory for this worker's round directories")
    p.add_argument("--backend", choices=BACKENDS, default="gloo")
    p.add_argument("--timeout", type=seconds, default=60.0, metavar="SECONDS", help="per-case limit of a multi-rank case")
    p.set_defaults(func=cmd_worker)


class ProtocolError(ValueError):
    """A message from the gate that the worker cannot act on."""


class RoundServer:
    """Runs rounds; owns the rank pools (one per world size) and the single-rank group."""

    def __init__(self, out: Path, backend: str, timeout_s: float) -> None:
        self.out = Path(out)
        self.backend = backend
        self.timeout_s = timeout_s
        self.run_id = new_run_id()
        self._pools: dict[int, Any] = {}
        self._solo_group = False
        self.served_rounds: set[int] = set()

    def check_order(self, number: int) -> None:
        """A round numbered at or below the last one served is refused: served again, its records
        would join the same round directory and the gate would count one pair twice."""
        last = max(self.served_rounds, default=None)
        if last is not None and number <= last:
            again = "was served already" if number in self.served_rounds else "is out of order"
            raise ProtocolError(f"field round: round {number} {again}; the last round served was "
                                f"{last}, and each round must be numbered above it")

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        if self._solo_group:
            import torch.distributed as dist  # loaded already: a solo group exists only for a torch family

            dist.destroy_process_group()
            self._solo_group = False

    def write_fingerprint(self) -> None:
        RunDir(self.out, self.run_id).write_fingerprint(fingerprint.collect(self.backend, WORKER_WORLD, WORKER))

    def run_round(self, number: int, cases: Sequence[tuple[Any, Optional[int]]], warmup: Optional[int],
                  target_s: Optional[float]) -> tuple[Path, list[dict]]:
        run_dir = RunDir(self.out / ROUND_DIR.format(number), self.run_id)
        quick = PROFILE_POLICY["quick"]
        summary = []
        for case, iters in cases:
            # A window the gate asks for is not capped by the quick profile's iteration limit.
            policy = PlanPolicy(
                warmup=quick.warmup if warmup is None else warmup, iters=iters,
                target_s=quick.target_s if target_s is None else target_s,
                min_iters=quick.min_iters, max_iters=quick.max_iters if target_s is None else MAX_ITERS,
                # the gate's window is its budget: tails get no more time than it gave
                tail_budget_s=quick.tail_budget_s if target_s is None else target_s,
            )
            record = self._one_rank(case, policy) if case.world == 1 else self._on_pool(case, policy)
            run_dir.append(record)
            summary.append({"case_id": record.case_id, "status": record.status,
                            "iters": (record.plan or {}).get("iters")})
        return run_dir.path, summary

    def prepare(self, cases: Sequence[Any]) -> None:
        """Import the cases' families and start their rank pools, before anything is timed: the
        gate asks both sides to prepare at once, so their start-up overlaps."""
        for case in cases:
            registry.get(case.family)
            if case.world > 1:
                self._pool(case.world).start(wait=True)

    def _pool(self, world: int):
        from harness.run.launcher import Supervisor  # imports torch (1.5 s): only a multi-rank case pays it

        if world not in self._pools:
            self._pools[world] = Supervisor(world=world, backend=self.backend, policy=PROFILE_POLICY["quick"],
                                            run_id=self.run_id, case_timeout_s=self.timeout_s,
                                            threads_per_rank=max(1, (os.cpu_count() or 1) // world))
        return self._pools[world]

    def _on_pool(self, case, policy):
        got = []
        pool = self._pool(case.world)
        pool.on_record = got.append
        pool.run([case], policy)
        return got[0]

    def _one_rank(self, case, policy):
        """The case in this process, as a spawned single rank would run it; a failure is a record."""
        family = registry.get(case.family)
        device, group = None, None
        if "torch" in sys.modules:  # the family uses torch: give it what a spawned rank has
            device, group = self._torch_context()
        started_at = utc_now_iso()
        start = time.perf_counter()
        try:
            record = run_case(family, case, RankContext(0, 1, 0, self.backend, device, group),
                              Collectives(None, 1), policy, self.run_id)
            record.to_json()  # validate here: a family's invalid figures fail its case, not the worker
            return record
        except Exception as exc:  # noqa: BLE001 - every failure must become a record
            return Record.failure(case, self.run_id, ErrorInfo(type(exc).__name__, str(exc), 0, traceback.format_exc()),
                                  self.backend, started_at, time.perf_counter() - start)

    def _torch_context(self):
        import torch.distributed as dist  # a family that uses torch has loaded it already

        from harness.run.worker import device_for  # worker imports torch at module level

        if not self._solo_group:
            dist.init_process_group(self.backend, store=dist.HashStore(), rank=0, world_size=1)
            self._solo_group = True
        return device_for(self.backend, 0), dist.group.WORLD


def _send(channel: TextIO, message: dict) -> None:
    channel.write(json.dumps(message) + "\n")
    channel.flush()


def _parse_round(message: dict) -> tuple[int, list, Optional[int], Optional[float]]:
    """The round a gate asks for, each number by the one grammar of typed numbers within its range:
    a bad request is a protocol error naming the field, not a failed record or an unbounded loop."""
    try:
        number = check_int(message["round"], "field round", 0)
        entries = message["cases"]
        if not isinstance(entries, list) or not entries:
            raise ProtocolError("field cases: expected a non-empty list")
        cases = []
        for i, entry in enumerate(entries):
            iters = entry.get("iters")
            if iters is not None:
                check_int(iters, f"field cases[{i}].iters", 1, MAX_ITERS)
            case = registry.parse(entry["id"])
            if case.world > MAX_LOCAL_WORLD:  # this worker spawns the case's ranks on this host
                raise ProtocolError(f"case {case.id} needs world {case.world}: {LOCAL_WORLD_RULE}")
            cases.append((case, iters))
        warmup = message.get("warmup")
        if warmup is not None:
            check_int(warmup, "field warmup", 0, MAX_ITERS)  # no longer than the timed loop may be
        target_s = message.get("target_s")
        if target_s is not None:
            check_float(target_s, "field target_s", 0.0, MAX_SECONDS)
            if target_s == 0:
                raise ProtocolError("field target_s: 0 is no window to time; it must be above 0")
    except (KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"round message lacks or mistypes a field: {exc!r}") from None
    except ValueError as exc:  # a NumberError or a CaseIdError names its field or case
        raise ProtocolError(str(exc)) from None
    return number, cases, warmup, target_s


def claim_out(out: Path) -> Claim:
    """``out`` held by this worker alone, as ``critpath run`` holds its --out: a second worker
    into it (at once, or after this one) would append records of another run ID to the same round
    files. The gate's log of the worker (written there before it starts) is not a worker's output."""
    claim = claim_dir(out, "worker")
    taken = run_files(out) + sorted(Path(out).glob(ROUND_PREFIX + "*"))
    if taken:
        claim.release()
        raise UsageError(f"{out} already holds a worker's rounds ({taken[0]}); choose another --out")
    return claim


def serve(out: Path, backend: str, timeout_s: float, commands: TextIO, replies: TextIO) -> int:
    with claim_out(out):
        return _serve(out, backend, timeout_s, commands, replies)


def _requests(commands: TextIO):
    """The gate's lines, each read within MAX_WORKER_LINE_BYTES (ProtocolError past it)."""
    while True:
        line = commands.readline(MAX_WORKER_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_WORKER_LINE_BYTES:
            raise ProtocolError(f"a request line of more than {MAX_WORKER_LINE_BYTES} bytes (MAX_WORKER_LINE_BYTES)")
        yield line


def _serve(out: Path, backend: str, timeout_s: float, commands: TextIO, replies: TextIO) -> int:
    server = RoundServer(out, backend, timeout_s)
    try:
        server.write_fingerprint()
        _send(replies, {"event": "ready", "protocol": PROTOCOL, "harness_file": harness.__file__, "pid": os.getpid()})
        requests = _requests(commands)
        while True:
            try:
                line = next(requests, None)
                if line is None:
                    break
                if not line.strip():
                    continue
                message = loads_strict(line, "the gate's request", WORKER_MESSAGE_LIMITS)
                if not isinstance(message, dict):
                    raise ProtocolError("a message must be a JSON object")
                cmd = message.get("cmd")
                if cmd == "stop":
                    break
                if cmd not in ("round", "prepare"):
                    raise ProtocolError(f"unknown cmd {cmd!r}; expected prepare, round or stop")
                number, cases, warmup, target_s = _parse_round({"round": 0, **message})
                if cmd == "round":
                    server.check_order(number)
            except (JsonFileError, ProtocolError) as exc:
                _send(replies, {"event": "error", "message": str(exc)})
                return 2
            if cmd == "prepare":
                server.prepare([case for case, _ in cases])
                _send(replies, {"event": "prepared"})
                continue
            run_dir, summary = server.run_round(number, cases, warmup, target_s)
            server.served_rounds.add(number)
            _send(replies, {"event": "round", "round": number, "run_dir": str(run_dir), "records": summary})
    finally:
        server.close()
    _send(replies, {"event": "bye"})
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    # A gate killed outright must not leave its workers measuring (or their ranks and servers).
    die_with_parent(signal.SIGTERM)
    on_stop_signals(lambda signum, frame: sys.exit(128 + signum))  # through atexit, which gives up its claims
    # Protocol lines get stdout to themselves: a family or library that prints would otherwise
    # corrupt them, so fd 1 becomes stderr for everything else in this process.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return serve(args.out, args.backend, args.timeout, sys.stdin, replies)
