"""Whether a record's timed loop was contended: the evidence a record carries, and the one rule that
judges it.

Each rank samples its own timed window (harness.run.contention) and the record keeps every rank's
evidence: CPU pressure over the window, involuntary context switches, the CPUs the rank was allowed
and the one it ended on, and the scheduler tick of its kernel. The rule reads that evidence and the
record's own samples, nothing else, so any reader can judge an old record again, and a record's
stored summary is checked against its evidence when it is read (``check_summary``), as a record's
summary is checked against its samples.

The rule: a record is **contended** when both terms fire:

- *tick stalls*: at least ``TICK_SHARE_MIN`` of its iterations (the per-iteration max over ranks)
  lasted one scheduler tick or longer. A rank that waits for a core waits for the next tick (4 ms
  at 250 Hz); a loop whose iterations take microseconds shows such a wait as an iteration of a tick
  or more, which is what a neighbour does to it;
- *pressure*: some rank's CPU pressure over the window reached its source's minimum, so something
  else wanted the CPUs: PSI ``some`` (the share of wall time at least one runnable task waited)
  at least ``PSI_SOME_SHARE_MIN``, or, where PSI is missing, the 1-minute load average per usable
  CPU at least ``LOAD_PER_CPU_MIN``.

Neither term alone flags. Pressure alone does not: a quiet run's own ranks make PSI pressure (the
default allreduce sweep alone kept ``some`` at 31 % of its wall time), and pressure while the loop
never stalled at a tick did not distort it. Stalls alone do not: a case may sleep or wait by design,
and without pressure nothing says another job took the core. Involuntary context switches are
recorded but not judged: the ranks of one case preempt each other on a small runner, and how many
switches a neighbour adds has not been measured.

The verdict is three-valued. ``None`` when the evidence cannot decide: a record without contention
evidence (older records, imports), no pressure evidence on any rank while the loop stalled, or a
case whose every iteration lasts a tick or more (its work, not a stall, fills the tick, so the tick
term cannot tell them apart). A record is never called uncontended without evidence.

The thresholds are provisional: chosen from the figures of a shared 2-core runner (quiet: ``some``
at 21-31 %, up to 37 % of a record's iterations at a tick; loaded: up to 100 %), not yet calibrated.
Calibrate them on the runner, quiet and with a CPU-bound neighbour, by running the same sweep both
ways (``critpath run --family allreduce`` alone, then beside two busy processes) and counting the
records flagged in each, with intervals; docs/contention.md is where those counts belong. A record
keeps the thresholds it was judged by (``Rule``), so a change of them re-judges old records rather
than contradicting them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from harness.core.echo import shown
from harness.core.numbers import NumberError, parse_int
from harness.core.scale import MAX_CPU_COUNT

# Where a rank's pressure figure came from: PSI, the load average where PSI is missing, or nothing.
PSI, LOADAVG, NO_PRESSURE = "psi", "loadavg", "none"
PRESSURE_SOURCES = (PSI, LOADAVG, NO_PRESSURE)
# How a rank knows its kernel's tick: the kernel's configuration, or the assumption below.
TICK_ASSUMED = "assumed"
# The tick assumed where no kernel configuration is readable: 250 Hz is Linux's own default
# (kernel/Kconfig.hz, HZ_250) and this runner's. A kernel at 1000 Hz has a 1 ms tick: judged at
# 4 ms, its stalls of one or two ticks go uncounted, so the assumption can miss contention but
# never invents it.
ASSUMED_TICK_HZ = 250
# The most CONFIG_HZ a kernel configuration is believed to say (Linux offers 100 to 1000); the
# record schema's bound of tick_hz too.
MAX_TICK_HZ = 100_000
NS_PER_S = 1_000_000_000

# Provisional thresholds (see the module docstring: not yet calibrated on this runner).
TICK_SHARE_MIN = 0.05  # of a record's iterations at one tick or longer
PSI_SOME_SHARE_MIN = 0.10  # of the window's wall time with some runnable task waiting
LOAD_PER_CPU_MIN = 1.0  # runnable tasks per usable CPU: more than the CPUs can run

NO_EVIDENCE = "no contention evidence in the record (recorded before critpath sampled it, or imported)"


@dataclass(frozen=True)
class Rule:
    """The thresholds a verdict was reached by; kept in the record with its summary."""

    tick_share_min: float = TICK_SHARE_MIN
    psi_some_share_min: float = PSI_SOME_SHARE_MIN
    load_per_cpu_min: float = LOAD_PER_CPU_MIN

    def pressure_min(self, source: str) -> float:
        return self.psi_some_share_min if source == PSI else self.load_per_cpu_min

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Rule":
        return cls(**{k: float(data[k]) for k in asdict(cls())})


RULE = Rule()


@dataclass(frozen=True)
class RankEvidence:
    """What one rank saw over its timed window (harness.run.contention samples it)."""

    window_ns: int  # wall time of the timed window
    pressure_source: str  # PSI, LOADAVG or NO_PRESSURE
    # PSI: "some" total delta over the window's wall time (0..1); LOADAVG: the 1-minute load average
    # per usable CPU (may exceed 1); None with NO_PRESSURE
    pressure_share: Optional[float]
    nivcsw: int  # involuntary context switches of the rank's process over the window
    cpus_allowed: str  # the CPUs the rank may run on, as a Linux CPU list ("0-1,4")
    cpu_last: Optional[int]  # the CPU it was on at the window's end, where /proc says
    tick_hz: int  # the kernel's CONFIG_HZ
    tick_source: str  # the file it was read from, or TICK_ASSUMED



EVIDENCE_FIELDS = tuple(RankEvidence.__dataclass_fields__)
# How much longer than its record's wall time a rank's window may read: every rank's window lies
# within rank 0's wall time (it opens after a barrier rank 0 joins and closes before rank 0 gathers
# it), and a rank on another host times it on that host's clock, whose rate NTP holds within 500
# parts per million of any other's.
CLOCK_RATE_TOLERANCE = 1e-3
# The longest CPU list a rank's mask writes (``cpu_list``): every other CPU of MAX_CPU_COUNT, each
# at most four digits and a comma.
MAX_CPU_LIST_CHARS = 5 * MAX_CPU_COUNT


def cpu_ranges(text: str) -> list[tuple[int, int]]:
    """The (first, last) CPU of each range of a Linux CPU list as ``cpu_list`` writes it: ascending
    ranges apart from one another, each CPU below MAX_CPU_COUNT. ValueError saying why not."""
    if len(text) > MAX_CPU_LIST_CHARS:
        raise ValueError(f"a CPU list of {len(text)} characters; one of {MAX_CPU_COUNT} CPUs is at most "
                         f"{MAX_CPU_LIST_CHARS}")
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        try:
            low, high = (parse_int(n, "CPU", 0, MAX_CPU_COUNT - 1) for n in (first, last or first))
        except NumberError:
            raise ValueError(f"{shown(part)} is not a CPU or a range of CPUs numbered 0 to {MAX_CPU_COUNT - 1}") from None
        if low > high:
            raise ValueError(f"the range {part} runs backwards")
        if ranges and low <= ranges[-1][1]:
            raise ValueError(f"the range {part} is not after the one before it, as a CPU list is written")
        ranges.append((low, high))
    return ranges


def _rank_problem(rank: RankEvidence) -> Optional[tuple[str, str]]:
    """(field, why) of the first of one rank's fields that cannot be what its window sampled
    (``harness.run.contention.Window``), or None."""
    try:
        ranges = cpu_ranges(rank.cpus_allowed)
    except ValueError as exc:
        return "cpus_allowed", str(exc)
    if rank.cpu_last is not None and not any(low <= rank.cpu_last <= high for low, high in ranges):
        return "cpu_last", f"{shown(rank.cpu_last)}, a CPU outside the rank's cpus_allowed {rank.cpus_allowed}"
    if (rank.pressure_share is None) != (rank.pressure_source == NO_PRESSURE):
        return "pressure_share", (f"{rank.pressure_share!r} beside pressure_source {rank.pressure_source!r}; a share "
                                  f"is recorded exactly where a source gave one")
    if rank.pressure_source == PSI and rank.pressure_share > 1:
        return "pressure_share", f"{rank.pressure_share!r}, but a PSI share is of the window's wall time, at most 1"
    if rank.tick_source == TICK_ASSUMED and rank.tick_hz != ASSUMED_TICK_HZ:
        return "tick_hz", f"{rank.tick_hz} beside tick_source {TICK_ASSUMED!r}, which is {ASSUMED_TICK_HZ} Hz"
    return None


def evidence_problem(contention: "Contention") -> Optional[str]:
    """``ranks.FIELD.RANK: why`` for the first rank's field that cannot be what it sampled, or None:
    a record's evidence is checked field by field as its samples are, not only its summary."""
    for index, rank in enumerate(contention.ranks):
        problem = _rank_problem(rank)
        if problem:
            return f"ranks.{problem[0]}.{index}: {problem[1]}"
    return None


