"""Cases and their stable IDs: ``family/key=value,...`` with keys sorted.

An ID is the only way the CLI, asv, the gate and the reports address a case, so it must
round-trip exactly and never change meaning. Values are typed by the family's parameter
declaration, so ``size_bytes=8`` parses back to the int 8, not the string "8".

One case has one ID. Every case is made through ``check_declared`` (a parsed ID and a family's
``case()`` alike), which writes it in its canonical spelling:

- a key with a default is left out where its value is the default (``selftest/...,spin_iters=0``
  is ``selftest/...``), unless its Param is ``written``: then the ID always spells it out, its
  default filled in where the text left it out (moe_a2a's ``mitigation=none``, rpc's
  ``mode=pingpong,codec=raw``);
- a key that is a setting of some cases only (``Param.needs``: spin_iters of mode=spin) is left out
  of the others where it holds its default, and refused where it holds anything else, as it would
  change nothing that is measured.

``written`` exists so the IDs the grids printed before this rule stay as printed: shipped
baselines, history and published runs name those IDs, and renaming every moe_a2a and rpc case would
orphan them. The other spelling of such a case (mitigation left out) now parses to that same ID.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Union

from harness.core.numbers import NumberError, parse_float, parse_int

ParamValue = Union[int, float, str]

# Characters that would make an ID ambiguous to split.
_RESERVED = set("/,= \t\n")
# What nearly every value is, matched at once: a grid formats tens of thousands of them.
_CLEAN = re.compile(r"[A-Za-z0-9_.+\-]+", re.ASCII)


class CaseIdError(ValueError):
    """A case ID that cannot be parsed or names an unknown family or key."""


@dataclass(frozen=True)
class Param:
    """One declared parameter of a family: its name, value type, meaning, and what it may be.

    ``choices`` or an inclusive ``low``/``high`` range bound the value; a case ID outside them is
    refused when it is parsed, before anything runs. ``default`` is the value an ID that leaves the
    key out means (the family reads it through ``Family.value``); ``required`` keys have none.
    """

    name: str
    type: type
    doc: str = ""
    choices: Optional[tuple[ParamValue, ...]] = None
    low: Optional[float] = None
    high: Optional[float] = None
    default: Optional[ParamValue] = None
    required: bool = False
    # The ID spells this key out even at its default (see the module's docstring).
    written: bool = False
    # The key is a setting of the cases where another key holds one of some values only.
    needs: Optional["Needs"] = None

    def allowed(self) -> str:
        """What the value may be, in words, for an error message."""
        if self.choices is not None:
            return "one of " + ", ".join(str(c) for c in self.choices)
        low, high = _bound(self.low), _bound(self.high)
        if low is not None and high is not None:
            return f"in [{low}, {high}]"
        if low is not None:
            return f">= {low}"
        if high is not None:
            return f"<= {high}"
        return f"any {self.type.__name__}"

    def admits(self, value: ParamValue) -> bool:
        if self.choices is not None and value not in self.choices:
            return False
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                return False
            if self.low is not None and value < self.low:
                return False
            if self.high is not None and value > self.high:
                return False
        return True

    def check(self, value: ParamValue, case_id: str, written: Optional[str] = None) -> ParamValue:
        """``value``, or CaseIdError quoting it as ``written`` (the number as the user typed it,
        ``1e300``, not Python's ``1e+300``) where this key does not admit it."""
        if not self.admits(value):
            why = f" ({self.doc})" if self.doc else ""
            given = written if written is not None and not isinstance(value, str) else repr(value)
            raise CaseIdError(f"case ID {case_id!r}: {self.name}={given} is not allowed; {self.name} must be "
                              f"{self.allowed()}{why}")
        return value

    def parse(self, text: str, case_id: str) -> ParamValue:
        """``text`` as this key's type by critpath's one number grammar: ``size_bytes=٣``,
        ``=1_000`` and ``=08`` name no case (int() would read them as 3, 1000 and 8, giving one case
        several IDs)."""
        source = f"case ID {case_id!r}: key {self.name!r}"
        try:
            if self.type is int:
                return parse_int(text, source)
            if self.type is float:
                return parse_float(text, source)
        except NumberError as exc:
            raise CaseIdError(str(exc)) from None
        why = _text_fault(text)
        if why:
            raise CaseIdError(f"{source}: {why}")
        return text


@dataclass(frozen=True)
class Needs:
    """Where a key means something: the cases whose ``key`` holds one of ``values``."""

    key: str
    values: tuple[ParamValue, ...]

    def met(self, case: "Case", declared: Mapping[str, Param]) -> bool:
        return _value_of(case, declared, self.key) in self.values

    def refusal(self, name: str, case: "Case", declared: Mapping[str, Param]) -> str:
        wanted = "/".join(str(v) for v in self.values)
        return (f"key {name!r} is a setting of {self.key}={wanted} only; this case has "
                f"{self.key}={_value_of(case, declared, self.key)}")


def _value_of(case: "Case", declared: Mapping[str, Param], key: str) -> Optional[ParamValue]:
    return case.params[key] if key in case.params else declared[key].default


def _text_fault(text: str) -> str:
    """Why ``text`` cannot be a string value of an ID, or "" when it can."""
    if not text:
        return "an empty value"
    if _CLEAN.fullmatch(text):
        return ""
    if any(ch.isspace() for ch in text):
        return f"{text!r} contains a space"
    reserved = sorted(_RESERVED & set(text))
    if reserved:
        return f"{text!r} contains the reserved character {reserved[0]!r} (/ , = and spaces split an ID)"
    return ""


def _bound(value: Optional[float]) -> Optional[str]:
    if value is None:
        return None
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def _format_value(value: ParamValue) -> str:
    if isinstance(value, bool):
        raise TypeError("booleans are not case parameters; use an int 0/1 or a named string")
    text = repr(value) if isinstance(value, float) else str(value)
    why = _text_fault(text)
    if why:
        raise CaseIdError(f"parameter value: {why}")
    return text


@dataclass(frozen=True)
class Case:
    """A family name plus concrete parameter values; immutable and hashable."""

    family: str
    params: Mapping[str, ParamValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Freeze the mapping into a sorted tuple-backed dict so equality and hashing are stable.
        object.__setattr__(self, "params", dict(sorted(self.params.items())))

    def __hash__(self) -> int:
        return hash(self.id)

    @functools.cached_property
    def id(self) -> str:
        body = ",".join(f"{k}={_format_value(v)}" for k, v in self.params.items())
        return f"{self.family}/{body}"

    @property
    def world(self) -> int:
        """Ranks this case needs; families without a ``world`` key run on one rank."""
        return int(self.params.get("world", 1))

    def __str__(self) -> str:
        return self.id


def parse_case_id(case_id: str, declared: Mapping[str, Mapping[str, Param]]) -> Case:
    """Parse ``family/k=v,...`` using the declared parameters of each family.

    ``declared`` maps family name -> {param name -> Param}. Unknown families and keys are errors
    that name what is known, so a typo in a CI config fails loudly.
    """
    family, sep, body = case_id.partition("/")
    if not sep or not family:
        raise CaseIdError(f"case ID {case_id!r} is not of the form family/key=value,...")
    if family not in declared:
        known = ", ".join(sorted(declared)) or "(none)"
        raise CaseIdError(f"case ID {case_id!r}: unknown family {family!r}; known families: {known}")
    params_decl = declared[family]
    params: dict[str, ParamValue] = {}
    for item in body.split(",") if body else []:
        key, eq, text = item.partition("=")
        if not eq:
            raise CaseIdError(f"case ID {case_id!r}: {item!r} is not key=value")
        if key not in params_decl:
            known = ", ".join(sorted(params_decl))
            raise CaseIdError(f"case ID {case_id!r}: family {family!r} has no key {key!r}; keys: {known}")
        if key in params:
            raise CaseIdError(f"case ID {case_id!r}: key {key!r} given twice")
        # held to its bounds here, while the text the user wrote is at hand to quote
        params[key] = params_decl[key].check(params_decl[key].parse(text, case_id), case_id, text)
    return check_declared(Case(family, params), params_decl, case_id)


def check_declared(case: Case, declared: Mapping[str, Param], written: Optional[str] = None) -> Case:
    """``case`` in its canonical spelling (the module's docstring), refused where a value falls
    outside its Param's bounds, a key is set where it means nothing, or a required key is missing.
    An error quotes the ID as ``written`` where the case was read from one (the user's spelling,
    not the canonical one)."""
    for key, value in case.params.items():
        if isinstance(value, str) and (why := _text_fault(value)):
            raise CaseIdError(f"family {case.family!r}: key {key!r}: {why}")
    for key, value in case.params.items():
        if not declared[key].admits(value):  # the ID is spelled only for the message: a grid makes thousands
            declared[key].check(value, written or case.id)
    missing = [p for p in declared.values() if p.required and p.name not in case.params]
    if missing:
        raise CaseIdError(f"case ID {written or case.id!r}: missing key {missing[0].name!r} ({missing[0].doc}); "
                          f"family {case.family!r} needs "
                          f"{', '.join(p.name for p in declared.values() if p.required)}")
    return canonical(case, declared, written)


def canonical(case: Case, declared: Mapping[str, Param], written: Optional[str] = None) -> Case:
    """``case`` with each key at its default left out or written out, as its Param says; a key
    set where it means nothing is refused (CaseIdError, quoting the ID as ``written`` where given)."""
    params: dict[str, ParamValue] = {}
    for param in declared.values():
        applies = param.needs is None or param.needs.met(case, declared)
        if param.name not in case.params:
            if param.written and applies and param.default is not None:
                params[param.name] = param.default
            continue
        value = case.params[param.name]
        at_default = param.default is not None and value == param.default
        if not applies and not at_default:
            raise CaseIdError(f"case ID {written or case.id!r}: {param.needs.refusal(param.name, case, declared)}")
        if applies and (param.written or not at_default):
            params[param.name] = value
    return Case(case.family, params)
