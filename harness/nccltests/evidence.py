"""Which nccl-tests collective wrote an output, from evidence in the output itself.

Every nccl-tests binary prints the same table, so the collective is read from what differs
between them, each fact below taken from NVIDIA/nccl-tests' source (``src/<collective>.cu``:
its ``RunTest`` passes the redop and root that ``writeBenchmarkLinePreamble`` in ``src/util.cu``
prints; ``GetCollByteCount`` fixes how the printed size relates to the printed count; ``GetBw``
the factor from algbw to busbw):

- the binary's name: the banner ``# Collective test starting: all_reduce_perf`` (2.16.7 and
  later), a command line before the table, or ``args[0]`` of the ``-J`` JSON;
- the redop column: a reduction (sum, prod, ...), ``none``, or nothing at all (hypercube);
- the root column: -1, or a rank for the rooted collectives;
- the row's shape: size = count x element size, or ranks x count x element size;
- busbw / algbw against the rank count n: 2(n-1)/n, (n-1)/n or 1;
- in-place ``#wrong``: N/A for the collectives that cannot check in place (2.13.1 and later);
- before 2.13 (an ``error`` column instead of ``#wrong``) each binary printed its own columns.

Each piece of evidence narrows the set of candidates. Only when the log leaves more than one is
the file name read, and only to pick among those; otherwise the caller must refuse and ask for
``--collective``. Nothing is guessed silently: the evidence is returned to be shown and kept.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from harness.core.bandwidth import BUS_FACTORS
from harness.core.imported import WORD_BYTES

# nccl-tests' reduction names (src/common.cu, test_opnames)
REDOPS = ("sum", "prod", "max", "min", "avg", "mulsum")

# busbw / algbw by its name as nccl-tests writes it: "2(n-1)/n", "(n-1)/n", "1"
FACTORS: dict[str, Callable[[int], float]] = dict(BUS_FACTORS.values())


@dataclass(frozen=True)
class Signs:
    """What one nccl-tests binary prints, by nccl-tests' source."""

    redop: str  # 2.13 and later: "op" (a reduction), "none", or "blank" (nothing printed)
    rooted: bool  # prints a root rank (>= 0) rather than -1
    size: str  # "1": size = count x element; "n": size = ranks x count x element; "": varies
    factor: str  # busbw = algbw x factor (a FACTORS key)
    in_place_checked: bool  # False: in-place #wrong is N/A (alltoall, alltoallv, sendrecv since 2.13.1)
    # Before 2.13: the optional columns this binary printed after "type" (None: it did not exist),
    # what its redop column held, and its bus factors (all_gather and reduce_scatter had 1 before 2.9).
    old_columns: Optional[tuple[str, ...]]
    old_redop: Optional[str] = None
    old_factors: tuple[str, ...] = ()
    since: tuple[int, ...] = ()  # the nccl-tests version that added the binary, when after the banner


SIGNS = {
    "all_reduce": Signs("op", False, "1", "2(n-1)/n", True, ("redop",), "op", ("2(n-1)/n",)),
    "all_gather": Signs("none", False, "n", "(n-1)/n", True, (), None, ("(n-1)/n", "1")),
    "alltoall": Signs("none", False, "n", "(n-1)/n", False, ("redop",), "blank", ("(n-1)/n",)),
    "alltoallv": Signs("none", False, "", "(n-1)/n", False, None, since=(2, 19, 0)),
    "broadcast": Signs("none", True, "1", "1", True, ("root",), None, ("1",)),
    "gather": Signs("none", True, "n", "(n-1)/n", True, ("root",), None, ("(n-1)/n",)),
    "hypercube": Signs("blank", False, "n", "1", True, (), None, ("1",)),
    "reduce": Signs("op", True, "1", "1", True, ("redop", "root"), "op", ("1",)),
    "reduce_scatter": Signs("op", False, "n", "(n-1)/n", True, ("redop",), "op", ("(n-1)/n", "1")),
    "scatter": Signs("none", True, "n", "(n-1)/n", True, ("root",), None, ("(n-1)/n",)),
    "sendrecv": Signs("op", False, "1", "1", False, (), None, ("1",)),
}
COLLECTIVES = tuple(SIGNS)
BANNER_SINCE = (2, 16, 7)  # "# Collective test starting: <binary>" (nccl-tests dafb704)
ALL = frozenset(COLLECTIVES)


