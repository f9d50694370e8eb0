"""Cases and their stable IDs: ``family/key=value,...`` with keys sorted.

An ID is the only way the CLI, asv, the gate and the reports address a case, so it must
round-trip exactly and never change meaning. Values are typed by the family's parameter
declaration, so ``size_bytes=8`` parses back to the int 8, not the string "8".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union

ParamValue = Union[int, float, str]

# Characters that would make an ID ambiguous to split.
_RESERVED = set("/,= \t\n")


class CaseIdError(ValueError):
    """A case ID that cannot be parsed or names an unknown family or key."""


@dataclass(frozen=True)
class Param:
    """One declared parameter of a family: its name, value type and meaning."""

    name: str
    type: type
    doc: str = ""

    def parse(self, text: str, case_id: str) -> ParamValue:
        try:
            if self.type is int:
                return int(text, 10)
            if self.type is float:
                return float(text)
        except ValueError:
            raise CaseIdError(
                f"case ID {case_id!r}: key {self.name!r} expects {self.type.__name__}, got {text!r}"
            ) from None
        return text


def _format_value(value: ParamValue) -> str:
    if isinstance(value, bool):
        raise TypeError("booleans are not case parameters; use an int 0/1 or a named string")
    if isinstance(value, float):
        text = repr(value)
    else:
        text = str(value)
    if not text or _RESERVED & set(text):
        raise ValueError(f"parameter value {text!r} contains a reserved character (/ , = or space)")
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

    @property
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
        params[key] = params_decl[key].parse(text, case_id)
    return Case(family, params)
