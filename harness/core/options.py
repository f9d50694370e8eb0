"""Command-line value types shared by every command: each refuses what would break a run later;
the exit codes; the error a command raises when it cannot run on what it was given, and the line
that says so."""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Mapping, Optional, Sequence

from harness.core.echo import shown
from harness.core.escape import for_terminal
from harness.core.numbers import NumberError, parse_float, parse_int
from harness.core.labels import label_fault
from harness.core.runid import run_id_fault
from harness.core.sizes import MAX_MODEL_SIZE_BYTES, MAX_RUN_SIZE_BYTES, parse_sizes

# A bound no case needs; beyond it a timer's arithmetic overflows (threading.Timer, time.monotonic).
MAX_SECONDS = 7 * 24 * 3600.0


EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2  # every case ran and passed; a case failed; could not run


class CannotRun(ValueError):
    """The command cannot run on what it was given (options, environment, an input file): exit code
    2 with the message, which names the option, file or line. The command line catches this one
    class, so it imports none of the modules whose errors derive from it."""


class UsageError(CannotRun):
    """Bad options or environment."""


class UnknownName(KeyError):
    """A name given to the command that names nothing known (a family, a parameter, an allocator,
    a trace, a column): a KeyError for the lookups that catch one, and printed by the command line
    as its message, exit 2. Any other KeyError is a bug, and shows as one: printed as a usage error
    it said ``error: 0``, naming nothing."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""  # the message, not KeyError's repr of it


def absolute(path: Optional[Path]) -> Optional[Path]:
    """A path option as the user meant it: against the directory the command was started in. Read
    once, when a request is built: below it, processes run in other directories (a tree's
    worktree, a clone), where a relative path names somewhere else."""
    return None if path is None else Path(os.path.abspath(path))


def os_error_text(exc: OSError) -> str:
    """An OSError in words, without Python's ``[Errno 2]`` in front: the message, or the file(s)
    and the system's reason (``X: Permission denied``)."""
    if exc.strerror is None:
        return str(exc)
    return ": ".join([str(name) for name in (exc.filename, exc.filename2) if name is not None] + [exc.strerror])


def print_error(command: str, message: object) -> None:
    """``critpath COMMAND: error: MESSAGE`` on stderr; the message may quote a file, a path or a
    case's error, so it is escaped for the terminal."""
    print(for_terminal(f"critpath {command}: error: {message}"), file=sys.stderr)


def seconds(text: str) -> float:
    """A finite, positive number of seconds, at most a week: nan and inf are refused here, not as an
    OverflowError inside a case."""
    in_range = f"must be a finite number of seconds in (0, {MAX_SECONDS:g}]"
    value = _number(float, text, f"; {in_range}")
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{in_range}, got {text}")
    return value


# The grammars of the names a command passes on to another process (a tree's critpath, asv):
# checked here, so no user text reaches a child as one of its options.
FAMILY_NAME = re.compile(r"[a-z][a-z0-9_]*")  # a family module's name
MACHINE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a host name, as asv's machine names are


def families_option(text: str) -> tuple[str, ...]:
    """``--families a,b``: comma-separated family names; a word that is no family name is refused
    (a tree that does not have the family says so itself)."""
    names = comma_separated(text)
    bad = [name for name in names if not FAMILY_NAME.fullmatch(name)]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{bad[0] if bad else text!r} is not a family name "
                                         f"(lower-case letters, digits, '_')")
    return names


