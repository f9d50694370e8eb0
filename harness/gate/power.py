"""``critpath gate-power``: the gate's own benchmark, its false-alarm rate and detection power.

The injected cost is ``selftest/mode=spin``: a fixed amount of CPU work per step, so a candidate
with ``spin_iters`` x 1.10 does 10 % more work (a known slowdown, carrying the machine's real
noise). Each trial is a real gate run through the same engine as ``critpath gate``: fresh
processes, interleaved A B / B A. The base side supplies the reference spin case, the candidate
the reference (A/A) and the slowed-down cases (A/B); both sides run all of these cases in every
process, in the same shuffled order, and each pair compares the base's reference case with the
candidate's case.

Two figures come out, labelled apart:

- measured: the verdicts of the real trials (few, because each trial takes minutes here);
- resampled: many gate decisions drawn from the pool of all measured processes (``--draws`` sets
  of ``--repeats`` rounds, without replacement, each round keeping its base and candidate process
  together so interleaving is preserved). Those draws share processes, so their rates are more
  precise than the pool they come from really is; they say how the gate behaves on this
  machine's measured noise, not on fresh noise.

Each pair is decided as a one-case gate (no Holm across the pairs: a false alarm rate per gate
run of one case is what is being measured).
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.gate import ab
from harness.gate.stats import Outcome, Policy, verdict
from harness.gate.trees import WORKTREE, Tree, repo_root
from harness.gate.values import process_value
from harness.store import ResultsFileError, load_records

SPIN_CASE = "selftest/fault_rank=0,mode=spin,spin_iters={iters},world=1"


def _csv_floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def register(sub) -> None:
    p = sub.add_parser("gate-power", help="measure the gate's false-alarm rate and detection power (injected slowdowns)")
    p.add_argument("--trials", type=int, default=6, help="real gate runs (default 6)")
    p.add_argument("--repeats", type=int, default=10, help="processes per side per gate run (default 10)")
    p.add_argument("--spin-iters", type=int, default=1000, help="work per step of the reference case (default 1000)")
    p.add_argument("--slowdowns", type=_csv_floats, default=(0.05, 0.10, 0.20), help="injected extra work (default 0.05,0.10,0.20)")
    p.add_argument("--statistics", default="p50_ns,p10_ns", help="per-process statistics to evaluate (default p50_ns,p10_ns)")
    p.add_argument("--min-effect", type=float, default=0.05, help="gate minimum effect (default 0.05)")
    p.add_argument("--alpha", type=float, default=0.01, help="gate alpha (default 0.01)")
    p.add_argument("--draws", type=int, default=2000, help="resampled gate decisions per pair (default 2000)")
    p.add_argument("--iters", type=int, default=2000, help="timed iterations per case (default 2000)")
    p.add_argument("--out", type=Path, default=Path("reports/gate-power"), help="directory for runs and power.json")
    p.add_argument("--from-json", type=Path, help="recompute the tables from a power.json instead of measuring")
    p.add_argument("--from-dir", type=Path, help="recompute from the trial directories of an earlier measurement "
                   "(any --statistics, from the raw records)")
    p.add_argument("--trial-walls", type=_csv_floats, help="with --from-dir: wall seconds per trial when no trial.json")
    p.set_defaults(func=cmd_power)


def _pairs(spin_iters: int, slowdowns: Sequence[float]) -> list[ab.GateCase]:
    ref = SPIN_CASE.format(iters=spin_iters)
    pairs = [ab.GateCase("A/A", ref, ref)]
    for s in slowdowns:
        pairs.append(ab.GateCase(f"+{s * 100:g} %", ref, SPIN_CASE.format(iters=round(spin_iters * (1 + s)))))
    return pairs


def _rounds(trial_dir: Path, pairs: Sequence[ab.GateCase], statistics: Sequence[str], repeats: int) -> list[dict]:
    """One row per repeat with both processes usable: the statistic of each pair's cases."""
    rows = []
    for repeat in range(repeats):
        dirs = {side: trial_dir / side / f"rep-{repeat:03d}" for side in (ab.BASE, ab.CANDIDATE)}
        try:
            records = {side: {r.case_id: r for r in load_records(d)} for side, d in dirs.items()}
        except ResultsFileError:
            continue
        try:
            if not all(r.ok for side in records.values() for r in side.values()):
                continue
            row = {"values": {}}
            for stat in statistics:
                row["values"][stat] = {
                    "base": process_value(records[ab.BASE][pairs[0].base_id], stat),
                    **{p.name: process_value(records[ab.CANDIDATE][p.cand_id], stat) for p in pairs},
                }
        except KeyError:
            continue
        rows.append(row)
    return rows