class Ambiguous(ValueError):
    """The evidence does not single out one collective, or contradicts ``--collective``."""


@dataclass(frozen=True)
class Evidence:
    what: str  # what was seen and where: "redop 'sum' in every row (lines 14-22)"
    candidates: frozenset  # the collectives it allows

    def line(self) -> str:
        allowed = ", ".join(sorted(self.candidates)) if self.candidates else "no collective"
        return f"{self.what}: {allowed}"


@dataclass
class Side:
    """One side (out-of-place or in-place) of a row as the detector needs it."""

    algbw: float
    busbw: float
    algbw_half_ulp: float  # half the last printed digit: the rounding the figure carries
    busbw_half_ulp: float
    wrong: Optional[float]  # None: N/A


@dataclass
class Observed:
    """What an output shows, independent of the collective."""

    kind: str  # "text" (2.13 and later: #wrong), "text-old" (before 2.13: error), "json"
    ranks: int
    ranks_from: str
    rows: list  # of ObservedRow
    columns: Optional[tuple[str, ...]] = None  # optional columns after "type" (text-old)
    columns_where: str = ""
    binary: Optional[tuple[str, str]] = None  # (name as printed, where)
    validation: Optional[bool] = None


@dataclass
class ObservedRow:
    where: str
    size: int
    count: int
    dtype: str
    redop: Optional[str]  # None: no such column; "": the column is empty
    root: Optional[int]  # None: no such column
    sides: list = field(default_factory=list)  # [out_of_place, in_place]: Side or None


@dataclass
class Detection:
    collective: str
    source: str  # a FOUND key: "log", "file name" or "--collective"
    evidence: list[Evidence]


FOUND = {"log": "from the log", "file name": "from the file name", "--collective": "as given with --collective"}


def ranks_text(n: int) -> str:
    return f"{n} rank{'' if n == 1 else 's'}"


def collective_of_binary(name: str) -> Optional[str]:
    """``./build/all_reduce_perf_mpi`` -> ``all_reduce``; None for a name that is no nccl-tests binary."""
    match = re.match(r"(\w+?)_perf(?:_mpi)?$", Path(name).name)
    return match.group(1) if match and match.group(1) in SIGNS else None


# Longest names first, each match blanked out, so that "reduce" inside "allreduce" or
# "reduce_scatter", and "gather" inside "all_gather", are not read again.
_NAME_PATTERNS = (("reduce_scatter", r"reduce[_-]?scatter"), ("alltoallv", r"all[_-]?to[_-]?all[_-]?v"),
                  ("alltoall", r"all[_-]?to[_-]?all|all2all"), ("all_reduce", r"all[_-]?reduce"),
                  ("all_gather", r"all[_-]?gather"), ("broadcast", r"broadcast|bcast"),
                  ("sendrecv", r"send[_-]?recv"), ("hypercube", r"hypercube"), ("gather", r"gather"),
                  ("scatter", r"scatter"), ("reduce", r"reduce"))


def collectives_in_name(name: str) -> set[str]:
    """The collectives a file name mentions (``allreduce_8gpu.txt`` -> {"all_reduce"})."""
    text = Path(name).name.lower()
    found = set()
    for collective, pattern in _NAME_PATTERNS:
        for match in list(re.finditer(pattern, text)):
            found.add(collective)
            text = text[:match.start()] + " " * (match.end() - match.start()) + text[match.end():]
    return found


def _span(rows: list) -> str:
    first, last = rows[0].where, rows[-1].where
    return first if first == last else f"{first} to {last}"


