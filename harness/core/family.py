"""The one seam every benchmark family plugs into.

A family is a module that builds a ``Family``: its parameters, its grid of cases (quick and full),
and four functions in the shape of nccl-tests' per-collective files:

- ``setup(ctx, case) -> state``: allocate, connect, warm buffers. Never timed.
- ``step(state)``: one operation. No allocation, no synchronisation it does not need.
- ``metrics(case, summary, reports) -> {name_with_unit: float}``: derived figures (busbw...).
- ``check(state) -> CheckResult``: correctness, run after timing; a wrong answer fails the case.

Optional hooks:

- ``teardown(state)``: release what setup took (groups, sockets, server processes).
- ``report(state) -> dict``: per-rank observations (JSON-able), gathered to rank 0 after timing
  and handed to ``metrics`` as ``reports`` (one entry per rank, rank order). A family that reads
  its stored reports again declares what one holds (``report_schema``, a JSON schema: types,
  counts, bounds) and what its case fixes of them (``reports_contradiction``), and a record's
  reports are held to both when it is read (harness.core.verify).
- ``iterate(state, iters, clock) -> samples_ns``: a family that must own its timed loop (for
  example open-loop load, where latency runs from the intended send time) returns one latency per
  iteration itself, or None to leave this case's loop to the driver. Everything else about the
  case (plan, reduction, check) stays the driver's.
- ``pair_metrics(case, measurement) -> {name_with_unit: float}``: for a family whose cases measure
  node pairs in rounds (``tier=pairs``, ``harness.collectives.pairs``), the figures of one measured
  pair, named and declared as the family's own; ``critpath diagnose`` compares pairs with them.

The driver (``harness.run.driver``) owns warm-up, the loop plan, timing, the cross-rank reduction,
timeouts and the check; families never time themselves unless they use ``iterate``.

What a report shows of a family's records besides its table is declared here too: its ``plots``
(``Plot``) and its ``findings`` (``Finding``, a conclusion across records as text and a table),
drawn and concluded by code in the family's domain package.
"""
from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

from harness.core.case import Case, CaseIdError, Param, ParamValue, check_declared
from harness.core.escape import for_terminal
from harness.core.figures import (N_TOO_SMALL, Figure, FigureUnavailable, TooFewSamples, is_sample_statistic,
                                  percentile_named, require_samples, sample_parts)
from harness.core.figures import value as figure_value
from harness.core.options import UnknownName, UsageError
from harness.core.sizes import MAX_RUN_SIZE_BYTES
from harness.core.stats import Summary

if TYPE_CHECKING:
    from harness.core.plotting import Drawn

PROFILES = ("quick", "full")
# The backends critpath runs a case over: --backend's choices, a case's backend key, and a record's
# backend (harness.core.verify), declared once.
BACKENDS = ("gloo", "nccl")
# The most results one rank's check counts where its family declares no tighter bound
# (``Family.checked_per_rank``): a check counts results it holds, and a rank holds at most a case's
# largest allocation, one result a byte at the least.
MAX_CHECKED_PER_RANK = MAX_RUN_SIZE_BYTES

# Bytes of one element of each dtype a case's buffer holds, declared here without torch, so that
# parsing, listing or verifying a case does not import it.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def whole_elements(size_bytes: int, dtype: str) -> str:
    """Why ``size_bytes`` is not whole ``dtype`` elements, "" when it is. A buffer holds whole
    elements: a size between two would move the bytes of the one below while its figures divide
    the bytes named, and it would be a second ID of that case."""
    element_bytes = DTYPE_BYTES[dtype]
    below = size_bytes - size_bytes % element_bytes
    if below == size_bytes:
        return ""
    nearest = f"{below} or {below + element_bytes}" if below else f"{below + element_bytes}"
    return f"size_bytes={size_bytes} is not a multiple of {dtype}'s {element_bytes} bytes; write {nearest}"


def grid_sizes(family: str, sizes: Iterable[int], dtype: str) -> list[int]:
    """The sizes of a grid (its own or --sizes) whose cases hold ``dtype`` elements: one that is not
    whole elements is refused naming --sizes, never rounded onto a size beside it (two of a sweep
    would round to one case, recorded twice)."""
    sizes = list(sizes)
    for size in sizes:
        why = whole_elements(size, dtype)
        if why:
            raise UsageError(f"--sizes: {family} cases hold whole {dtype} elements, and {why}")
    return sizes


# Parameters many families share, declared once.
BACKEND = Param("backend", str, "gloo or nccl", choices=BACKENDS, required=True)


