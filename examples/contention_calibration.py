"""Calibrate the contention rule on this machine: the same sweep quiet and beside CPU-bound
neighbours, interleaved, and what the rule flagged in each (docs/contention.md).

    python examples/contention_calibration.py --out calib --pairs 3
    python examples/contention_calibration.py --out calib --report      # tally what is there

Each pair runs `critpath run --families F` once alone and once beside ``--neighbours`` busy
processes (`while True: pass`), the order alternating pair by pair (A B B A ...) so that a drift
of the machine over the campaign falls on both arms. A run already whole in ``--out`` is kept, so
the campaign resumes where it stopped; one left incomplete by a kill is set aside and run again.
Nothing else should run on the machine meanwhile: the quiet arm is only as quiet as the machine.

What it counts, per arm: records flagged contended, records the rule could not judge, and the
records a neighbour distorted (a loaded record whose p50 is at least ``DISTORTED_P50_RATIO`` times
the median p50 of the same case over the quiet runs). The rates are per record with Clopper-Pearson
intervals; records of one run share its conditions, so those intervals are narrower than the
evidence, and the per-run counts are given beside them. The same records are judged again by the
rule without its foreign-CPU term (PSI pressure instead), so the two rules are compared on
identical evidence.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from scipy.stats import binomtest

CRITPATH = [sys.executable, "-m", "harness"]
QUIET, LOADED = "quiet", "loaded"
# A loaded record counts as distorted when its median iteration is this much slower than the
# case's median over the quiet runs: well above the 5-20 % run-to-run spread of a quiet p50 here.
DISTORTED_P50_RATIO = 1.5
NEIGHBOUR = "while True: pass"


def _arms(pairs: int) -> list[tuple[str, int]]:
    """(arm, pair) in run order: A B, then B A, alternating."""
    order = []
    for k in range(pairs):
        order += [(QUIET, k), (LOADED, k)] if k % 2 == 0 else [(LOADED, k), (QUIET, k)]
    return order


def _whole(run_dir: Path) -> bool:
    from harness.core.store import ResultsFileError, load_run
    try:
        return load_run(run_dir).incomplete == ""
    except ResultsFileError:
        return False


def _set_aside(run_dir: Path) -> Path:
    n = 1
    while run_dir.with_name(f"{run_dir.name}.incomplete-{n}").exists():
        n += 1
    target = run_dir.with_name(f"{run_dir.name}.incomplete-{n}")
    run_dir.rename(target)
    return target


def _run_arm(arm: str, run_dir: Path, families: str, neighbours: int) -> int:
    busy = [subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) for _ in range(neighbours if arm == LOADED else 0)]
    try:
        if busy:
            time.sleep(2.0)  # the neighbours at full speed, and PSI's 10 s average moving, before the first case
        return subprocess.run([*CRITPATH, "run", "--families", families, "--out", str(run_dir)],
                              stdout=subprocess.DEVNULL).returncode
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def campaign(out: Path, pairs: int, families: str, neighbours: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    order = _arms(pairs)
    took: list[float] = []
    for i, (arm, k) in enumerate(order, 1):
        run_dir = out / f"{arm}-{k}"
        if run_dir.exists() and _whole(run_dir):
            print(f"[{i}/{len(order)}] {run_dir.name}: kept (whole)", file=sys.stderr)
            continue
        if run_dir.exists():
            print(f"[{i}/{len(order)}] {run_dir.name}: incomplete, set aside as {_set_aside(run_dir).name}",
                  file=sys.stderr)
        eta = f", about {median(took) * (len(order) - i + 1):.0f} s left" if took else ""
        print(f"[{i}/{len(order)}] {run_dir.name} ({arm}{eta})", file=sys.stderr)
        start = time.monotonic()
        code = _run_arm(arm, run_dir, families, neighbours)
        took.append(time.monotonic() - start)
        print(f"[{i}/{len(order)}] {run_dir.name}: exit {code}, {took[-1]:.0f} s", file=sys.stderr)


def _interval(k: int, n: int) -> str:
    if n == 0:
        return "no records"
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return f"{k}/{n} = {k / n:.0%} (95 % CI {ci.low:.0%}-{ci.high:.0%})"


def tally(out: Path) -> dict:
    from dataclasses import replace

    from harness.core.contention import RULE, judge
    from harness.core.store import load_run

    psi_rule = replace(RULE, foreign_cpu_share_min=None)

    def by_psi(record) -> bool:
        return judge(record.contention, record.samples_ns, psi_rule).contended is True

    runs = {arm: [load_run(p) for p in sorted(out.glob(f"{arm}-*")) if p.is_dir() and "." not in p.name]
            for arm in (QUIET, LOADED)}
    quiet_p50: dict[str, list[float]] = {}
    for run in runs[QUIET]:
        for r in run.records:
            if r.ok and r.samples_ns:
                quiet_p50.setdefault(r.case_id, []).append(median(r.samples_ns))
    result: dict = {"distorted_p50_ratio": DISTORTED_P50_RATIO, "arms": {}}
    for arm, arm_runs in runs.items():
        records = [r for run in arm_runs for r in run.records if r.ok and r.samples_ns]
        verdicts = [r.contention_verdict.contended for r in records]
        distorted = [r for r in records
                     if arm == LOADED and r.case_id in quiet_p50
                     and median(r.samples_ns) >= DISTORTED_P50_RATIO * median(quiet_p50[r.case_id])]
        result["arms"][arm] = {
            "runs": len(arm_runs),
            "records": len(records),
            "flagged": sum(v is True for v in verdicts),
            "undecided": sum(v is None for v in verdicts),
            "runs_with_a_flag": sum(any(r.contention_verdict.contended is True for r in run.records)
                                    for run in arm_runs),
            "distorted": len(distorted),
            "distorted_flagged": sum(r.contention_verdict.contended is True for r in distorted),
            "flagged_by_psi_rule": sum(by_psi(r) for r in records),
            "distorted_flagged_by_psi_rule": sum(by_psi(r) for r in distorted),
            "runs_with_a_flag_by_psi_rule": sum(any(by_psi(r) for r in run.records if r.ok and r.samples_ns)
                                                for run in arm_runs),
        }
    return result


def print_tally(result: dict) -> None:
    for arm, t in result["arms"].items():
        print(f"{arm}: {t['runs']} runs, {t['records']} records; flagged {_interval(t['flagged'], t['records'])}; "
              f"undecided {t['undecided']}; runs with a flagged record {t['runs_with_a_flag']}/{t['runs']}")
        print(f"  by the PSI rule: flagged {_interval(t['flagged_by_psi_rule'], t['records'])}; "
              f"runs with a flagged record {t['runs_with_a_flag_by_psi_rule']}/{t['runs']}")
        if arm == LOADED:
            print(f"  distorted (p50 >= {result['distorted_p50_ratio']}x the quiet median): {t['distorted']}; "
                  f"of them flagged {_interval(t['distorted_flagged'], t['distorted'])}, by the PSI rule "
                  f"{_interval(t['distorted_flagged_by_psi_rule'], t['distorted'])}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--families", default="allreduce")
    p.add_argument("--neighbours", type=int, default=os.cpu_count() or 2)
    p.add_argument("--report", action="store_true", help="tally the runs in --out; run nothing")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwind: the neighbours are killed
    if not args.report:
        campaign(args.out, args.pairs, args.families, args.neighbours)
    result = tally(args.out)
    (args.out / "calibration.json").write_text(json.dumps(result, indent=1) + "\n")
    print_tally(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
