"""Kill `critpath run` at random moments and count what it leaves behind (docs/reliability.md).

    python examples/kill_loop.py --signal KILL --trials 10 --families rpc,allreduce
    python examples/kill_loop.py --signal TERM --trials 10
    python examples/kill_loop.py --kill-rank --trials 5

Each trial starts a run in a session of its own, waits a random 2-20 s, sends the signal to the
parent (or SIGKILL to one rank), and then checks, from the run's own process tree and the
machine's listeners: that every process the run started is gone, that no socket it opened still
listens, that no temporary directory of its pool is left, and that results.jsonl still loads.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CRITPATH = [sys.executable, "-m", "harness"]


def _session_pids(sid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,sid="], capture_output=True, text=True).stdout
    return [int(p) for p, s in (line.split() for line in out.splitlines()) if int(s) == sid]


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for p, pp in (map(int, line.split()) for line in out.splitlines()):
        children.setdefault(pp, []).append(p)
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def _zombie(pid: int) -> bool:
    """Exited, waiting to be reaped (by init, once its parent is gone): no longer running."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _command(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return "(gone)"


def _listeners(pids: set[int]) -> int:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if any(f"pid={p}," in line for p in pids))


def trial(args, n: int, root: Path) -> dict:
    out = root / f"run-{n}"
    proc = subprocess.Popen(CRITPATH + ["run", "--families", args.families, "--out", str(out)], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    delay = random.uniform(2.0, args.max_delay)
    time.sleep(delay)
    seen: set[int] = {proc.pid, *_descendants(proc.pid)}  # everything the run has started so far
    ranks = [p for p in _descendants(proc.pid) if p in seen]
    if args.kill_rank and ranks:
        os.kill(ranks[-1], signal.SIGKILL)
        try:
            proc.wait(timeout=300)  # the run goes on without that rank and finishes
        except subprocess.TimeoutExpired:
            proc.kill()
    else:
        proc.send_signal(getattr(signal, f"SIG{args.signal}"))
        proc.wait(timeout=60)
    time.sleep(3)  # parent-death signals and the supervisor's last kills land
    left = [p for p in seen if os.path.exists(f"/proc/{p}")]
    left += [p for p in _session_pids(proc.pid) if p not in left]
    zombies = [p for p in left if _zombie(p)]
    left = [p for p in left if p not in zombies]
    listeners = _listeners(set(left))  # before anything is cleaned up
    left_commands = [_command(p) for p in left]
    loads = subprocess.run(CRITPATH + ["show", str(out)], capture_output=True, text=True).returncode
    meta = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    results = out / "results.jsonl"
    records = results.read_text().count("\n") if results.exists() else 0

    def pool_dirs() -> int:
        return sum(1 for d in os.listdir(tempfile.gettempdir()) if d.startswith(f"critpath-run-{proc.pid}-"))

    left_now = pool_dirs()
    # A SIGKILLed parent cannot remove its pool directory; the next run's start does.
    subprocess.run(CRITPATH + ["run", "--case", "selftest/fault_rank=0,mode=noop,world=2", "--out", str(out) + "-next"],
                   capture_output=True)
    for p in left:  # leave the machine clean for the next trial, after counting
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return {"trial": n, "delay_s": round(delay, 1), "exit": proc.returncode, "processes_left": len(left), "left": left_commands, "zombies": len(zombies),
            "listeners_left": listeners, "pool_dir_at_exit": left_now, "pool_dirs_left": pool_dirs(),
            "show_exit": loads, "state": meta.get("state"), "records": records}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--signal", choices=("KILL", "TERM", "INT"), default="KILL")
    p.add_argument("--kill-rank", action="store_true", help="SIGKILL one rank instead of the parent")
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--max-delay", type=float, default=20.0)
    p.add_argument("--families", default="rpc,allreduce")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    random.seed(args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.trials):
            rows.append(trial(args, n, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    bad = [r for r in rows if r["processes_left"] or r["listeners_left"] or r["pool_dirs_left"] or r["show_exit"] == 2]
    print(f"{len(rows) - len(bad)} of {len(rows)} trials left nothing behind and kept a loadable results file")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
