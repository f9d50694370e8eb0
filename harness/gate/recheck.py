"""``critpath compare`` on a gate's own directories: its pairs read back from the records and
tested again, so that any verdict can be checked from what the gate left on disk.

A gate writes ``base/gen-NNN/round-RRR/`` and ``candidate/gen-NNN/round-RRR/``: one generation
is one pair of fresh processes, and its value per case is computed exactly as the gate does
(``schedule.pair_value``). A generation that lacks a round on either side, or holds a failed
record, is not a pair; a case with such a failed record cannot be rechecked, as the gate could
not run it. A generation whose sides' rounds differ with no failed record to say why (a process
that died or hung and left nothing) is a failure of its cases, never skipped: the gate stopped
there for a reason, and the pairs around it are not all it saw. Nor is a gate that did not finish
rechecked (its gate.json, written when it ends, is missing or says why it stopped), nor directories
that are not all of one gate: ``whole_gate`` is the rule.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping, Optional, Sequence

from harness.core import figures
from harness.core.claim import claim_state
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
from harness.core.measurement import measurement_key
from harness.gate.generations import measured_at, rounds_held
from harness.gate.outputs import SCHEMA_ID, GateResult, output_paths
from harness.gate.schedule import GATE_ID_FILE, SIDES, CaseTrack, pair_value
from harness.gate.stats import Outcome, Policy, Verdict
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


def whole_gate(base_dir: Path, cand_dir: Path, statistic: str) -> tuple[dict[str, CaseTrack], int]:
    """``read_pairs`` of a gate's two sides, once they are shown to be all of one gate that
    finished; ResultsFileError naming what disagrees otherwise. The one rule of what a gate's
    directories must be to be read back: the ``base/`` and ``candidate/`` of one directory whose
    gate.json the gate wrote when it ended (``said_of``); on each side exactly the generations
    gate.json counts, numbered without a gap, each holding that gate's ID (``held_to``); and the
    cases and pairs read back those gate.json reports (``agrees``); each side's generations
    measured at its commit (``measured_at``), each with the rounds the gate ran in it
    (``rounds_held``). Deleting a generation or a round, or bringing one or a side from another
    gate, would otherwise pick which pairs decide."""
    gate_dir = _one_gate(Path(base_dir), Path(cand_dir))
    path = output_paths(gate_dir)["json"]
    said = said_of(path, base_dir)
    dirs = dict(zip(SIDES, (Path(base_dir), Path(cand_dir))))
    for side in dirs.values():
        held_to(said, path, side)
    held = read_rounds(dirs)
    rounds_held(said, path, dirs, held)
    tracks, rounds = read_pairs(base_dir, cand_dir, statistic, held)  # a side's copy is named as one here
    for label, side in dirs.items():
        measured_at(said, path, label, side)
    agrees(said, path, tracks)
    return tracks, rounds


def _one_gate(base_dir: Path, cand_dir: Path) -> Path:
    """The gate directory both sides are the base/ and candidate/ of: the pairs of one generation
    were measured together only within one gate."""
    parents = {side: Path(d).absolute().parent for side, d in zip(SIDES, (base_dir, cand_dir))}
    names = [Path(d).absolute().name for d in (base_dir, cand_dir)]
    if names != list(SIDES) or len({p.resolve() for p in parents.values()}) != 1:
        raise ResultsFileError(
            f"not one gate: {base_dir} and {cand_dir} are not the {SIDES[0]}/ and {SIDES[1]}/ of one gate's "
            "directory; a gate's pairs are read back only from the two sides it measured together "
            f"(give GATE/{SIDES[0]} GATE/{SIDES[1]})")
    return parents[SIDES[0]]


def said_of(path: Path, side: Path) -> dict:
    """gate.json of the gate that measured ``side``, checked as the gate writes it
    (``outputs.GateResult.to_dict``) and finished: its exit code and headline those its error and
    cases make, no error, both sides measured, its generations counted. Refused as incomplete when
    missing (killed, or still running) or when it says the gate stopped as a whole; its pairs then
    are a part of what it measured, as a killed run's records are (``store.incompleteness``)."""
    if not path.is_file():
        raise ResultsFileError(f"incomplete: {path.parent} holds no gate.json, which a gate writes when it ends: "
                               f"{_why_no_result(path.parent, side)}")
    said = read_json(path)
    wrong = _field_types(said)
    if wrong:
        raise ResultsFileError(f"not whole: {path}: {wrong}; it is not the gate.json a gate writes when it ends")
    if said["error"]:
        raise ResultsFileError(f"incomplete: {path} says the gate that measured {side} stopped: {said['error']}")
    cases = {c["case_id"]: Verdict(c["outcome"], "", 0.0, 0.0, likely_regression=c["likely_regression"])
             for c in said["cases"]}
    made = GateResult(said["mode"], said["statistic"], said["unit"], Policy(), cases, error=said["error"],
                      fail_on_inconclusive=said["fail_on_inconclusive"], allow_inconclusive=said["allow_inconclusive"])
    for name, value in (("exit_code", made.exit_code), ("headline", made.headline), ("counts", made.counts())):
        if said[name] != value:
            raise ResultsFileError(f"not whole: {path}: {name} {said[name]!r} is not what its error and cases make "
                                   f"({value!r}): the gate did not write it so, or did not finish")
    for label in SIDES:
        if not said[label] or said[label].get("measured") is False or not said[label].get("commit"):
            raise ResultsFileError(f"incomplete: {path}: {label} {said[label]!r} is no side the gate measured "
                                   "(a gate that stopped before its result writes its sides so)")
    generations, gate_id = said["extra"].get("generations"), said["extra"].get("gate_id")
    if not isinstance(generations, int) or isinstance(generations, bool) or generations < 0:
        raise ResultsFileError(f"not whole: {path}: extra.generations {generations!r}: expected the count of "
                               "generations the gate ran")
    if gate_id is not None and not (isinstance(gate_id, str) and gate_id):
        raise ResultsFileError(f"not whole: {path}: extra.gate_id {gate_id!r}: expected the gate's ID")
    return said


