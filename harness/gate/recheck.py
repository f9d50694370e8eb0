"""``critpath compare`` on a gate's own directories: its pairs read back from the records and
tested again, so that any verdict can be checked from what the gate left on disk.

A gate writes ``base/gen-NNN/round-RRR/`` and ``candidate/gen-NNN/round-RRR/``: one generation
is one pair of fresh processes, and its value per case is computed exactly as the gate does
(``schedule.pair_value``). A generation that lacks a round on either side, or holds a failed
record, is not a pair; a case with such a failed record cannot be rechecked, as the gate could
not run it. A generation whose sides' rounds differ with no failed record to say why (a process
that died or hung and left nothing) is a failure of its cases, never skipped: the gate stopped
there for a reason, and the pairs around it are not all it saw. Nor is a gate that did not finish
rechecked: its gate.json, written when it ends, is missing or says why it stopped.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from harness.core import figures
from harness.core.comparable import mismatch
from harness.core.figures import FigureUnavailable
from harness.core.store import (
    RESULTS,
    LoadedRun,
    ResultsFileError,
    distinct_run_ids,
    distinct_runs,
    load_records,
    of_runs,
    read_json,
    recorded_twice,
)
from harness.gate.outputs import output_paths
from harness.gate.schedule import SIDES, CaseTrack, pair_value
from harness.gate.values import failure_text


# A run on both sides is compared with itself: every ratio is 1 and the verdict "unchanged" is
# made by construction, not measured.
_SELF = "a run compared with itself (or a copy of it) shows no change by construction; give two different runs"


def disjoint_sides(paths: Sequence[Path] = (), runs: Sequence[LoadedRun] = ()) -> None:
    """ResultsFileError naming both places when the base and the candidate of a compare hold one
    run: the same directory by any path (``distinct_runs`` of the two sides' paths), or a copy: one
    run ID, or one measurement under two (``distinct_run_ids`` of the two sides' runs)."""
    try:
        distinct_runs(paths, _SELF)
        distinct_run_ids(runs, _SELF)
    except ResultsFileError as exc:
        raise ResultsFileError(f"base and candidate share a run: {exc}") from None


def is_gate_side(path: Path) -> bool:
    return Path(path).is_dir() and any(Path(path).glob("gen-*/round-*/results.jsonl"))


def unfinished(side: Path) -> str:
    """Why the gate that wrote the side directory ``side`` did not finish ("" when it did): its
    gate.json, which a gate writes when it ends, is missing (killed, or still running), or says the
    gate stopped as a whole (interrupted, could not run). Its pairs then are a part of what it
    measured, as a killed run's records are (``store.incompleteness``), and no verdict is read from
    them."""
    gate_dir = Path(side).absolute().parent
    path = output_paths(gate_dir)["json"]
    if not path.is_file():
        return (f"incomplete: {gate_dir} holds no gate.json, which a gate writes when it ends: the gate that "
                f"measured {side} did not finish (killed, or still running), and its pairs are not all it measured")
    stopped = read_json(path).get("error")
    if stopped:
        return f"incomplete: {path} says the gate that measured {side} stopped: {stopped}"
    return ""


def _rounds(gen_dir: Path) -> list[dict]:
    """Each round of one generation, case ID -> its record; ResultsFileError naming the round's
    file when it holds a case twice, or a record of a run other than its generation's (one worker
    process, one run ID): a record appended by hand would otherwise replace, or join, the pair's."""
    rounds: list[dict] = []
    seen: list = []  # the generation's records so far: all of one run
    for d in sorted(gen_dir.glob("round-*")):
        if not (d / RESULTS).exists():
            continue
        records = load_records(d)
        seen += records
        wrong = of_runs(seen, f"one generation ({gen_dir.name}, one worker)") or recorded_twice(records)
        if wrong:
            raise ResultsFileError(f"{d / RESULTS}: {wrong}")
        rounds.append({r.case_id: r for r in records})
    return rounds


def read_pairs(base_dir: Path, cand_dir: Path, statistic: str) -> tuple[dict[str, CaseTrack], int]:
    """Per case, the pairs of every generation both sides completed; and the rounds per pair. A
    generation one side has fewer rounds of (none, or none at all) is no pair: a failed record in
    it is its cases' problem, and without one the generation is the problem of every case it
    names (of every case, when it names none)."""
    dirs = dict(zip(SIDES, (Path(base_dir), Path(cand_dir))))
    generations = sorted(set(p.name for side in SIDES for p in dirs[side].glob("gen-*")))
    tracks: dict[str, CaseTrack] = {}
    unpaired: list[tuple[set, str]] = []  # (the cases a generation names, why it is no pair)
    rounds_per_pair = 0
    for gen in generations:
        rounds = {side: _rounds(dirs[side] / gen) for side in SIDES}
        # One worker's run ID per side and generation: the same on both sides is a side's copy.
        disjoint_sides(runs=[LoadedRun(dirs[side] / gen, side, tuple(r for got in rounds[side] for r in got.values()))
                             for side in SIDES])
        if not rounds[SIDES[0]] or len(rounds[SIDES[0]]) != len(rounds[SIDES[1]]):
            unpaired.append(_unpaired(gen, dirs, rounds, tracks))
            continue
        rounds_per_pair = max(rounds_per_pair, len(rounds[SIDES[0]]))
        case_ids = set.intersection(*(set(r) for side in SIDES for r in rounds[side]))
        for case_id in sorted(case_ids):
            track = tracks.setdefault(case_id, CaseTrack(case_id))
            if track.problem:
                continue
            records = {side: [r[case_id] for r in rounds[side]] for side in SIDES}
            bad = next((f"{side}: {failure_text(recs)}" for side, recs in records.items() if failure_text(recs)), "")
            bad = bad or mismatch(records) or ""
            if bad:
                track.problem = f"{gen}: {bad}"
                continue
            try:
                values = {side: [figures.value(r, statistic) for r in recs] for side, recs in records.items()}
            except FigureUnavailable as exc:
                track.problem = str(exc)
                continue
            for side in SIDES:
                track.values[side].append(values[side])
            track.pairs.append(pair_value(values[SIDES[0]], values[SIDES[1]]))
    for named, why in unpaired:
        if why and not (named or tracks):
            raise ResultsFileError(why)  # no case to give it to: nothing here was measured whole
        if why:
            for case_id in sorted(named or tracks):
                track = tracks.setdefault(case_id, CaseTrack(case_id))
                track.problem = track.problem or why
    return tracks, rounds_per_pair


def _unpaired(gen: str, dirs: Mapping[str, Path], rounds: Mapping[str, list], tracks: dict) -> tuple[set, str]:
    """A generation whose sides' rounds differ: each failed record in it made its case's problem
    in ``tracks`` (the gate stopped the generation at it); and, when it holds none, the cases it
    names with why it is no pair ("" when a failed record says why)."""
    failed = False
    for side in SIDES:
        for got in rounds[side]:
            for case_id, record in got.items():
                if not record.ok:
                    failed = True
                    track = tracks.setdefault(case_id, CaseTrack(case_id))
                    track.problem = track.problem or f"{gen}: {side}: {failure_text([record])} ({dirs[side] / gen})"
    named = {case_id for side in SIDES for got in rounds[side] for case_id in got}
    if failed:
        return named, ""
    short, other = sorted(SIDES, key=lambda side: len(rounds[side]))
    lacks = (f"neither side has a round ({dirs[short] / gen}, {dirs[other] / gen})" if not rounds[other] else
             f"the {short} side has {len(rounds[short])} rounds where the {other} has {len(rounds[other])} "
             f"({dirs[short] / gen})")
    return named, f"{gen}: {lacks}, and no record says why: a process died or hung without a record of it"


def describe(tracks: Mapping[str, CaseTrack]) -> str:
    n = max((len(t.pairs) for t in tracks.values()), default=0)
    return (f"a gate's own directories: {n} pairs of fresh processes read back and tested again at one look "
            "(all of alpha at once), not sequentially as the gate decided")
