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
- *foreign CPU*: on some host, other processes than the case's own used at least
  ``FOREIGN_CPU_SHARE_MIN`` of its CPUs over the window: the host's busy time (its CPUs' capacity
  less their idle time, /proc/stat) less the CPU time of the case's ranks and the processes they
  started (getrusage and /proc), as a share of the capacity. Where a record has no such evidence
  (older records, other kernels), or was judged by a rule without this term, *pressure* stands in:
  some rank's CPU pressure over the window reached its source's minimum, PSI ``some`` (the share
  of wall time at least one runnable task waited) at least ``PSI_SOME_SHARE_MIN``, or, where PSI
  is missing, the 1-minute load average per usable CPU at least ``LOAD_PER_CPU_MIN``.

Why foreign CPU and not PSI: PSI is system-wide and counts the case's own waits. Gloo's
communication threads compete with the two ranks for two cores, which makes tick stalls and PSI
pressure at once, the very signature of a neighbour; judged by PSI, 18 % of a quiet runner's
records were flagged (docs/contention.md). The case's own CPU time is known to each rank, so what
is left of the host's busy time is someone else's. /proc/stat counts in units of 10 ms
(``STAT_UNIT_NS``), so a window whose capacity at the minimum share is under one unit cannot be
judged by it and stays undecided.

Neither term alone flags. Pressure alone does not: a quiet run's own ranks make PSI pressure (the
default allreduce sweep alone kept ``some`` at 31 % of its wall time), and pressure while the loop
never stalled at a tick did not distort it; neither does foreign CPU while the loop never stalled
(a neighbour that runs while the ranks wait on one another takes nothing from them). Stalls alone do not: a case may sleep or wait by design,
and without pressure nothing says another job took the core. Involuntary context switches are
recorded but not judged: the ranks of one case preempt each other on a small runner, and how many
switches a neighbour adds has not been measured.

The verdict is three-valued. ``None`` when the evidence cannot decide: a record without contention
evidence (older records, imports), no pressure evidence on any rank while the loop stalled, or a
case whose every iteration lasts a tick or more (its work, not a stall, fills the tick, so the tick
term cannot tell them apart). A record is never called uncontended without evidence.