def _why_no_result(gate_dir: Path, side: Path) -> str:
    """What a gate directory without gate.json tells of its gate, by its claim (``claim_state``):
    a gate holds its --out while it runs, a killed one leaves its claim, and one that ended gave
    it up, so without a claim it ended and could not write its outputs (all of them or none)."""
    state = claim_state(gate_dir)
    why = {"held": f"the gate that measured {side} did not finish: it is still running (it holds {gate_dir})",
           "left": f"the gate that measured {side} did not finish: it was killed (its claim on {gate_dir} "
                   "stayed behind)",
           "": f"the gate that measured {side} ended (it holds no claim on {gate_dir}, which a gate gives up when "
               "it ends) without writing it: it could not write its outputs (a full disk? its log says), or it did "
               "not finish and its claim was removed"}[state]
    return f"{why}; its pairs are not all it measured, or not known to be"


def _field_types(said: dict) -> str:
    """What in gate.json ``said`` is not as a finished A/B gate writes it ("" when all is)."""
    if said.get("schema") != SCHEMA_ID:
        return f"schema {said.get('schema')!r}, expected {SCHEMA_ID!r}"
    if said.get("mode") != "ab":
        return f"mode {said.get('mode')!r}: only an A/B gate (mode 'ab') writes base/ and candidate/ generations"
    kinds = {"exit_code": int, "headline": str, "error": str, "statistic": str, "unit": str, "counts": dict,
             "fail_on_inconclusive": bool, "allow_inconclusive": bool, "cases": list, "extra": dict,
             # null: the gate stopped before it knew anything of the side (``error`` says why)
             "base": (dict, type(None)), "candidate": (dict, type(None))}
    for name, kind in kinds.items():
        if not isinstance(said.get(name), kind) or (kind is int and isinstance(said.get(name), bool)):
            return f"{name} {said.get(name)!r}: expected {getattr(kind, '__name__', 'an object or null')}"
    for i, case in enumerate(said["cases"]):
        if (not isinstance(case, dict) or not isinstance(case.get("case_id"), str)
                or case.get("outcome") not in Outcome.ALL or not isinstance(case.get("likely_regression"), bool)):
            return f"cases[{i}] {case!r}: expected a case_id, an outcome of {', '.join(Outcome.ALL)}, likely_regression"
    return ""