def _document(args, pairs, statistics, trials) -> dict:
    return {
        "schema": "critpath.gate-power/1", "spin_iters": args.spin_iters, "slowdowns": list(args.slowdowns),
        "pairs": [p.name for p in pairs], "statistics": list(statistics), "repeats": args.repeats,
        "iters": args.iters, "min_effect": args.min_effect, "alpha": args.alpha, "trials": trials,
    }


def measure(args) -> dict:
    repo = repo_root(Path.cwd())
    tree = Tree("base", WORKTREE, repo, None)  # same code both sides; the cost is in the case
    pairs = _pairs(args.spin_iters, args.slowdowns)
    # Both sides run every case, in the same shuffled order: processes of identical make-up, so
    # the A/A pair is a true A/A (a case measured alone in its process and the same case measured
    # after others differ by several per cent here).
    run_cases = [ab.GateCase.same(case_id) for case_id in dict.fromkeys(p.cand_id for p in pairs)]
    statistics = [s.strip() for s in args.statistics.split(",") if s.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    trials = []
    for t in range(args.trials):
        start = time.perf_counter()
        out = args.out / f"trial-{t:02d}"
        ab.run_interleaved(run_cases, tree, replace(tree, label="candidate"), args.repeats, out,
                           ["--iters", str(args.iters)], 600.0, seed=t,
                           progress=lambda r: print(f"  trial {t + 1}/{args.trials} {r.side:<9} repeat "
                                                    f"{r.repeat + 1}: {r.wall_s:.1f} s", file=sys.stderr))
        wall_s = time.perf_counter() - start
        (out / "trial.json").write_text(json.dumps({"wall_s": wall_s}) + "\n")
        rounds = _rounds(out, pairs, statistics, args.repeats)
        trials.append({"trial": t, "wall_s": wall_s, "rounds": rounds})
        # Saved after every trial, so an interrupted measurement keeps what it measured.
        (args.out / "power.json").write_text(json.dumps(_document(args, pairs, statistics, trials), indent=1) + "\n")
        print(f"trial {t + 1}/{args.trials}: {len(rounds)} usable rounds, {wall_s:.0f} s", file=sys.stderr)
    return _document(args, pairs, statistics, trials)


def from_dir(args) -> dict:
    """Rebuild the document from the trial directories (any statistic, recomputed from the raw
    records). A trial's wall time comes from its trial.json, else from ``--trial-walls``."""
    pairs = _pairs(args.spin_iters, args.slowdowns)
    statistics = [s.strip() for s in args.statistics.split(",") if s.strip()]
    walls = list(args.trial_walls or ())
    trials = []
    for t, trial_dir in enumerate(sorted(args.from_dir.glob("trial-*"))):
        meta = trial_dir / "trial.json"
        wall_s = json.loads(meta.read_text())["wall_s"] if meta.exists() else (walls[t] if t < len(walls) else None)
        trials.append({"trial": t, "wall_s": wall_s, "rounds": _rounds(trial_dir, pairs, statistics, args.repeats)})
    return _document(args, pairs, statistics, trials)


def analyse(data: dict, draws: int, seed: int = 0) -> dict:
    policy = Policy(alpha=data["alpha"], min_effect=data["min_effect"], n_resamples=200)
    n = data["repeats"]
    out = {"measured": {}, "resampled": {}, "noise": {},
           "wall_s": [t["wall_s"] for t in data["trials"] if t["wall_s"] is not None]}
    pool = [row for t in data["trials"] for row in t["rounds"]]
    rng = np.random.default_rng(seed)
    for stat in data["statistics"]:
        measured, resampled = {}, {}
        base_pool = np.array([row["values"][stat]["base"] for row in pool])
        out["noise"][stat] = {
            "base_log_sd": float(np.std(np.log(base_pool), ddof=1)) if len(pool) > 1 else None,
            "pool_rounds": len(pool),
        }
        for name in data["pairs"]:
            outcomes = []
            for t in data["trials"]:
                rows = t["rounds"]
                if len(rows) < 2:
                    outcomes.append(Outcome.COULD_NOT_RUN)
                    continue
                outcomes.append(verdict([r["values"][stat]["base"] for r in rows],
                                        [r["values"][stat][name] for r in rows], policy).outcome)
            measured[name] = {o: outcomes.count(o) for o in Outcome.ALL if outcomes.count(o)}
            cand_pool = np.array([row["values"][stat][name] for row in pool])
            counts = {o: 0 for o in Outcome.ALL}
            if len(pool) >= n:
                for _ in range(draws):
                    idx = rng.choice(len(pool), size=n, replace=False)
                    counts[verdict(base_pool[idx], cand_pool[idx], policy).outcome] += 1
                resampled[name] = {o: c / draws for o, c in counts.items() if c}
                resampled[name]["median_ratio"] = float(np.median(cand_pool) / np.median(base_pool))
        out["measured"][stat] = measured
        out["resampled"][stat] = resampled
    return out


def table(data: dict, result: dict) -> str:
    lines = []
    for stat in data["statistics"]:
        lines.append(f"statistic `{stat}`, {data['repeats']} repeats per side, min effect "
                     f"{data['min_effect'] * 100:g} %, alpha {data['alpha']:g}; per-process noise (log sd of base) "
                     f"{(result['noise'][stat]['base_log_sd'] or 0) * 100:.1f} %, pool {result['noise'][stat]['pool_rounds']} rounds")
        lines.append("")
        lines.append("| pair | pooled ratio | measured trials: regressed / all | resampled: regressed | improved | unchanged | inconclusive |")
        lines.append("|---|---|---|---|---|---|---|")
        for name in data["pairs"]:
            m = result["measured"][stat].get(name, {})
            r = result["resampled"][stat].get(name, {})
            lines.append(f"| {name} | {r.get('median_ratio', float('nan')):.3f} | {m.get(Outcome.REGRESSED, 0)} / "
                         f"{sum(m.values())} | {r.get(Outcome.REGRESSED, 0) * 100:.1f} % | "
                         f"{r.get(Outcome.IMPROVED, 0) * 100:.1f} % | {r.get(Outcome.UNCHANGED, 0) * 100:.1f} % | "
                         f"{r.get(Outcome.INCONCLUSIVE, 0) * 100:.1f} % |")
        lines.append("")
    walls = result["wall_s"]
    if walls:
        lines.append(f"wall time per gate run ({len(data['pairs'])} pairs, {data['repeats']} repeats per side): "
                     f"median {np.median(walls):.0f} s, max {max(walls):.0f} s over {len(walls)} runs")
    return "\n".join(lines)


def cmd_power(args) -> int:
    if args.from_json:
        data = json.loads(args.from_json.read_text())
    elif args.from_dir:
        data = from_dir(args)
    else:
        if args.repeats < 2 or args.trials < 1:
            print("critpath gate-power: error: need --repeats >= 2 and --trials >= 1", file=sys.stderr)
            return 2
        if args.out.exists() and any(args.out.iterdir()):
            print(f"critpath gate-power: error: {args.out} is not empty; choose another --out", file=sys.stderr)
            return 2
        data = measure(args)
    result = analyse(data, args.draws)
    text = table(data, result)
    print(text)
    if not (args.from_json or args.from_dir):
        (args.out / "power.md").write_text(text + "\n")
    return 0