def window_problem(contention: "Contention", wall_s: float) -> Optional[str]:
    """``ranks.window_ns.RANK: why`` for the first rank whose window is longer than the record's
    wall time it lies within, or None. Checked after the wall time is held to the samples
    (harness.core.verify), so that an edited wall_s is named as itself."""
    for index, rank in enumerate(contention.ranks):
        if rank.window_ns > wall_s * NS_PER_S * (1 + CLOCK_RATE_TOLERANCE):
            return (f"ranks.window_ns.{index}: {shown(rank.window_ns)} ns, longer than the record's wall_s of "
                    f"{wall_s!r} s it lies within")
    return None


@dataclass(frozen=True)
class Contention:
    """Every rank's evidence, by rank.

    Stored by column (``ranks.nivcsw[r]`` is rank r's), so that a record holds 8 keys of it at any
    world: an object per rank would be 8 keys a rank, and past some 12,000 ranks a record would
    exceed the keys a results line may hold (harness.core.store.RECORD_LIMITS)."""

    ranks: tuple[RankEvidence, ...]

    def to_dict(self, samples_ns: Sequence[int]) -> dict:
        columns = {name: [getattr(r, name) for r in self.ranks] for name in EVIDENCE_FIELDS}
        return {"ranks": columns, "summary": judge(self, samples_ns).to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Contention":
        """From a validated block whose columns are all as long (``column_lengths`` says where not)."""
        columns = data["ranks"]
        world = len(columns[EVIDENCE_FIELDS[0]])
        return cls(tuple(RankEvidence(**{name: columns[name][r] for name in EVIDENCE_FIELDS}) for r in range(world)))


def uneven_column(data: Mapping[str, Any], world: int) -> Optional[str]:
    """The first evidence column of a validated block that does not hold one value per rank, or None."""
    return next((name for name in EVIDENCE_FIELDS if len(data["ranks"][name]) != world), None)


@dataclass(frozen=True)
class Verdict:
    """The rule's reading of one record's evidence: the figures it judged and what it concluded."""

    contended: Optional[bool]
    evidence: str  # the terms that fired, or why none could be judged
    pressure_share_max: Optional[float] = None  # the worst rank's (the furthest above its source's minimum)
    pressure_source: str = NO_PRESSURE  # that rank's source
    nivcsw_total: Optional[int] = None  # over all ranks
    tick_share: Optional[float] = None  # of the iterations at one tick or longer; None: not judgeable
    tick_hz: Optional[int] = None
    rule: Rule = field(default_factory=Rule)

    def to_dict(self) -> dict:
        return {**asdict(self), "rule": self.rule.to_dict()}


def tick_ns(tick_hz: int) -> int:
    return NS_PER_S // tick_hz


def _pct(share: float) -> str:
    return f"{share * 100:.1f}%"


def _tick_term(samples_ns: Sequence[int], hz: int, rule: Rule) -> tuple[Optional[bool], Optional[float], str]:
    if not len(samples_ns):
        return None, None, "no iterations to judge"
    samples = np.asarray(samples_ns, dtype=np.int64)
    tick = tick_ns(hz)
    share = float(np.count_nonzero(samples >= tick)) / samples.size
    if int(samples.min()) >= tick:
        return None, share, (f"every iteration lasts a tick ({tick / 1e6:g} ms) or more, so a stall cannot be told "
                             "from the work")
    fired = share >= rule.tick_share_min
    return fired, share, f"tick-stall share {_pct(share)} {'>=' if fired else '<'} {_pct(rule.tick_share_min)}"


def _pressure_term(ranks: Sequence[RankEvidence], rule: Rule) -> tuple[Optional[bool], Optional[RankEvidence], str]:
    known = [(i, r) for i, r in enumerate(ranks) if r.pressure_source != NO_PRESSURE and r.pressure_share is not None]
    if not known:
        return None, None, "no pressure evidence on any rank (no PSI, no load average)"
    # PSI shares and loads per CPU are compared by how far each is from its own source's minimum
    rank, worst = max(known, key=lambda ir: ir[1].pressure_share / rule.pressure_min(ir[1].pressure_source))
    fired = worst.pressure_share >= rule.pressure_min(worst.pressure_source)
    name = "psi some" if worst.pressure_source == PSI else "load per CPU (no PSI)"
    value = _pct(worst.pressure_share) if worst.pressure_source == PSI else f"{worst.pressure_share:.2f}"
    limit = rule.pressure_min(worst.pressure_source)
    text = f"{name} {value} {'>=' if fired else '<'} {_pct(limit) if worst.pressure_source == PSI else f'{limit:g}'}"
    text += f" (rank {rank})" if len(ranks) > 1 else ""
    if not fired and len(known) < len(ranks):
        return None, worst, text + f"; {len(ranks) - len(known)} rank(s) without pressure evidence"
    return fired, worst, text


def judge(contention: Optional[Contention], samples_ns: Sequence[int], rule: Rule = RULE) -> Verdict:
    """The rule (module docstring) on one record's evidence and samples."""
    if contention is None or not contention.ranks:
        return Verdict(None, NO_EVIDENCE, rule=rule)
    ranks = contention.ranks
    hz = max(r.tick_hz for r in ranks)  # the shortest tick of any rank's kernel: no stall of it is missed
    tick, share, tick_text = _tick_term(samples_ns, hz, rule)
    pressure, worst, pressure_text = _pressure_term(ranks, rule)
    if tick is False or pressure is False:
        contended, said = False, [t for t, v in ((tick_text, tick), (pressure_text, pressure)) if v is False]
    elif tick and pressure:
        contended, said = True, [tick_text, pressure_text]
    else:
        contended, said = None, [tick_text, pressure_text]
    return Verdict(contended, "; ".join(said) if contended is not None else "undecided: " + "; ".join(said),
                   pressure_share_max=worst.pressure_share if worst else None,
                   pressure_source=worst.pressure_source if worst else NO_PRESSURE,
                   nivcsw_total=sum(r.nivcsw for r in ranks), tick_share=share, tick_hz=hz, rule=rule)


def check_summary(contention: Contention, samples_ns: Sequence[int], stored: Mapping[str, Any]) -> Optional[str]:
    """Why a record's stored contention summary is not what its evidence gives, or None when it is.
    The stored summary is judged by the rule it names, so a record judged by older thresholds is
    read, and re-judged by today's (``judge``), rather than refused."""
    derived = judge(contention, samples_ns, Rule.from_dict(stored["rule"])).to_dict()
    for key, value in derived.items():
        held = stored.get(key)
        same = (held == value if not isinstance(value, float) or not isinstance(held, (int, float))
                else abs(held - value) <= 1e-9 * max(1.0, abs(value)))
        if not same:
            return f"summary.{key} is {held!r} but the evidence gives {value!r}"
    return None


def cpu_list(cpus: Iterable[int]) -> str:
    """CPUs as Linux writes a CPU list (``0-3,8``): a rank's mask stays one short field at 8,192 CPUs."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def tally(verdicts: Iterable[Verdict]) -> str:
    """``N of M records contended`` and how many had no evidence to judge, for a run's summary lines."""
    verdicts = list(verdicts)
    contended = sum(v.contended is True for v in verdicts)
    undecided = sum(v.contended is None for v in verdicts)
    text = f"{contended} of {len(verdicts)} records contended"
    return text + (f" ({undecided} without evidence to judge)" if undecided else "")
