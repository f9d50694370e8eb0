"""Gate outcomes resampled from the pairs that real gates measured.

Twenty real gates per cell bound a false-alarm rate only to [0, 17 %]; showing "at most 1 %"
takes hundreds. These rates replay the gate's own loop (``Schedule``, with its budget, looks and
stopping) and its own decision (``SequentialGate``) on pairs drawn with replacement from the
measured ones, on a clock that advances by the measured seconds of each drawn pair, after the
measured set-up time of a drawn gate. They are labelled as resampled everywhere, with the number
of distinct process pairs behind them: they assume that pairs are exchangeable across the gates
they came from, so they say nothing about drift that no measured pair saw.

In a gate of several cases each case's pair is drawn from its own measured pairs (independently
across cases), and a generation costs the seconds of a generation measured while every case was
still open: an upper bound on the pace, since real generations shorten as cases are decided.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from harness.core.inputfile import read_bounded
from harness.core.jsonfile import JsonLimits, loads_strict
from harness.core.numbers import NumberError, check_float

# A gate.json: a few kB a case, its pairs included.
MAX_GATE_JSON_BYTES = 64 << 20
# Some 50 keys a case, of at most as many cases as a run holds; its pairs, 8 bytes of text each at
# the least, are what the byte cap leaves room for.
GATE_JSON_LIMITS = JsonLimits(keys=1_000_000, values=MAX_GATE_JSON_BYTES // 8, depth=16)

from harness.gate.config import GateConfig
from harness.gate.outputs import fails_build
from harness.gate.paired import SPENDING
from harness.gate.schedule import Plan, Schedule
from harness.gate.sequential import CaseSpec, SequentialGate


class _Shape(ValueError):
    """A field of a gate.json of another type than the gate writes; the message starts with it."""


def _mapping(value, field_name: str) -> dict:
    if not isinstance(value, dict):
        raise _Shape(f"field {field_name}: expected an object, got {type(value).__name__}")
    return value


def _list(value, field_name: str) -> list:
    if not isinstance(value, list):
        raise _Shape(f"field {field_name}: expected a list, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class MeasuredGate:
    """What one real gate measured: each case's pairs (log ratios, in generation order), each
    generation's seconds, and the seconds before the first generation (worktrees, probes)."""

    pairs: Mapping[str, Sequence[float]]
    generation_s: Sequence[float]
    setup_s: float

    @classmethod
    def load(cls, gate_json: Path) -> "MeasuredGate":
        where = f"{gate_json}: not a readable gate result"
        try:
            data = loads_strict(read_bounded(Path(gate_json), "gate.json", MAX_GATE_JSON_BYTES), str(gate_json),
                                GATE_JSON_LIMITS)
        except (OSError, ValueError) as exc:  # ValueError: not JSON, past a limit, not a regular file
            raise ValueError(f"{where} ({type(exc).__name__}: {exc})") from None
        try:
            extra = _mapping(_mapping(data, "(document)").get("extra", {}), "extra")
            gens = [check_float(g, f"field extra.generation_s[{i}]", 0)
                    for i, g in enumerate(_list(extra.get("generation_s", []), "extra.generation_s"))]
            pairs = {}
            for i, case in enumerate(_list(data.get("cases"), "cases")):
                case_id = _mapping(case, f"cases[{i}]").get("case_id")
                if not isinstance(case_id, str):
                    raise _Shape(f"field cases[{i}].case_id: expected a case ID")
                detail = _mapping(case.get("detail") or {}, f"cases[{i}].detail")
                pairs[case_id] = [check_float(d, f"field cases[{i}].detail.pairs[{j}]")
                                  for j, d in enumerate(_list(detail.get("pairs", []), f"cases[{i}].detail.pairs"))]
            wall_s = check_float(extra.get("measure_wall_s", sum(gens)), "field extra.measure_wall_s", 0)
        except (NumberError, _Shape) as exc:  # each message starts with the field
            raise ValueError(f"{where}: {exc}") from None
        return cls(pairs, gens, max(0.0, wall_s - sum(gens)))

    def all_open_generation_s(self) -> list[float]:
        """Seconds of the generations in which every case was still measured."""
        n = min((len(p) for p in self.pairs.values()), default=0)
        return list(self.generation_s[:n])


class _Replay(Schedule):
    """The gate's loop on a virtual clock, fed with drawn pairs instead of processes."""

    def __init__(self, case_ids, plan: Plan, gate: SequentialGate, pools: Mapping[str, np.ndarray],
                 gen_s: np.ndarray, setup_s: float, rng: np.random.Generator) -> None:
        self._now = 0.0
        super().__init__(case_ids, {}, "replay", plan, Path("."), "", gate.look, clock=lambda: self._now,
                         started_at=-setup_s)
        self._pools, self._gen_s, self._rng = pools, gen_s, rng

    def _generation(self, number: int) -> bool:
        self._now += float(self._gen_s[self._rng.integers(self._gen_s.size)])
        for track in self._open():
            pool = self._pools[track.case_id]
            track.pairs.append(float(pool[self._rng.integers(pool.size)]))
        return False

    def _kill_live(self) -> None:
        pass


def _fails(state) -> bool:
    """The default exit rules on a replayed case's last state."""
    return state is not None and fails_build(state.outcome, state.likely_regression)


def resampled_rate(measured: Sequence[MeasuredGate], case_ids: Sequence[str], watched: str, budget_s: float,
                   min_effect: float, gates: int = 1000, seed: int = 0, config: GateConfig = GateConfig(),
                   shift: float = 0.0) -> dict:
    """How often a gate on these cases fails the build on ``watched``, replayed ``gates`` times
    from the measured pairs; with the wall seconds the replayed gates took. ``shift`` (relative)
    moves the watched case's pairs by log(1 + shift): A/A pairs so moved are a *model* of a
    uniform slowdown of exactly that size on this runner's real noise."""
    pools = {c: np.array([d for m in measured for d in m.pairs.get(c, [])], dtype=float) for c in case_ids}
    if shift:
        pools[watched] = pools[watched] + np.log1p(shift)
    gen_s = np.array([g for m in measured for g in m.all_open_generation_s()], dtype=float)
    setups = np.array([m.setup_s for m in measured], dtype=float)
    if gen_s.size == 0 or any(p.size == 0 for p in pools.values()):
        return {"gates": 0, "why": "no measured pairs"}
    rng = np.random.default_rng(seed)
    plan = Plan(budget_s=budget_s)
    specs = [CaseSpec(c, min_effect) for c in case_ids]
    fails, walls = 0, []
    for _ in range(gates):
        gate = SequentialGate(specs, alpha=config.policy.alpha, confidence=config.policy.confidence,
                              spending=SPENDING)
        replay = _Replay(list(case_ids), plan, gate, pools, gen_s, float(setups[rng.integers(setups.size)]), rng)
        result = replay.run()
        # A slowdown counts when the slowed case fails the build; an A/A when any case does.
        tracks = [result.tracks[watched]] if watched else list(result.tracks.values())
        fails += any(_fails(t.state) for t in tracks)
        walls.append(result.wall_s)
    return {"gates": gates, "fails": int(fails), "rate": fails / gates,
            "distinct_pairs": {c: int(p.size) for c, p in pools.items()}, "measured_gates": len(measured),
            "wall_median_s": float(np.median(walls)), "wall_max_s": float(np.max(walls))}