def held_to(said: dict, path: Path, side: Path) -> None:
    """ResultsFileError naming the first generation of ``side`` that is not one of the gate's: the
    gate numbers its generations gen-000 on, one per pair it ran (``extra.generations``), and
    writes its ID into each (GATE_ID_FILE). A gate.json of a gate older than its ID (no
    ``extra.gate_id``) holds its generations to their count and numbering only."""
    count, gate_id = said["extra"]["generations"], said["extra"].get("gate_id")
    expected = [f"gen-{n:03d}" for n in range(count)]
    found = sorted(p.name for p in side.glob("gen-*"))
    if found != expected:
        missing = [n for n, name in enumerate(expected) if name not in found]
        extra = [name for name in found if name not in expected]
        if missing:
            n = missing[0]
            where = (f"{expected[n]} is missing" + (f" after {expected[n - 1]}" if n else "")
                     + (f" and before {expected[n + 1]}" if n + 1 < count else ""))
        else:
            where = f"{extra[0]} is not one of them"
        raise ResultsFileError(f"not whole: {path} says extra.generations: {count}, and {side} holds {len(found)} "
                               f"generation directories: {where}; a generation removed, or added, picks which "
                               "pairs decide")
    for name in found:
        held = side / name / GATE_ID_FILE
        text = held.read_text(errors="replace").strip() if held.is_file() else None
        if text != gate_id:
            raise ResultsFileError(
                f"not one gate: {held} " + (f"names gate {text!r}" if text is not None else "is missing")
                + f" where {path} names {'gate ' + repr(gate_id) if gate_id else 'no gate ID'}: "
                "the generation is not one this gate measured")


def agrees(said: dict, path: Path, tracks: Mapping[str, CaseTrack]) -> None:
    """ResultsFileError when the cases read back, or the pairs of one, are not those gate.json
    reports: a case on disk it does not name, or a case it tested on n pairs per side that the
    generations on disk give another number of (a case read back as could-not-run tests none)."""
    cases = {c["case_id"]: c for c in said["cases"]}
    for case_id, track in tracks.items():
        if case_id not in cases:
            raise ResultsFileError(f"not whole: {path} names no case {case_id}, which the generations on disk hold")
        compared, detail = cases[case_id].get("comparison"), cases[case_id].get("detail")
        if track.problem:
            continue  # could not run on disk: no pairs of it are tested
        if not isinstance(compared, dict):
            # The gate tested none of its pairs: too few of them (detail.n_pairs says how many),
            # or a failure, which the generations on disk must hold too.
            n = detail.get("n_pairs") if isinstance(detail, dict) else None
            if n != len(track.pairs):
                raise ResultsFileError(
                    f"not whole: {path} says {case_id} {cases[case_id].get('outcome')} "
                    + (f"on {n!r} pairs" if n is not None else f"({cases[case_id].get('reason')!r})")
                    + f", and the generations on disk give {len(track.pairs)} pairs with no failure of it")
            continue
        for label, key in zip(SIDES, ("n_base", "n_cand")):
            if compared.get(key) != len(track.values[label]):
                raise ResultsFileError(
                    f"not whole: {path} says {case_id} was tested on {key}: {compared.get(key)!r}, and the "
                    f"generations on disk give {len(track.values[label])} pairs")


_ROUND = re.compile(r"round-(\d{3})")


def _rounds(gen_dir: Path) -> list[dict]:
    """Each round of one generation, case ID -> its record ({} for a last round that holds no
    results: a process that left no record); ResultsFileError naming the round when the rounds are
    not numbered round-000 on without a gap, when one before the last holds no results, when its
    file holds a case twice, a record of a run other than its generation's (one worker process,
    one run ID), or a record another round holds (a round copied): a record appended by hand, or a
    round removed or copied, would otherwise replace, or join, the pair's."""
    rounds: list[dict] = []
    seen: list = []  # the generation's records so far: all of one run
    keys: dict = {}  # what each record measured -> the round holding it
    dirs = sorted(d for d in gen_dir.glob("round-*") if d.is_dir())
    for number, d in enumerate(dirs):
        if not _ROUND.fullmatch(d.name) or d.name != f"round-{number:03d}":
            raise ResultsFileError(f"not whole: {d}: expected round-{number:03d} here: a gate numbers a "
                                   f"generation's rounds round-000 on, without a gap ({gen_dir})")
        if not (d / RESULTS).exists():
            if number + 1 < len(dirs):
                raise ResultsFileError(f"not whole: {d} holds no {RESULTS}, and a later round follows it: a round "
                                       "the gate went on from left its records")
            rounds.append({})
            continue
        records = load_records(d)
        seen += records
        wrong = of_runs(seen, f"one generation ({gen_dir.name}, one worker)") or recorded_twice(records)
        if wrong:
            raise ResultsFileError(f"{d / RESULTS}: {wrong}")
        for r in records:
            # a failed record has no samples to know it by: one case failed at one instant
            key = measurement_key(r) or (r.case_id, r.started_at, r.status)
            if key in keys:
                raise ResultsFileError(f"not whole: {d / RESULTS}: its record of {r.case_id} (started "
                                       f"{r.started_at}) is the one {keys[key] / RESULTS} holds: a round copied "
                                       "counts one measurement twice")
            keys[key] = d
        rounds.append({r.case_id: r for r in records})
    return rounds


