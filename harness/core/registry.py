"""The families critpath knows, by name. Everything else iterates this registry.

A family's module is imported the first time the family is asked for, not when the registry is:
an rpc-only run or gate repeat never imports torch, which the collective families need and which
costs about a second of start-up per process on a small machine.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Mapping
from typing import Callable, Iterable, Iterator

from harness.core.case import Case, CaseIdError, parse_case_id
from harness.core.family import Family, GridOptions
from harness.core.options import UnknownName

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


# Wrappers of a family as it is loaded, for a change that every process running the family must
# see (the driver, a gate worker, the asv suite): each module of this package that defines
# ``wrap(family) -> Family`` is applied, in name order. The tree ships one (the slowdowns named in
# the environment); critpath gate-power commits another on its throwaway branches. The registry
# knows neither: it only applies what the package holds.
WRAPS_PACKAGE = "harness.wraps"


@functools.cache
def wrappers() -> tuple[Callable[[Family], Family], ...]:
    """The ``wrap`` of every module in ``WRAPS_PACKAGE``, in name order (found once per process)."""
    package = importlib.import_module(WRAPS_PACKAGE)
    found = []
    for name in sorted(m.name for m in pkgutil.iter_modules(package.__path__)):
        module = importlib.import_module(f"{WRAPS_PACKAGE}.{name}")
        if not callable(getattr(module, "wrap", None)):
            raise RuntimeError(f"{module.__name__} defines no wrap(family); every module of {WRAPS_PACKAGE} must")
        found.append(module.wrap)
    return tuple(found)


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
            for wrap in wrappers():
                family = wrap(family)
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
        raise UnknownName(f"unknown family {name!r}; known: {', '.join(FAMILIES)}") from None


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


def canonical_id(case_id: str) -> str:
    """``case_id`` in the one spelling runs give its case (harness.core.case), so two spellings of
    one case compare equal; unchanged where it names no case of this checkout (another tree's)."""
    try:
        return parse(case_id).id
    except (CaseIdError, KeyError):
        return case_id


__all__ = ["FAMILIES", "FAMILY_MODULES", "get", "select", "cases", "parse", "canonical_id", "CaseIdError"]
