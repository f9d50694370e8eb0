"""asv's results files read within bounds, each field critpath uses checked.

asv's own loader (``asv.results.iter_results``) opens whatever a results directory holds: a FIFO
named like a results file hung it, one linked to /dev/zero grew without bound, and a date of
1e400, a value "abc" or a file nested 100,000 deep gave a traceback naming no file. Here each file
is opened as a regular file within a declared size, parsed strictly within declared counts, and
its fields are checked as asv's version 2 format writes them. A results directory gathers files
from many commits and machines over months: a file that is not one is skipped, named with why,
and counted (``AsvFiles.skipped``), never taken for a figure and never silently dropped. A file
is what it says: its commit and environment the ones its name gives, its case IDs ones a family
means (read as their canonical IDs, each case once), its figures ones the family declares, its
values at or above zero where the figure's unit is a magnitude. A row is the suite's
(``bench_families.<Class>.track_<figure>``, its class the one its cases' family is tracked in) of a
figure the family declares, or it is skipped alone, the rest of its file read. A history is one
value a commit on each machine: a commit a machine holds in two files (asv ran it in two
environments, or the machine's results are in two directories) is skipped in every file of it, as
which one is meant is not known.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from harness.core import registry
from harness.core.case import CaseIdError
from harness.core.declarations import unit_of
from harness.core.echo import shown
from harness.core.escape import for_terminal
from harness.core.figures import NON_NEGATIVE_UNITS, TIME_SCALE, is_sample_statistic
from harness.core.options import MAX_SECONDS
from harness.core.inputfile import InputFileError, read_bounded
from harness.core.jsonfile import JsonFileError, JsonLimits, loads_strict
from harness.core.numbers import NumberError, check_float, check_int
from harness.core.walk import WalkError, walk_bounded

# asv's benchmarks.json: a few kB a benchmark.
MAX_BENCHMARKS_JSON_BYTES = 64 << 20
# One results file is one commit on one machine: a row per benchmark (the suite tracks some ten
# figures for each of its families), each a list per case (a run holds at most 10,000). 64 MB and
# 4 million values are past that with room; keys are a few per benchmark.
MAX_RESULT_BYTES = 64 << 20
RESULT_LIMITS = JsonLimits(keys=100_000, values=4_000_000, depth=16)
# machine.json: a dozen short fields.
MAX_MACHINE_BYTES = 64 << 10
MACHINE_LIMITS = JsonLimits(keys=1_000, values=1_000, depth=4)
# A file per commit, machine and environment: 20,000 is years of nightly history on several
# machines. More is no history a report can draw, and a directory past it is refused whole.
MAX_RESULT_FILES = 20_000
# asv writes results/<machine>/<commit>-<env>.json: one level of directories below the results
# directory, one per machine. A dozen machines is a large lab; a thousand directories is none.
RESULTS_DEPTH = 1
MAX_RESULT_DIRS = 1_000
# asv's results format (``asv.results.Results.api_version``); an older one is asv update's to convert.
RESULTS_FORMAT = 2
# asv dates a commit in milliseconds since 1970; the last a date is printed for is in year 9999.
MAX_DATE_MS = 253_402_300_799_999
_HASH = re.compile(r"[0-9a-f]{1,64}", re.ASCII)
# The files in a results directory that are not results, as asv skips them.
NOT_RESULTS = ("machine.json", "benchmarks.json")


class AsvFileError(ValueError):
    """An asv file that is not what asv writes; the message starts with the file (and the field)."""


class AsvRowError(AsvFileError):
    """One row of a results file that is not a figure of its cases' family: the row is left out, the
    rest of the file read."""


class AsvDirectoryError(ValueError):
    """An asv results directory too large to be read; the message starts with the directory."""


@dataclass(frozen=True)
class Figure:
    benchmark: str  # bench_families.Rpc.track_p50_us
    version: str  # the benchmark's asv version: a new one restarts its history
    case_id: str
    value: Optional[float]  # None where the case failed or does not define the figure


@dataclass(frozen=True)
class AsvResult:
    """One results file: a commit's tracked figures on one machine."""

    path: Path
    machine: str
    commit: str
    date_ms: int
    figures: tuple[Figure, ...]
    env: str = ""  # asv's environment (env_name): where the commit ran on the machine
    skipped_rows: tuple["Skipped", ...] = ()  # rows left out, each with why