def _from_binary(seen: Observed) -> list[Evidence]:
    if seen.binary is None:
        if seen.kind == "json":
            return []
        # Every binary since 2.16.7 prints the banner just before the header: without it the output
        # is older (or was cut), so it cannot be from a binary added later.
        later = {c for c, s in SIGNS.items() if s.since and s.since > BANNER_SINCE}
        return [Evidence("no 'Collective test starting' banner before the header: nccl-tests before 2.16.7 "
                         "(or the line was cut off), older than " + ", ".join(sorted(later)), ALL - later)] if later else []
    name, where = seen.binary
    collective = collective_of_binary(name)
    if collective is None:
        return []  # a binary of another name (a local build): says nothing about the table
    return [Evidence(f"the test binary {Path(name).name} ({where})", frozenset({collective}))]


def _from_columns(seen: Observed) -> list[Evidence]:
    if seen.kind != "text-old" or seen.columns is None:
        return []  # since 2.13 every binary prints "redop root"
    allowed = frozenset(c for c, s in SIGNS.items() if s.old_columns == seen.columns)
    cols = " ".join(("size", "count", "type") + seen.columns)
    return [Evidence(f"columns '{cols}' with an 'error' column, as nccl-tests before 2.13 printed them "
                     f"({seen.columns_where})", allowed)]


def _redop_class(redop: str) -> str:
    if redop == "":
        return "blank"
    return "none" if redop == "none" else ("op" if redop in REDOPS else "unknown")


def _from_redop(seen: Observed) -> list[Evidence]:
    rows = [r for r in seen.rows if r.redop is not None]
    if not rows:
        return []
    classes = {_redop_class(r.redop) for r in rows}
    names = sorted({r.redop or "(empty)" for r in rows})
    what = f"redop {'/'.join(names)} in every row ({_span(rows)})"
    if len(classes) > 1 or classes == {"unknown"}:
        return [Evidence(what + ", which no one nccl-tests binary prints", frozenset())]
    cls = classes.pop()
    if seen.kind == "text-old":
        allowed = frozenset(c for c, s in SIGNS.items() if s.old_columns and "redop" in s.old_columns
                            and s.old_redop == cls)
    else:
        allowed = frozenset(c for c, s in SIGNS.items() if s.redop == cls)
    return [Evidence(what, allowed)]


def _from_root(seen: Observed) -> list[Evidence]:
    rows = [r for r in seen.rows if r.root is not None]
    if not rows:
        return []
    rooted = {r.root >= 0 for r in rows}
    roots = "/".join(str(x) for x in sorted({r.root for r in rows}))
    if len(rooted) > 1:
        return [Evidence(f"root {roots} ({_span(rows)}): both -1 and a rank", frozenset())]
    is_rooted = rooted.pop()
    return [Evidence(f"root {roots} in every row ({_span(rows)})",
                     frozenset(c for c, s in SIGNS.items() if s.rooted == is_rooted))]


def _from_shape(seen: Observed) -> list[Evidence]:
    n = seen.ranks
    rows = [r for r in seen.rows if r.count > 0 and r.dtype in WORD_BYTES]
    if n < 2 or not rows:
        return []  # one rank: size = count x element for every collective
    ratios = {r.size / (r.count * WORD_BYTES[r.dtype]) for r in rows}
    varies = frozenset(c for c, s in SIGNS.items() if s.size == "")
    if ratios == {1.0}:
        return [Evidence(f"size = count x element size in every row ({_span(rows)})",
                         frozenset(c for c, s in SIGNS.items() if s.size == "1") | varies)]
    if ratios == {float(n)}:
        return [Evidence(f"size = {n} ranks x count x element size in every row ({_span(rows)})",
                         frozenset(c for c, s in SIGNS.items() if s.size == "n") | varies)]
    shown = ", ".join(f"{x:g}" for x in sorted(ratios)[:4])
    return [Evidence(f"size / (count x element size) is {shown} ({_span(rows)}), neither 1 nor the {n} ranks",
                     varies)]


def _fits(factor: float, sides: list[Side]) -> bool:
    # busbw = algbw x factor exactly in nccl-tests; the printed figures differ only by rounding.
    return all(abs(s.busbw - factor * s.algbw) <= s.busbw_half_ulp + factor * s.algbw_half_ulp + 1e-9
               for s in sides)