def world_param(low: int = 1, doc: str = "number of ranks") -> Param:
    """The ``world`` key: ranks the case runs on, at least ``low`` (a peer, a pipeline of stages)."""
    return Param("world", int, doc, low=low, required=True)


def bytes_param(name: str, doc: str, low: int) -> Param:
    """A key of bytes a case allocates (a buffer, a message): at most MAX_RUN_SIZE_BYTES, the cap
    ``--sizes`` holds a run to, so a case ID cannot ask for what the option refuses."""
    return Param(name, int, doc, low=low, high=MAX_RUN_SIZE_BYTES, required=True)


class FigureError(ValueError):
    """metrics() returned a figure its family does not declare, or a value that is not finite."""


@dataclass(frozen=True)
class GridOptions:
    """What the command line says about the grid; each family maps it onto its own cases."""

    profile: str = "quick"
    world: int = 2
    backend: str = "gloo"
    sizes_bytes: Optional[tuple[int, ...]] = None  # --sizes override, for size-swept families

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, got {self.profile!r}")


def cases_held(family: str, options: GridOptions, build: Iterable[Callable[[], Case]]) -> list[Case]:
    """The cases of a grid that a record can hold at ``options.world``: one a case ID refuses there
    (a placement too large to record at 512 ranks) is left out, said in one line on stderr, so
    ``critpath list --world 1024`` lists what can run instead of stopping at a traceback."""
    cases, refused = [], []
    for make in build:
        try:
            cases.append(make())
        except CaseIdError as exc:
            refused.append(str(exc))
    if refused:
        print(for_terminal(f"critpath: {family}: {len(refused)} case(s) of the grid left out at world={options.world}, "
                           f"which a case cannot hold: {refused[0]}"), file=sys.stderr)
    return cases


# The flag that sets each GridOptions field a grid reads, for a message that names it.
GRID_FLAGS = {"world": "--world", "backend": "--backend", "sizes_bytes": "--sizes"}


class _ReadsNoted:
    """GridOptions as a grid sees them, noting each field the grid reads: a field a grid never
    reads (rpc's world, selftest's sizes) cannot act on its cases, whatever it is set to."""

    __slots__ = ("_options", "read")

    def __init__(self, options: GridOptions) -> None:
        self._options = options
        self.read: set[str] = set()

    def __getattr__(self, name: str):
        self.read.add(name)
        return getattr(self._options, name)


def grid_reading(family: Family, options: GridOptions) -> tuple[list[Case], frozenset[str]]:
    """``family``'s grid at ``options``, and the fields of ``options`` it read to build it (which
    may depend on the others: selftest reads --world only in its full grid)."""
    noted = _ReadsNoted(options)
    return family.grid(noted), frozenset(noted.read)  # type: ignore[arg-type]  # duck-typed options


@dataclass(frozen=True)
class RankContext:
    """Where one rank runs: handed to ``setup``."""

    rank: int
    world: int
    local_rank: int
    backend: str
    device: Any  # torch.device
    group: Any = None  # the default process group (None when world == 1 and no group exists)


