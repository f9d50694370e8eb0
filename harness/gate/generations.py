"""What each generation of a finished gate holds on disk, held to what its gate.json says: the
commit each side was measured at, and the rounds each generation ran.

A gate runs ``extra.plan.rounds`` rounds in every generation, fewer only where the budget cut it
(``extra.cut`` names the generation and the rounds it ran) or where a failure ended it (the last
round of a side then holds the failed record, or nothing: a process that left no record; sides
that ran different numbers of rounds are no pair, and a failure of its cases on reading). Its
workers run in the side's own tree, and their fingerprints say at which commit. Rounds removed,
copied or renumbered, or sides swapped, would otherwise pick which rounds pair, or turn a
regression into an improvement, with nothing on disk to say so.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from harness.core.runfiles import FINGERPRINT
from harness.core.store import ResultsFileError, read_json
from harness.gate.schedule import MAX_ROUNDS, SIDES


def planned_rounds(said: dict, path: Path) -> dict[str, int]:
    """Per generation, the rounds the gate ran in it by its gate.json: ``extra.plan.rounds``, or
    for a generation the budget cut, the ``rounds_run`` its ``extra.cut`` entry says."""
    extra = said["extra"]
    plan = extra.get("plan")
    rounds = plan.get("rounds") if isinstance(plan, dict) else None
    if not isinstance(rounds, int) or isinstance(rounds, bool) or not 1 <= rounds <= MAX_ROUNDS:
        raise ResultsFileError(f"not whole: {path}: extra.plan.rounds {rounds!r}: expected the rounds per "
                               f"generation the gate ran (1 to {MAX_ROUNDS})")
    count = extra["generations"]
    planned = {f"gen-{n:03d}": rounds for n in range(count)}
    cut = extra.get("cut", [])
    if not isinstance(cut, list):
        raise ResultsFileError(f"not whole: {path}: extra.cut {cut!r}: expected a list of the generations the "
                               "budget cut")
    for i, entry in enumerate(cut):
        gen = entry.get("generation") if isinstance(entry, dict) else None
        ran = entry.get("rounds_run") if isinstance(entry, dict) else None
        fine = all(isinstance(v, int) and not isinstance(v, bool) for v in (gen, ran))
        if not fine or not 0 <= gen < count or not 1 <= ran < rounds or planned[f"gen-{gen:03d}"] != rounds:
            raise ResultsFileError(
                f"not whole: {path}: extra.cut[{i}] {entry!r}: expected a generation of the {count} it ran, "
                f"once, and the rounds it ran before the budget cut it (1 to {rounds - 1})")
        planned[f"gen-{gen:03d}"] = ran
    return planned


def rounds_held(said: dict, path: Path, dirs: Mapping[str, Path], rounds: Mapping[str, Mapping[str, list]]) -> None:
    """ResultsFileError naming the generation whose rounds on disk (``rounds``: generation -> side
    -> its rounds, each case -> record, {} for a round that holds no results) are not those the
    gate ran: more than it planned, or as many on both sides and fewer than planned with no
    failure in the last round to end it there (both sides' last rounds removed read as a pair)."""
    planned = planned_rounds(said, path)
    last = f"gen-{said['extra']['generations'] - 1:03d}"
    for gen, want in planned.items():
        held = rounds.get(gen, {side: [] for side in SIDES})
        n = {side: len(held[side]) for side in SIDES}
        where = (f"{gen} holds {n[SIDES[0]]} rounds on the {SIDES[0]} side ({dirs[SIDES[0]] / gen}) and "
                 f"{n[SIDES[1]]} on the {SIDES[1]}, where {path} says it ran {want} "
                 + ("(extra.cut)" if want != said["extra"]["plan"]["rounds"] else "(extra.plan.rounds)"))
        if max(n.values()) > want:
            raise ResultsFileError(f"not whole: {where}: a round added, or copied, joins the pair")
        if n[SIDES[0]] == n[SIDES[1]] == want:
            continue
        if not any(n.values()):
            # A side that could not start: no round on either side, and the gate stopped there.
            if gen == last and said["extra"].get("stopped") == "error":
                continue
            raise ResultsFileError(f"not whole: {where}: only the last generation of a gate stopped by a side that "
                                   "could not start has no round")
        if n[SIDES[0]] != n[SIDES[1]]:
            continue  # no pair: ``read_pairs`` makes it a failure of its cases, said or not by a record
        ended = any(not held[side][-1] or any(not r.ok for r in held[side][-1].values()) for side in SIDES)
        if not ended:
            raise ResultsFileError(f"not whole: {where}, and no failed record in its last round ends it early: "
                                   "a round removed picks which rounds pair")


def measured_at(said: dict, path: Path, label: str, side: Path) -> None:
    """ResultsFileError naming the first fingerprint of ``side`` (a worker's, in its generation, or
    a round's own run) whose git commit or dirty flag is not the one gate.json says the side was
    measured at: base/ and candidate/ swapped, or a generation of another commit. A generation
    with a round and no fingerprint cannot say which tree measured it. When both sides are one
    commit (an A/A gate), a swap of the sides changes nothing and cannot be told; each generation
    is still held to that commit."""
    commit, dirty = said[label]["commit"], said[label].get("dirty")
    for gen_dir in sorted(side.glob("gen-*")):
        prints = [p for p in [gen_dir / FINGERPRINT, *sorted(gen_dir.glob(f"round-*/{FINGERPRINT}"))] if p.is_file()]
        if not prints and any(gen_dir.glob("round-*/")):
            raise ResultsFileError(f"not whole: {gen_dir} holds rounds and no {FINGERPRINT}: nothing says at which "
                                   f"commit they were measured ({path}: {label} {commit})")
        for fp in prints:
            git = read_json(fp).get("git")
            got = (git.get("commit"), git.get("dirty")) if isinstance(git, dict) else (None, None)
            if got != (commit, dirty):
                raise ResultsFileError(
                    f"not one gate: {fp} says git commit {got[0]!r} (dirty {got[1]!r}) where {path} says the "
                    f"{label} was measured at {commit!r} (dirty {dirty!r}): the sides are swapped, or the "
                    "generation is not one this gate measured")
