"""The families critpath knows, by name. Everything else iterates this registry.

A family's module is imported the first time the family is asked for, not when the registry is:
an rpc-only run or gate repeat never imports torch, which the collective families need and which
costs about a second of start-up per process on a small machine.
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Iterable, Iterator

from harness.core.case import Case, CaseIdError, parse_case_id
from harness.core.family import Family, GridOptions

# Order is the order of `critpath list` and of a run. Each family lives in its own module under
# harness.families, which defines FAMILY.
FAMILY_MODULES: dict[str, str] = {
    name: f"harness.families.{name}"
    for name in (
        "allreduce",
        "sendrecv",
        "pipeline",
        "moe_a2a",
        "rpc",
        "kv_alloc",
        "allreduce_tiers",
        "p2p_tiers",
        "selftest",
    )
}


# Slowdowns injected on purpose into this process's families (harness.gatepower.inject.from_environment):
# how one torchrun agent, one node, is made the slow one. JSON {"CASE_ID": [wait_ns, every]}.
INJECT_ENV = "CRITPATH_INJECT_SLOWDOWN"


class _Families(Mapping):
    """Name -> Family, importing each family's module on first use."""

    def __init__(self, modules: Mapping[str, str]) -> None:
        self._modules = dict(modules)
        self._loaded: dict[str, Family] = {}

    def __getitem__(self, name: str) -> Family:
        if name not in self._loaded:
            module = self._modules[name]  # KeyError for an unknown name, as a dict would
            family = importlib.import_module(module).FAMILY
            if family.name != name:
                raise RuntimeError(f"{module} defines family {family.name!r}, registered as {name!r}")
            if os.environ.get(INJECT_ENV):
                from harness.gatepower.inject import from_environment

                family = from_environment(family)
            self._loaded[name] = family
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __contains__(self, name: object) -> bool:
        return name in self._modules


FAMILIES: Mapping[str, Family] = _Families(FAMILY_MODULES)


def get(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}") from None


def select(names: Iterable[str] | None) -> list[Family]:
    """Families named on the command line, or every default one."""
    if not names:
        return [f for f in FAMILIES.values() if f.default]
    return [get(n) for n in names]


def cases(families: Iterable[Family], options: GridOptions) -> list[Case]:
    return [case for family in families for case in family.grid(options)]


class _Declarations(Mapping):
    """Family name -> declared parameters, importing only the family a case ID names."""

    def __getitem__(self, name: str):
        return FAMILIES[name].declared

    def __iter__(self) -> Iterator[str]:
        return iter(FAMILIES)

    def __len__(self) -> int:
        return len(FAMILIES)

    def __contains__(self, name: object) -> bool:
        return name in FAMILIES


def parse(case_id: str) -> Case:
    """A case ID as a Case, refused (CaseIdError) unless every key, value and joined rule of its
    family's declaration admits it: nothing runs for an ID the family cannot mean."""
    case = parse_case_id(case_id, _Declarations())
    return FAMILIES[case.family].check_case(case)


__all__ = ["FAMILIES", "FAMILY_MODULES", "get", "select", "cases", "parse", "CaseIdError"]