@dataclass(frozen=True)
class CheckResult:
    """Correctness after timing, counted like nccl-tests' #wrong."""

    wrong: int
    checked: int
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.wrong == 0

    def to_dict(self) -> dict:
        return {"wrong": self.wrong, "checked": self.checked, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class Column:
    """A column of the terminal table: header and how to read it off a record.

    A column of a declared figure names it (``figure="busbw_gbps"``) instead of a ``value``: its
    header then carries the figure's unit (or ``unit``, when ``scale`` converts it) and says when the
    figure is modelled or simulated, all derived from the family's declaration.
    """

    header: str
    value: Optional[Callable[[Any], Any]] = None  # record -> value (str or number)
    fmt: str = "{}"
    figure: Optional[str] = None
    scale: float = 1.0
    unit: Optional[str] = None

    def render(self, record: Any) -> str:
        try:
            value = self.value(record)
        except (KeyError, TypeError, AttributeError):
            return "-"
        if value is None:
            return "-"
        if value is N_TOO_SMALL:  # a percentile the record's samples do not support
            return N_TOO_SMALL
        return self.fmt.format(value)


# Units a header leaves out: the number says what it is.
_UNITLESS = ("ratio", "count", "flag", "index", "fraction")
# Plain text, not brackets: rich would read "[model]" as markup and drop it.
SOURCE_MARKS = {"measured": "", "modelled": " (modelled)", "simulated": " (simulated)"}


def sample_column(column: Column) -> Column:
    """``column`` reading a sample statistic of the record (``p99_us``), in the grammar of harness.core.figures."""
    name = column.figure
    parts = sample_parts(name)
    unit = parts[1] if parts else None
    header = column.header + (f" ({unit})" if unit else "")

    def read(record):
        try:
            return figure_value(record, name)
        except TooFewSamples:
            return N_TOO_SMALL
        except FigureUnavailable:
            return None

    return Column(header, read, column.fmt)


# Columns most families end with.
WRONG_COLUMN = Column("#wrong", lambda r: r.check.wrong)


def figure_column(column: Column, figure: Figure) -> Column:
    """``column`` reading its declared ``figure``: the header gets the unit and the source's mark."""
    unit = column.unit or figure.unit
    header = column.header + ("" if unit in _UNITLESS else f" ({unit})") + SOURCE_MARKS[figure.source]
    name, scale = figure.name, column.scale

    def read(record):
        if name not in record.metrics:
            return None
        try:
            if record.samples_ns:
                require_samples(name, len(record.samples_ns))
        except TooFewSamples:
            return N_TOO_SMALL
        return record.metrics[name] * scale

    return Column(header, read, column.fmt)


@dataclass(frozen=True)
class Plot:
    """A plot a report draws from a family's records: ``draw(runs)`` takes one run or several (a
    comparison overlays them), each a ``harness.core.store.LoadedRun`` holding only this family's
    records and its ``label``, and returns the figure and its caption, or None when the records
    hold nothing it can draw.
    ``name`` is the file stem under the report's plots/, unique across families."""

    name: str
    title: str
    draw: Callable[[Sequence[Any]], Optional["Drawn"]]


@dataclass(frozen=True)
class Concluded:
    """What a finding concludes, as plain text: a paragraph, then a table (none where ``headers``
    is empty)."""

    text: str
    headers: Sequence[str] = ()
    rows: Sequence[Sequence[str]] = ()


@dataclass(frozen=True)
class Finding:
    """A conclusion a report draws across a family's records (allreduce: the ring/tree crossover),
    shown after the family's table and before its plots. ``conclude(runs)`` takes runs as a Plot's
    ``draw`` does."""

    name: str
    conclude: Callable[[Sequence[Any]], Concluded]


@dataclass(frozen=True)
class Family:
    name: str
    version: int  # bump when a case's definition changes meaning; recorded with every result
    description: str
    params: Sequence[Param]
    grid: Callable[[GridOptions], list[Case]]
    setup: Callable[[RankContext, Case], Any]
    step: Callable[[Any], None]
    metrics: Callable[[Case, Summary, list[dict]], Mapping[str, float]]
    check: Callable[[Any], CheckResult]
    teardown: Optional[Callable[[Any], None]] = None
    report: Optional[Callable[[Any], dict]] = None
    iterate: Optional[Callable[[Any, int, Callable[[], int]], Any]] = None
    pair_metrics: Optional[Callable[[Case, Any], Mapping[str, float]]] = None
    columns: Sequence[Column] = field(default_factory=tuple)
    # In `critpath run` without --families. Self-tests and fault injection are opt-in.
    default: bool = True
    # Named among a report's "Families not in this run" when a run lacks it; False for the harness
    # testing itself, which no reader of a report misses.
    listed_when_absent: bool = True
    # Every figure metrics() may return, declared once (harness.core.figures): unit, direction, source.
    figures: Sequence[Figure] = field(default_factory=tuple)
    # Rules that join parameters (a mode that needs a key, a world too small for the case), checked
    # with each Param's own bounds when a case is parsed or built: raise ValueError saying why.
    validate: Optional[Callable[[Case], None]] = None
    # The dtype whose elements a size_bytes key counts in bytes, for a family whose cases name no
    # dtype key (a float32 buffer): with one, or with a dtype key, check_case holds each size_bytes
    # to whole elements.
    element_dtype: Optional[str] = None
    # Why a record's figures are distorted (oversubscribed cores, stretched compute), "" when they
    # are clean: the claims check withholds a flagged record instead of drawing a verdict from it.
    flags: Optional[Callable[[Any], str]] = None
    # What a report draws and concludes from the family's records, besides its table.
    plots: Sequence[Plot] = field(default_factory=tuple)
    findings: Sequence[Finding] = field(default_factory=tuple)
    # The most results one rank's check counts for a case, where the case fixes it (a buffer's
    # elements, one answer): a record whose check counts more over its ranks is refused on read.
    checked_per_rank: Optional[Callable[[Case], int]] = None
    # The JSON schema of one rank's report (what ``report`` returns), where the family declares it:
    # a record's stored reports are validated against it when read, so metrics() recomputes its
    # figures from reports of the types and bounds the family writes, never from a text or a zero.
    report_schema: Optional[Mapping[str, Any]] = None
    # Why an ok record's reports (valid by ``report_schema``) cannot be its case's (a count the case
    # fixes, a counter its passed check says is zero), as "RANK.FIELD: why" with FIELD inside that
    # rank's report (``0.counters.server.errors: ...``); "" when they can be.
    reports_contradiction: Optional[Callable[[Case, Sequence[Mapping[str, Any]]], str]] = None

    @functools.cached_property
    def report_validator(self):
        """The validator of ``report_schema`` (None without one), built once per family."""
        from harness.core.schema import strict_validator  # jsonschema: loaded by a reader of records only

        return strict_validator(dict(self.report_schema)) if self.report_schema is not None else None

    def checked_at_most(self, case: Case, world: int) -> int:
        """The most results a check of ``case`` on ``world`` ranks counts (the driver sums the ranks')."""
        per_rank = self.checked_per_rank(case) if self.checked_per_rank is not None else MAX_CHECKED_PER_RANK
        return world * per_rank

    def table_columns(self) -> list[Column]:
        """The terminal table's columns, figure columns resolved against the declarations."""
        out = []
        for column in self.columns:
            if column.figure is None:
                out.append(column)
                continue
            if is_sample_statistic(column.figure):
                out.append(sample_column(column))
                continue
            figure = self.figure(column.figure)
            if figure is None:
                raise FigureError(f"{self.name}: column {column.header!r} reads {column.figure!r}, which the family "
                                  "does not declare")
            out.append(figure_column(column, figure))
        return out

    def figure(self, name: str) -> Optional[Figure]:
        return next((f for f in self.figures if f.name == name), None)

    def tail_samples(self) -> int:
        """The samples its deepest declared or tabled percentile needs (rpc: rtt_p999_us, 1,000): the
        loop plan aims for that many, so the tails the family reports are supported."""
        names = [f.name for f in self.figures] + [c.figure for c in self.columns if c.figure]
        return max((named[1] for named in map(percentile_named, names) if named), default=1)

    def check_figures(self, values: Mapping[str, float]) -> None:
        """What metrics() returned must be declared figures with finite values: the driver fails
        the case otherwise (FigureError), so no record carries a number nobody defined."""
        names = {f.name for f in self.figures}
        undeclared = sorted(set(values) - names)
        if undeclared:
            raise FigureError(f"{self.name}.metrics() returned undeclared figure(s) {', '.join(undeclared)}; "
                              f"declare each as a Figure in FAMILY.figures")
        bad = sorted(k for k, v in values.items() if not isinstance(v, (int, float)) or not math.isfinite(v))
        if bad:
            raise FigureError(f"{self.name}.metrics() returned non-finite figure(s): "
                              + ", ".join(f"{k}={values[k]!r}" for k in bad))

    @functools.cached_property
    def declared(self) -> Mapping[str, Param]:
        # Read-only and built once: a grid checks every case it makes against it.
        return MappingProxyType({p.name: p for p in self.params})

    def value(self, case: Any, name: str) -> ParamValue:
        """A parameter of ``case`` (a Case or a record: anything with ``params``), or its declared
        default when the ID leaves it out."""
        if name in case.params:
            return case.params[name]
        param = self.declared[name]  # KeyError for a key the family does not declare
        if param.default is None:
            raise UnknownName(f"{self.name} needs {name} ({param.doc}); it has no default")
        return param.default

    def check_case(self, case: Case, written: Optional[str] = None) -> Case:
        """The joined rules of ``validate``, as a CaseIdError naming the case (as ``written``, where
        it was read from an ID), after the rule every family with a size_bytes key shares."""
        try:
            self._check_whole_elements(case)
            if self.validate is not None:
                self.validate(case)
        except ValueError as exc:
            raise CaseIdError(f"case ID {written or case.id!r}: {exc}") from None
        return case

    def _check_whole_elements(self, case: Case) -> None:
        dtype = case.params.get("dtype", self.element_dtype)
        if "size_bytes" in case.params and dtype is not None:
            why = whole_elements(case.params["size_bytes"], dtype)
            if why:
                raise ValueError(why)

    def case(self, **params) -> Case:
        """Build a case, checking keys, value types and bounds against the declaration."""
        declared = self.declared
        for key, value in params.items():
            if key not in declared:
                raise UnknownName(f"family {self.name!r} has no parameter {key!r}")
            want = declared[key].type
            if not isinstance(value, want) or isinstance(value, bool):
                raise TypeError(f"{self.name}.{key} must be {want.__name__}, got {value!r}")
        return self.check_case(check_declared(Case(self.name, params), declared))