The thresholds are calibrated on this project's 2-core runner, quiet and with a CPU-bound
neighbour per core (``examples/contention_calibration.py``); docs/contention.md holds the counts,
with intervals, and says which targets they meet. A record
keeps the thresholds it was judged by (``Rule``), so a change of them re-judges old records rather
than contradicting them.
"""
from __future__ import annotations

import re

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
# The least: Linux's own choices start at 100 (kernel/Kconfig.hz); below 24 Hz no configuration
# is believed to exist, and a tick of 40 ms or more would clear the tick term of every record.
MIN_TICK_HZ = 24
# A tick_source other than TICK_ASSUMED is the file the sampler read: /proc/config.gz or
# /boot/config-RELEASE, an absolute path of printable ASCII (a release string has no spaces).
_TICK_SOURCE = re.compile(r"/[!-~]{1,4095}")
NS_PER_S = 1_000_000_000

# The thresholds (docs/contention.md has what they flag, quiet and loaded).
TICK_SHARE_MIN = 0.05  # of a record's iterations at one tick or longer
FOREIGN_CPU_SHARE_MIN = 0.10  # of a host's CPU capacity over the window, used by other processes
# The unit /proc/stat counts CPU time in: USER_HZ, 100 a second on every Linux architecture's ABI.
STAT_UNIT_NS = 10_000_000
PSI_SOME_SHARE_MIN = 0.10  # of the window's wall time with some runnable task waiting
LOAD_PER_CPU_MIN = 1.0  # runnable tasks per usable CPU: more than the CPUs can run

NO_EVIDENCE = "no contention evidence in the record (recorded before critpath sampled it, or imported)"


@dataclass(frozen=True)
class Rule:
    """The thresholds a verdict was reached by; kept in the record with its summary."""

    tick_share_min: float = TICK_SHARE_MIN
    psi_some_share_min: float = PSI_SOME_SHARE_MIN
    load_per_cpu_min: float = LOAD_PER_CPU_MIN
    # None: a rule from before the foreign-CPU term, which judged pressure alone
    foreign_cpu_share_min: Optional[float] = FOREIGN_CPU_SHARE_MIN

    def pressure_min(self, source: str) -> float:
        return self.psi_some_share_min if source == PSI else self.load_per_cpu_min

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Rule":
        return cls(**{k: (float(data[k]) if data.get(k) is not None else None) for k in asdict(cls())})


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
    # The foreign-CPU evidence, all four or none (None: a record from before it, or no /proc/stat):
    host_idle_ns: Optional[int] = None  # idle and iowait time of all the host's CPUs over the window
    own_cpu_ns: Optional[int] = None  # CPU time of the rank's process and those it started
    host_cpus: Optional[int] = None  # the host's online CPUs (the cpuN lines of /proc/stat)
    host_id: Optional[str] = None  # which host: its boot ID (ranks of one host share its CPUs)

    def foreign_known(self) -> bool:
        return None not in (self.host_idle_ns, self.own_cpu_ns, self.host_cpus, self.host_id)


EVIDENCE_FIELDS = tuple(RankEvidence.__dataclass_fields__)
FOREIGN_FIELDS = ("host_idle_ns", "own_cpu_ns", "host_cpus", "host_id")
# Columns a record from before them lacks: read as None for every rank.
OPTIONAL_FIELDS = FOREIGN_FIELDS
# How much longer than its record's wall time a rank's window may read: every rank's window lies
# within rank 0's wall time (it opens after a barrier rank 0 joins and closes before rank 0 gathers
# it), and a rank on another host times it on that host's clock, whose rate NTP holds within 500
# parts per million of any other's.
CLOCK_RATE_TOLERANCE = 1e-3
# A rank's own CPU time adds its children's, read from /proc/PID/stat in STAT_UNIT_NS at each end
# of the window: up to two units off (more children than that are not what a rank starts).
OWN_SLACK_UNITS = 2
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
    if rank.tick_source != TICK_ASSUMED and not _TICK_SOURCE.fullmatch(rank.tick_source):
        return "tick_source", (f"{shown(rank.tick_source)}: neither {TICK_ASSUMED!r} nor the absolute path of a "
                               "kernel configuration")
    if not MIN_TICK_HZ <= rank.tick_hz <= MAX_TICK_HZ:
        return "tick_hz", f"{shown(rank.tick_hz)} Hz, outside the {MIN_TICK_HZ} to {MAX_TICK_HZ} a kernel is configured with"
    given = [name for name in FOREIGN_FIELDS if getattr(rank, name) is not None]
    if given and len(given) < len(FOREIGN_FIELDS):
        missing = next(name for name in FOREIGN_FIELDS if getattr(rank, name) is None)
        return missing, f"null beside {given[0]} {getattr(rank, given[0])!r}; the foreign-CPU evidence is all four or none"
    if given and rank.host_cpus > MAX_CPU_COUNT:
        return "host_cpus", f"{rank.host_cpus} CPUs, more than the {MAX_CPU_COUNT} a host is believed to have"
    # idle time is read in units of STAT_UNIT_NS at each end: it may exceed the capacity by one
    if given and rank.host_idle_ns > rank.window_ns * rank.host_cpus * (1 + CLOCK_RATE_TOLERANCE) + STAT_UNIT_NS:
        return "host_idle_ns", (f"{rank.host_idle_ns} ns idle, more than {rank.host_cpus} CPUs have in a window of "
                                f"{rank.window_ns} ns")
    # A rank's own CPU time (its threads, and its children read in the same unit at each end) is
    # spent on the CPUs its mask allows, and on the host's busy time, which is what idle leaves.
    if given:
        cpus = min(rank.host_cpus, sum(high - low + 1 for low, high in ranges))
        limit = rank.window_ns * cpus * (1 + CLOCK_RATE_TOLERANCE) + OWN_SLACK_UNITS * STAT_UNIT_NS
        if rank.own_cpu_ns > limit:
            return "own_cpu_ns", (f"{shown(rank.own_cpu_ns)} ns of CPU, more than the {cpus} CPUs it may run on "
                                  f"have in a window of {rank.window_ns} ns")
        busy = rank.window_ns * rank.host_cpus * (1 + CLOCK_RATE_TOLERANCE) - rank.host_idle_ns
        if rank.own_cpu_ns > busy + (OWN_SLACK_UNITS + 1) * STAT_UNIT_NS:
            return "own_cpu_ns", (f"{shown(rank.own_cpu_ns)} ns of CPU, more than the host was busy: "
                                  f"{rank.host_idle_ns} ns idle of {rank.host_cpus} CPUs in {rank.window_ns} ns")
    return None


def _ranks_by_host(ranks: Sequence[RankEvidence]) -> dict[str, list[RankEvidence]]:
    """Host ID -> its ranks that carry the foreign-CPU evidence, in rank order."""
    hosts: dict[str, list[RankEvidence]] = {}
    for rank in ranks:
        if rank.foreign_known():
            hosts.setdefault(rank.host_id, []).append(rank)
    return hosts


def _host_problem(ranks: Sequence[RankEvidence]) -> Optional[str]:
    """``ranks.own_cpu_ns: why`` when the ranks of one host used more CPU between them than the
    host was busy, beyond what the readings' units allow, or None: each rank may pass alone
    (``_rank_problem``) while their sum is impossible, and a negative foreign share would clear
    the foreign term of a record whatever its neighbours did."""
    hosts = _ranks_by_host(ranks)
    for host, (share, capacity_ns) in foreign_shares(ranks).items():
        # idle is read in whole units at two ends per rank, each rank's children likewise
        slack = (1 + OWN_SLACK_UNITS) * len(hosts[host]) * STAT_UNIT_NS / capacity_ns + CLOCK_RATE_TOLERANCE
        if share < -slack:
            return (f"ranks.own_cpu_ns: the ranks on host {shown(host)} used more CPU than it was busy (foreign "
                    f"share {share * 100:.1f} %, below the -{slack * 100:.1f} % the readings' units allow)")
    return None


def evidence_problem(contention: "Contention") -> Optional[str]:
    """``ranks.FIELD.RANK: why`` for the first rank's field that cannot be what it sampled, or None:
    a record's evidence is checked field by field as its samples are, not only its summary."""
    for index, rank in enumerate(contention.ranks):
        problem = _rank_problem(rank)
        if problem:
            return f"ranks.{problem[0]}.{index}: {problem[1]}"
    return _host_problem(contention.ranks)


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
        absent = [None] * world
        return cls(tuple(RankEvidence(**{name: columns.get(name, absent)[r] for name in EVIDENCE_FIELDS})
                         for r in range(world)))