def name_option(text: str) -> str:
    """A name option (a profile, a tier): an empty one names nothing, and is refused rather than
    read as "the default" (``--profile ''`` from an unset shell variable)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a name, got {shown(text)}")
    return text


def path_option(text: str) -> Path:
    """A path option or argument: an empty one names no file, and is refused rather than read as
    the current directory (``Path('')`` is ``.``: ``--out "$UNSET"`` would write a report over the
    user's own files there)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a path, got ''")
    return Path(text)


def machine_option(text: str) -> str:
    if not MACHINE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a machine name (letters, digits, '.', '_', '-', "
                                         f"starting with a letter or digit)")
    return text


def run_id_option(text: str) -> str:
    """A run ID given on the command line, by the grammar of every run ID (harness.core.runid):
    an empty one is refused, never read as "the default"."""
    if why := run_id_fault(text):
        raise argparse.ArgumentTypeError(why)
    return text


def case_id_option(text: str) -> str:
    """A case ID by the case-ID grammar (``family/key=value,...``), whichever tree defines it:
    the family may be one this checkout does not have, so its keys are checked by the tree."""
    family, sep, body = text.partition("/")
    items = body.split(",") if body else []
    if not sep or not FAMILY_NAME.fullmatch(family) or not all(
            key and eq and not any(ch.isspace() for ch in item)
            for item in items for key, eq, _ in [item.partition("=")]):
        raise argparse.ArgumentTypeError(f"{text!r} is not a case ID (family/key=value,...)")
    return text


def given_flags(args, flags: Mapping[str, str], defaults: Optional[Mapping[str, object]] = None) -> list[str]:
    """The flags of ``flags`` (an argparse dest -> its flag) the command line set: an option was
    given when its value is not its default, None unless ``defaults`` (dest -> default) says
    otherwise. (With a default other than None, the default itself given is not told apart.)"""
    defaults = defaults or {}
    return [flag for dest, flag in flags.items() if getattr(args, dest) != defaults.get(dest)]


def refuse_given(given: Sequence[str], why: str) -> None:
    """Refuse options that would not act on what the rest of the command line asks for, naming
    them: ``why`` says what takes their place. Nothing when none of them was given."""
    if given:
        named = " and ".join(given) if len(given) < 3 else f"{', '.join(given[:-1])} and {given[-1]}"
        raise UsageError(f"{named} {why}; leave {named} out")


def label_option(text: str) -> str:
    """A run's label, by the one label grammar (harness.core.labels)."""
    if why := label_fault(text):
        raise argparse.ArgumentTypeError(why)
    return text


def add_label_option(parser: argparse.ArgumentParser) -> None:
    """``--label``, repeated, as every command that shows runs side by side takes it (show, report);
    ``check_labels`` holds the labels to the runs."""
    parser.add_argument("--label", action="append", default=[], type=label_option,
                        help="label per run, in order (default: the run ID)")


def check_labels(labels: Sequence[str], runs: int) -> None:
    """``--label``, repeated: one per run, in order, and none given twice, as no list option takes an
    item twice: two runs under one label are one column name ("A vs A"), told apart by nothing."""
    if labels and len(labels) != runs:
        raise UsageError(f"--label given {len(labels)} times for {runs} runs")
    seen: set = set()
    for label in labels:
        if label in seen:
            raise UsageError(f"--label {shown(label)} is given twice; give each run its own label")
        seen.add(label)


# More items than any list option needs (families, tools, worlds, slowdowns): beyond it, a typo
# or a script gone wrong (12,000 families listed 660,000 lines).
MAX_LIST_ITEMS = 1024


def comma_separated(text: str) -> tuple[str, ...]:
    """``a, b,,c`` -> ("a", "b", "c"): names (families, tools) or numbers still to be parsed. An
    empty list, an item given twice (a family run twice, a world modelled twice) and more than
    MAX_LIST_ITEMS items are refused, so every list option reads alike."""
    items = text.split(",", MAX_LIST_ITEMS)
    if len(items) > MAX_LIST_ITEMS:
        raise argparse.ArgumentTypeError(f"more than MAX_LIST_ITEMS = {MAX_LIST_ITEMS} comma-separated items")
    parts = tuple(part.strip() for part in items if part.strip())
    if not parts:
        raise argparse.ArgumentTypeError(f"expected one or more comma-separated values, got {shown(text)}")
    seen: set = set()
    for part in parts:
        if part in seen:
            raise argparse.ArgumentTypeError(f"{shown(part)} is given twice")
        seen.add(part)
    return parts


# What a value is called inside the grammar's message, which argparse leads with the option's name.
_VALUE = "value"


def _number(kind, text: str, hint: str = ""):
    """``text`` as ``kind`` (int or float) by critpath's one number grammar (harness.core.numbers):
    ASCII digits, no '_', '+' or spaces, finite, 64 bits; ArgumentTypeError saying why otherwise,
    followed by ``hint``. (int() reads ' 5', '+5', '1_000' and '٣'; float() reads 'nan'.)"""
    try:
        return (parse_int if kind is int else parse_float)(text, _VALUE)
    except NumberError as exc:
        why = str(exc).removeprefix(f"{_VALUE}: ")
        raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {why}{hint}") from None


def _named(parse, kind):
    parse.__name__ = kind.__name__  # argparse names the type in "invalid int value: 'x'"
    return parse


def integer(text: str) -> int:
    """An integer by the one grammar, for an option whose ``choices`` bound it (``type=int`` reads
    ' 2', '+2' and '٢' as 2)."""
    return _number(int, text)


def at_least(low: int, high: Optional[int] = None):
    """An integer of ``low`` or more, and at most ``high`` when given (--world >= 1, --warmup >= 0,
    --iters <= what a record holds)."""
    def parse(text: str) -> int:
        value = _number(int, text)
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}" if high is None else
                                             f"must be an integer in [{low}, {high}], got {value}")
        return value
    return _named(parse, int)


def positive(kind, high: Optional[float] = None):
    """A finite number of ``kind`` (int or float) above 0, at most ``high`` when given: a budget, a
    window, a count of rounds."""
    def parse(text: str):
        value = _number(kind, text)
        if value <= 0 or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}" if high is None else
                                             f"must be a finite number in (0, {high:g}], got {text}")
        return value
    return _named(parse, kind)


def number_in(low: float, high: float, kind=float):
    """A finite number of ``kind`` in [low, high]: a fraction, a factor, a rate."""
    def parse(text: str):
        value = _number(kind, text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a finite number in [{low:g}, {high:g}], got {text}")
        return value
    return _named(parse, kind)


def size_sweep(text: str, largest: int = MAX_RUN_SIZE_BYTES) -> tuple[int, ...]:
    """A size sweep as nccl-tests writes it (``8:64M:x2``, ``1K:8K:+1K``, ``8,1K,1M``), in bytes."""
    try:
        return parse_sizes(text, largest)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def model_size_sweep(text: str) -> tuple[int, ...]:
    """A size sweep for the model, which allocates nothing: up to MAX_MODEL_SIZE_BYTES."""
    return size_sweep(text, MAX_MODEL_SIZE_BYTES)