def read_rounds(dirs: Mapping[str, Path]) -> dict[str, dict[str, list[dict]]]:
    """Per generation on either side, each side's rounds (``_rounds``)."""
    generations = sorted(set(p.name for side in SIDES for p in dirs[side].glob("gen-*")))
    return {gen: {side: _rounds(dirs[side] / gen) for side in SIDES} for gen in generations}


def read_pairs(base_dir: Path, cand_dir: Path, statistic: str,
               held: Optional[Mapping[str, Mapping[str, list]]] = None) -> tuple[dict[str, CaseTrack], int]:
    """Per case, the pairs of every generation both sides completed; and the rounds per pair. A
    generation one side has fewer rounds of (none, or none at all) is no pair: a failed record in
    it is its cases' problem, and without one the generation is the problem of every case it
    names (of every case, when it names none)."""
    dirs = dict(zip(SIDES, (Path(base_dir), Path(cand_dir))))
    held = read_rounds(dirs) if held is None else held
    tracks: dict[str, CaseTrack] = {}
    unpaired: list[tuple[set, str]] = []  # (the cases a generation names, why it is no pair)
    rounds_per_pair = 0
    for gen, rounds in held.items():
        # One worker's run ID per side and generation: the same on both sides is a side's copy.
        disjoint_sides(runs=[LoadedRun(dirs[side] / gen, side, tuple(r for got in rounds[side] for r in got.values()))
                             for side in SIDES])
        if (not rounds[SIDES[0]] or len(rounds[SIDES[0]]) != len(rounds[SIDES[1]])
                or not all(got for side in SIDES for got in rounds[side])):
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
        _failed_in(gen, dirs, rounds, tracks)  # a case that failed in a round is left out of the rounds after it
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
    failed = _failed_in(gen, dirs, rounds, tracks)
    named = {case_id for side in SIDES for got in rounds[side] for case_id in got}
    if failed:
        return named, ""
    short, other = sorted(SIDES, key=lambda side: len(rounds[side]))
    empty = next((side for side in SIDES if rounds[side] and not rounds[side][-1]), None)
    lacks = (f"neither side has a round ({dirs[short] / gen}, {dirs[other] / gen})" if not rounds[other] else
             f"the {short} side has {len(rounds[short])} rounds where the {other} has {len(rounds[other])} "
             f"({dirs[short] / gen})" if len(rounds[short]) != len(rounds[other]) else
             f"the last round of the {empty} side holds no {RESULTS} ({dirs[empty] / gen})")
    return named, f"{gen}: {lacks}, and no record says why: a process died or hung without a record of it"


def _failed_in(gen: str, dirs: Mapping[str, Path], rounds: Mapping[str, list], tracks: dict) -> bool:
    """Each failed record of generation ``gen`` made its case's problem in ``tracks``; whether any was."""
    failed = False
    for side in SIDES:
        for got in rounds[side]:
            for case_id, record in got.items():
                if not record.ok:
                    failed = True
                    track = tracks.setdefault(case_id, CaseTrack(case_id))
                    track.problem = track.problem or f"{gen}: {side}: {failure_text([record])} ({dirs[side] / gen})"
    return failed


def describe(tracks: Mapping[str, CaseTrack]) -> str:
    n = max((len(t.pairs) for t in tracks.values()), default=0)
    return (f"a gate's own directories: {n} pairs of fresh processes read back and tested again at one look "
            "(all of alpha at once), not sequentially as the gate decided")