def uneven_column(data: Mapping[str, Any], world: int) -> Optional[str]:
    """The first evidence column of a validated block that does not hold one value per rank, or None."""
    return next((name for name in EVIDENCE_FIELDS if name in data["ranks"] and len(data["ranks"][name]) != world),
                None)


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
    # the worst host's share of its CPU capacity used by other processes; None: no such evidence
    foreign_cpu_share: Optional[float] = None

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


def foreign_shares(ranks: Sequence[RankEvidence]) -> dict[str, tuple[float, int]]:
    """Host ID -> (share of its CPU capacity other processes used over the window, the capacity in
    ns): the host's busy share as each of its ranks read it, averaged, less the CPU time of all its
    ranks, each over its own window. Ranks without the evidence are left out."""
    hosts = _ranks_by_host(ranks)
    shares = {}
    for host, mine in hosts.items():
        cpus = max(r.host_cpus for r in mine)
        busy = sum(1 - r.host_idle_ns / (r.window_ns * cpus) for r in mine) / len(mine)
        own = sum(r.own_cpu_ns / r.window_ns for r in mine) / cpus
        shares[host] = (busy - own, min(r.window_ns for r in mine) * cpus)
    return shares


def _foreign_term(ranks: Sequence[RankEvidence], rule: Rule) -> tuple[Optional[bool], Optional[float], str]:
    shares = foreign_shares(ranks)
    host, (share, capacity_ns) = max(shares.items(), key=lambda item: item[1][0])
    where = f" (host {sorted(shares).index(host)} of {len(shares)})" if len(shares) > 1 else ""
    if capacity_ns * rule.foreign_cpu_share_min < STAT_UNIT_NS:
        # the share of so short a window is mostly the reading's unit: no figure is given for it
        return None, None, (f"foreign CPU not resolved{where}: {capacity_ns / 1e6:.3g} CPU-ms is too short to tell "
                            f"{_pct(rule.foreign_cpu_share_min)} from the {STAT_UNIT_NS / 1e6:g} ms unit /proc/stat "
                            "counts in")
    text = f"foreign CPU {_pct(share)}{where}"
    fired = share >= rule.foreign_cpu_share_min
    return fired, share, text + f" {'>=' if fired else '<'} {_pct(rule.foreign_cpu_share_min)}"


def judge(contention: Optional[Contention], samples_ns: Sequence[int], rule: Rule = RULE) -> Verdict:
    """The rule (module docstring) on one record's evidence and samples."""
    if contention is None or not contention.ranks:
        return Verdict(None, NO_EVIDENCE, rule=rule)
    ranks = contention.ranks
    hz = max(r.tick_hz for r in ranks)  # the shortest tick of any rank's kernel: no stall of it is missed
    tick, share, tick_text = _tick_term(samples_ns, hz, rule)
    pressure, worst, pressure_text = _pressure_term(ranks, rule)
    foreign_share = None
    if rule.foreign_cpu_share_min is not None and all(r.foreign_known() for r in ranks):
        # PSI stays in the record as evidence; the decision is the foreign CPU's
        pressure, foreign_share, pressure_text = _foreign_term(ranks, rule)
    if tick is False or pressure is False:
        contended, said = False, [t for t, v in ((tick_text, tick), (pressure_text, pressure)) if v is False]
    elif tick and pressure:
        contended, said = True, [tick_text, pressure_text]
    else:
        contended, said = None, [tick_text, pressure_text]
    return Verdict(contended, "; ".join(said) if contended is not None else "undecided: " + "; ".join(said),
                   pressure_share_max=worst.pressure_share if worst else None,
                   pressure_source=worst.pressure_source if worst else NO_PRESSURE,
                   nivcsw_total=sum(r.nivcsw for r in ranks), tick_share=share, tick_hz=hz, rule=rule,
                   foreign_cpu_share=foreign_share)


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