@dataclass(frozen=True)
class Skipped:
    path: Path
    message: str  # why, starting with the file
    row: str = ""  # the benchmark whose row alone was left out; "": the whole file


@dataclass
class AsvFiles:
    results: list[AsvResult] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def _json(path: Path, what: str, max_bytes: int, limits: JsonLimits):
    """``path`` parsed; AsvFileError naming it when it cannot be (InputFileError passes: it names the file)."""
    try:
        return loads_strict(read_bounded(path, what, max_bytes), str(path), limits)
    except (FileNotFoundError, NotADirectoryError):
        raise AsvFileError(f"{path}: no such file") from None
    except OSError as exc:
        raise AsvFileError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    except JsonFileError as exc:
        raise AsvFileError(str(exc)) from None


def _object(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise AsvFileError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _text(value, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise AsvFileError(f"{where}: expected a non-empty string, got {type(value).__name__}")
    return value


def read_machine(path: Path) -> str:
    """The machine name a machine.json gives; AsvFileError naming the file and field."""
    data = _object(_json(path, "machine.json of asv", MAX_MACHINE_BYTES, MACHINE_LIMITS), str(path))
    return _text(data.get("machine"), f"{path}: field machine")


def benchmark_units(path: Path) -> dict[str, str]:
    """benchmark name -> unit, from a benchmarks.json; AsvFileError naming it when it is none."""
    data = _object(_json(path, "benchmarks.json of asv", MAX_BENCHMARKS_JSON_BYTES, RESULT_LIMITS), str(path))
    units = {}
    for name, benchmark in data.items():
        unit = benchmark.get("unit", "") if isinstance(benchmark, dict) else ""
        units[name] = unit if isinstance(unit, str) else ""
    return units


# A case ID's shape, as every family's IDs have it: a family name, a slash, its parameters.
_CASE_ID = re.compile(r"[a-z0-9_]+/\S+", re.ASCII)


# The module of the asv suite that tracks the families (benchmarks/bench_families.py): a tracked
# figure is the row ``bench_families.<its family's class>.track_<figure>``.
SUITE_MODULE = "bench_families"


def suite_class(family: str) -> str:
    """The class the suite tracks ``family`` in: its words in title case (``moe_a2a`` -> ``MoeA2a``).
    The suite runs against older trees and cannot import this module; a test holds the two alike."""
    return "".join(part.title() for part in family.split("_"))


def _suite_class_of(benchmark: str, where: str) -> str:
    """The class of ``benchmark``, a row the suite writes (``bench_families.<Class>.track_<figure>``,
    the class one a family is tracked in); AsvRowError otherwise: the row is no family's figure."""
    parts = benchmark.split(".")
    if len(parts) != 3 or parts[0] != SUITE_MODULE:
        raise AsvRowError(f"{where}: {shown(benchmark)} is no benchmark of the families' suite, which names "
                          f"each {SUITE_MODULE}.<Class>.track_<figure>: the row is skipped")
    classes = {suite_class(name) for name in registry.FAMILIES}
    if parts[1] not in classes:
        raise AsvRowError(f"{where}: {shown(parts[1])} is no family's class in {SUITE_MODULE} (it has "
                          f"{', '.join(sorted(classes))}): the row is skipped")
    return parts[1]


def figure_name(benchmark: str) -> str:
    """The figure a tracked benchmark records: ``bench_families.Rpc.track_p50_us`` -> ``p50_us``."""
    return benchmark.rsplit(".", 1)[-1].removeprefix("track_")


def named_commit(path: Path) -> str:
    """The commit a results file's name gives: asv names it ``<commit[:8]>-<env>.json``."""
    return path.name.split("-")[0]


# asv.results.get_filename: an environment name this long is named in the file by its digest
_ENV_NAME_HASHED_CHARS = 128


def file_name(commit: str, env_name: str) -> str:
    """The name asv gives the results file of ``commit`` in environment ``env_name`` (asv.results.get_filename)."""
    if len(env_name) >= _ENV_NAME_HASHED_CHARS:
        env_name = "env-" + hashlib.md5(env_name.encode("utf-8", "surrogateescape")).hexdigest()
    return f"{commit[:8]}-{env_name}.json"


def _case_id(text: str, where: str) -> str:
    """The canonical ID of the case asv holds as ``text`` (its repr, quotes included): one case is
    one series however its keys are ordered, and an ID no family means is none."""
    # asv keeps a parameter as its repr: one pair of quotes around the ID, no more.
    bare = text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text
    if not _CASE_ID.fullmatch(bare):  # the view labels a series by what follows the family
        raise AsvFileError(f"{where}: {shown(text)} is no case ID (FAMILY/KEY=VALUE,...)")
    try:
        return registry.parse(bare).id
    except CaseIdError as exc:
        raise AsvFileError(f"{where}: {shown(text)} is no case ID of a family: {exc}") from None


# What benchmarks/bench_families.py tracks of every case from its samples, beside its family's
# headline figures (the suite runs against older trees and cannot import this module: tests hold
# the two alike).
SAMPLE_FIGURES = ("p50_us", "p99_us")


def _declared_unit(figure: str, family: str, where: str) -> str:
    """The unit of ``family``'s ``figure`` (a sample statistic the suite tracks, or one the family
    declares); AsvRowError where it is neither (a row renamed or made up: ``track_p50_ns`` is a
    statistic of the samples that no suite wrote)."""
    unit = unit_of(family, figure)
    if is_sample_statistic(figure) and figure not in SAMPLE_FIGURES:
        raise AsvRowError(f"{where}: the suite tracks no {figure!r} (of the samples it tracks "
                          f"{', '.join(SAMPLE_FIGURES)}): the row is skipped")
    if unit is None:
        names = ", ".join(f.name for f in registry.get(family).figures)
        raise AsvRowError(f"{where}: family {family!r} declares no figure {figure!r} (it declares {names}, and "
                          "every record gives p50_us, p99_us ...): the row is skipped")
    return unit


def _check_range(number: float, unit: str, figure: str, family: str, where: str) -> None:
    """AsvFileError for a value its unit rules out: below zero for a magnitude, or a time longer
    than any case may run (its --timeout is at most MAX_SECONDS): 1e308 us is no measurement."""
    if unit in NON_NEGATIVE_UNITS and number < 0:
        raise AsvFileError(f"{where}: {shown(number)} is below zero, which {family}'s {figure} (in {unit}) "
                           "never is")
    if unit in TIME_SCALE and number * TIME_SCALE[unit] > MAX_SECONDS * 1e9:
        raise AsvFileError(f"{where}: {shown(number)} {unit} is longer than a case may run (at most "
                           f"{MAX_SECONDS:g} s), which {family}'s {figure} never is")


def _figures(name: str, row, columns: dict[str, int], where: str) -> Iterator[Figure]:
    """The figures of one tracked benchmark's row: one per case asv holds. Tracked figures are
    parameterised by case ID alone; asv keeps each parameter as its repr, quotes included."""
    cls = _suite_class_of(name, where)
    if not isinstance(row, list):
        raise AsvFileError(f"{where}: expected a list of the columns result_columns names, got {type(row).__name__}")

    def column(key: str):
        return row[columns[key]] if key in columns and columns[key] < len(row) else None

    params = column("params")
    if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
        raise AsvFileError(f"{where}.params: expected a list of parameter lists")
    if len(params) != 1:
        return  # not a benchmark of the suite's: it takes a case ID and nothing else
    cases = params[0]
    if not all(isinstance(c, str) for c in cases):
        raise AsvFileError(f"{where}.params[0]: expected case IDs (strings)")
    version = column("version")
    if version is not None and not isinstance(version, str):
        raise AsvFileError(f"{where}.version: expected a string, got {type(version).__name__}")
    values = column("result")
    if values is None:  # the benchmark failed as a whole (a build that broke): every case missing
        values = [None] * len(cases)
    if not isinstance(values, list) or len(values) != len(cases):
        got = f"{len(values)} values" if isinstance(values, list) else type(values).__name__
        raise AsvFileError(f"{where}.result: expected a value for each of its {len(cases)} cases, got {got}")
    seen: dict[str, int] = {}
    ids = [_case_id(text, f"{where}.params[0][{i}]") for i, text in enumerate(cases)]
    for i, case_id in enumerate(ids):  # a case's figure is in its family's class, never another's
        family = case_id.partition("/")[0]
        if suite_class(family) != cls:
            raise AsvRowError(f"{where}.params[0][{i}]: {case_id} is a case of family {family!r}, which the suite "
                              f"tracks in class {suite_class(family)}, not {cls}: the row is skipped")
    units = {family: _declared_unit(figure_name(name), family, where)
             for family in dict.fromkeys(case_id.partition("/")[0] for case_id in ids)}
    for i, (text, case_id, value) in enumerate(zip(cases, ids, values)):
        if case_id in seen:  # two values of one case: which one the commit measured is not known
            raise AsvFileError(f"{where}.params[0][{i}]: {shown(text)} is case {case_id}, as params[0][{seen[case_id]}] is")
        seen[case_id] = i
        # asv writes null (or NaN) for a case that failed or lacks the figure: missing, never zero
        missing = value is None or (isinstance(value, float) and math.isnan(value))
        try:
            number = None if missing else check_float(value, f"{where}.result[{i}]")
        except NumberError as exc:
            raise AsvFileError(str(exc)) from None
        if number is not None:
            family = case_id.partition("/")[0]
            _check_range(number, units[family], figure_name(name), family, f"{where}.result[{i}]")
        yield Figure(name, version or "", case_id, number)


def read_result(path: Path, machine: str) -> AsvResult:
    """One results file of ``machine``'s directory; AsvFileError naming the file and the field
    that is not as asv's format writes it."""
    data = _object(_json(path, "results file of asv", MAX_RESULT_BYTES, RESULT_LIMITS), str(path))
    where = f"{path}: field"
    try:
        check_int(data.get("version"), f"{where} version", RESULTS_FORMAT, RESULTS_FORMAT)
        date_ms = check_int(data.get("date"), f"{where} date", 0, MAX_DATE_MS)
    except NumberError as exc:
        raise AsvFileError(str(exc)) from None
    commit = _text(data.get("commit_hash"), f"{where} commit_hash")
    if not _HASH.fullmatch(commit):
        raise AsvFileError(f"{where} commit_hash: expected a commit's hexadecimal hash")
    if named_commit(path) != commit[:8]:  # two files' values would land on one commit
        raise AsvFileError(f"{where} commit_hash: {commit} is not the commit {named_commit(path)!r} the file's name "
                           "gives (asv names a results file <commit[:8]>-<env>.json)")
    env = _text(data.get("env_name"), f"{where} env_name")
    if path.name != file_name(commit, env):  # a copy under another environment's name
        raise AsvFileError(f"{where} env_name: {shown(env)} is not the environment the file's name gives "
                           f"(asv names this file {file_name(commit, env)})")
    params = _object(data.get("params"), f"{where} params")
    own = _text(params.get("machine"), f"{where} params.machine")
    if own != machine:
        raise AsvFileError(f"{where} params.machine: {own!r}, in the directory of machine {machine!r} "
                           "(its machine.json)")
    names = data.get("result_columns")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or len(set(names)) < len(names):
        raise AsvFileError(f"{where} result_columns: expected a list of distinct column names")
    columns = {n: i for i, n in enumerate(names)}
    if "result" not in columns or "params" not in columns:
        raise AsvFileError(f"{where} result_columns: lacks 'result' or 'params'")
    rows = _object(data.get("results"), f"{where} results")
    figures: list[Figure] = []
    skipped: list[Skipped] = []
    for name, row in rows.items():
        if not name.rsplit(".", 1)[-1].startswith("track_"):
            continue
        try:
            figures += _figures(name, row, columns, f"{where} results.{name}")
        except AsvRowError as exc:
            skipped.append(Skipped(path, str(exc), row=name))
    return AsvResult(path, machine, commit, date_ms, tuple(figures), env, tuple(skipped))


def unreadable(path: Path) -> Optional[str]:
    """Why the results file ``path`` cannot be read as JSON at all, or None where it can (or is
    gone). asv writes a results file in place, not beside and renamed, so a full disk leaves it
    empty or cut short; asv then refuses every later filing of that commit over it (``Error
    parsing JSON in file``). A file that is JSON but not asv's format is not this: asv reads it."""
    try:
        _json(path, "results file of asv", MAX_RESULT_BYTES, RESULT_LIMITS)
    except (AsvFileError, InputFileError) as exc:
        return str(exc) if os.path.lexists(path) else None
    return None


def unreadable_files(results_dir: Path, machine: str, commit: str) -> list[tuple[Path, str]]:
    """(file, why) for each results file of ``commit`` in ``machine``'s directory that cannot be
    read as JSON (``unreadable``): asv names them ``<commit[:8]>-<env>.json``."""
    directory = Path(results_dir) / machine
    if not directory.is_dir():
        return []
    found = ((path, unreadable(path)) for path in sorted(directory.glob(f"{commit[:8]}-*.json")))
    return [(path, why) for path, why in found if why is not None]


def _machine_dirs(results_dir: Path) -> Iterator[tuple[Path, list[Path]]]:
    """(directory, its results files) for every directory under ``results_dir`` that holds one,
    as asv walks them; AsvDirectoryError past MAX_RESULT_FILES, or deeper than RESULTS_DEPTH or
    wider than MAX_RESULT_DIRS."""
    count = 0
    walk = walk_bounded(results_dir, "an asv results directory", RESULTS_DEPTH, MAX_RESULT_DIRS, refuse_links=True)
    while True:
        try:
            root, names = next(walk)
        except StopIteration:
            return
        except WalkError as exc:
            raise AsvDirectoryError(str(exc)) from None
        files = [root / n for n in names if n.endswith(".json") and n not in NOT_RESULTS]
        count += len(files)
        if count > MAX_RESULT_FILES:
            raise AsvDirectoryError(f"{results_dir}: more than {MAX_RESULT_FILES} asv results files; a history "
                                    f"reads at most {MAX_RESULT_FILES} (give the directory of fewer machines or commits)")
        if files:
            yield root, files


def read_results(results_dir: Path, machine: Optional[str] = None, commit: Optional[str] = None) -> AsvFiles:
    """Every results file under ``results_dir`` (only ``machine``'s, only ``commit``'s: asv names
    a file by the first 8 digits of its commit), each file that is not one skipped with why."""
    out = AsvFiles()
    read: list[AsvResult] = []
    for directory, files in _machine_dirs(Path(results_dir)):
        if machine is not None and directory != Path(results_dir) / machine:
            continue
        if commit is not None:
            files = [f for f in files if named_commit(f) == commit[:8]]
        try:
            name = read_machine(directory / "machine.json")
        except (AsvFileError, InputFileError) as exc:
            out.skipped += [Skipped(f, f"{f}: its directory's machine.json cannot be read: {exc}") for f in files]
            continue
        for path in files:
            try:
                read.append(read_result(path, name))
            except (AsvFileError, InputFileError) as exc:
                out.skipped.append(Skipped(path, str(exc)))
    kept, twice = one_value_a_commit(read)
    out.results += kept
    out.skipped += twice + [s for result in kept for s in result.skipped_rows]
    return out


def one_value_a_commit(results: list[AsvResult]) -> tuple[list[AsvResult], list[Skipped]]:
    """The results, less every file of a commit that a machine holds in more than one file: asv ran
    it there in two environments (the files' names differ after the commit), or the machine's
    results are in two directories (each machine.json naming it). A history has one value a case,
    figure and commit on a machine, and which file's is meant is not known, so none is taken."""
    by_commit: dict[tuple[str, str], list[AsvResult]] = defaultdict(list)
    for result in results:
        by_commit[(result.machine, result.commit)].append(result)
    kept, skipped = [], []
    for (machine, commit), same in by_commit.items():
        if len(same) == 1:
            kept += same
            continue
        envs = list(dict.fromkeys(r.env for r in same))
        why = (f"asv ran it in {len(envs)} environments ({', '.join(map(repr, envs))})" if len(envs) > 1 else
               f"the machine's results are in {len(same)} directories")
        for result in same:
            others = ", ".join(r.path.name if r.path.parent == result.path.parent else str(r.path)
                               for r in same if r is not result)
            skipped.append(Skipped(result.path, f"{result.path}: commit {commit[:8]} on machine {machine!r} is also "
                                                f"in {others}: {why}, and a history holds one value a commit (give a "
                                                "results directory of one environment and one directory a machine)"))
    return kept, skipped


def warn_skipped(command: str, skipped: list[Skipped]) -> None:
    """Each skipped file on stderr, with why: a file left out of a history is never left out unseen."""
    for item in skipped:
        print(for_terminal(f"critpath {command}: warning: skipped {item.message}"), file=sys.stderr)