def _from_factor(seen: Observed) -> list[Evidence]:
    n = seen.ranks
    pairs = [(r, s) for r in seen.rows for s in r.sides if s is not None and s.algbw >= 1.0]
    if not pairs:
        return []  # below 1 GB/s the printed digits are too few for a ratio
    sides = [s for _, s in pairs]
    fitting = {label for label, f in FACTORS.items() if _fits(f(n), sides)}
    big = max(sides, key=lambda s: s.algbw)
    ratio = big.busbw / big.algbw
    if seen.kind == "text-old":
        allowed = frozenset(c for c, s in SIGNS.items() if set(s.old_factors) & fitting)
    else:
        allowed = frozenset(c for c, s in SIGNS.items() if s.factor in fitting)
    expected = ", ".join(f"{label} = {f(n):.4g}" for label, f in FACTORS.items())
    fits = " and ".join(sorted(fitting)) if fitting else "none of " + expected
    return [Evidence(f"busbw / algbw = {ratio:.4f} over {len(sides)} figures of algbw >= 1 GB/s "
                     f"({_span([r for r, _ in pairs])}) at {ranks_text(n)} ({seen.ranks_from}): fits {fits}", allowed)]


def _from_in_place_check(seen: Observed) -> list[Evidence]:
    if seen.kind == "text-old" or seen.validation is False:
        return []
    rows = [r for r in seen.rows if len(r.sides) == 2 and all(s is not None for s in r.sides)]
    if not rows:
        return []
    unchecked = [r for r in rows if r.sides[0].wrong is not None and r.sides[1].wrong is None]
    if unchecked:
        return [Evidence(f"#wrong counted out of place but N/A in place ({_span(unchecked)})",
                         frozenset(c for c, s in SIGNS.items() if not s.in_place_checked))]
    if all(r.sides[0].wrong is not None and r.sides[1].wrong is not None for r in rows):
        # nccl-tests 2.13.0 alone still counted in place for alltoall and sendrecv.
        return [Evidence(f"#wrong counted in place in every row ({_span(rows)})",
                         frozenset(c for c, s in SIGNS.items() if s.in_place_checked))]
    return []


def evidence_of(seen: Observed) -> list[Evidence]:
    return [*_from_binary(seen), *_from_columns(seen), *_from_redop(seen), *_from_root(seen),
            *_from_shape(seen), *_from_factor(seen), *_from_in_place_check(seen)]


def _listing(evidence: list[Evidence]) -> str:
    return "".join(f"\n  - {e.line()}" for e in evidence) or "\n  - (none: the output shows no distinguishing sign)"


def detect(seen: Observed, source: str, given: Optional[str] = None) -> Detection:
    """The collective of ``seen``: from the log, then from the file name ``source``; ``given``
    (``--collective``) is checked against the log. Raises ``Ambiguous`` rather than guess."""
    evidence = evidence_of(seen)
    remaining = set(ALL)
    for item in evidence:
        remaining &= item.candidates
    if given is not None:
        if given not in SIGNS:
            raise Ambiguous(f"--collective {given}: not an nccl-tests collective (one of {', '.join(COLLECTIVES)})")
        against = [e for e in evidence if given not in e.candidates]
        if against:
            raise Ambiguous(f"{source}: --collective {given} contradicts the log:{_listing(against)}\n"
                            f"check the file, or the option")
        return Detection(given, "--collective", evidence)
    if len(remaining) == 1:
        return Detection(remaining.pop(), "log", evidence)
    if not remaining:
        raise Ambiguous(f"{source}: the log's evidence contradicts itself, no collective fits all of it:"
                        f"{_listing(evidence)}\npass --collective NAME if you know which test wrote it")
    named = collectives_in_name(source)
    if len(named) == 1 and named <= remaining:
        chosen = named.pop()
        name_evidence = Evidence(f"the file name {Path(source).name}", frozenset({chosen}))
        return Detection(chosen, "file name", [*evidence, name_evidence])
    choices = ", ".join(sorted(remaining))
    why = ""
    if named:
        why = (f"\nthe file name {Path(source).name} says {', '.join(sorted(named))}, "
               + ("which the log rules out" if not named & remaining else "more than one"))
    raise Ambiguous(f"{source}: cannot tell which collective this is; the log leaves {choices}:"
                    f"{_listing(evidence)}{why}\npass --collective NAME (one of {choices})")
