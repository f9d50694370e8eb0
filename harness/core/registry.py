"""The families critpath knows, by name. Everything else iterates this registry.

A family's module is imported the first time the family is asked for, not when the registry is:
an rpc-only run or gate repeat never imports torch, which the collective families need and which
costs about a second of start-up per process on a small machine.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
import sys
from collections.abc import Mapping
from typing import Callable, Iterable, Iterator

from harness.core.case import Case, CaseIdError, parse_case_id
from harness.core.escape import for_terminal
from harness.core.family import GRID_FLAGS, Family, GridOptions, grid_reading
from harness.core.options import UnknownName, refuse_given

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


def cases(families: Iterable[Family], options: GridOptions, given: Iterable[str] = ()) -> list[Case]:
    return [case for built in grids(families, options, given).values() for case in built]


def grids(families: Iterable[Family], options: GridOptions, given: Iterable[str] = ()) -> dict[str, list[Case]]:
    """Each family's grid at ``options``, by family name. ``given`` names the fields of ``options``
    the command line set (GRID_FLAGS): one that no family's grid reads would act on nothing and is
    refused, naming the families; one that only some grids read acts on those, and the others are
    named on stderr, so an option is never taken without a word where it does nothing."""
    built: dict[str, list[Case]] = {}
    idle: dict[str, list[str]] = {name: [] for name in given}  # field -> families that never read it
    for family in families:
        built[family.name], read = grid_reading(family, options)
        for name in idle:
            if name not in read:
                idle[name].append(family.name)
    where = f"the {options.profile} grid of"
    nowhere = [GRID_FLAGS[name] for name, names in idle.items() if names and len(names) == len(built)]
    refuse_given(nowhere, f"{'does' if len(nowhere) == 1 else 'do'} not act on {where} {', '.join(built)}: the cases "
                          f"are the same at any {' and '.join(nowhere)}")
    for name, names in idle.items():
        if names:
            print(for_terminal(f"critpath: {GRID_FLAGS[name]} does not act on {where} {', '.join(names)} (the "
                               f"cases are the same at any {GRID_FLAGS[name]}); it acts on the other families"),
                  file=sys.stderr)
    return built


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
    return FAMILIES[case.family].check_case(case, case_id)


def canonical_id(case_id: str) -> str:
    """``case_id`` in the one spelling runs give its case (harness.core.case), so two spellings of
    one case compare equal; unchanged where it names no case of this checkout (another tree's)."""
    try:
        return parse(case_id).id
    except (CaseIdError, KeyError):
        return case_id


__all__ = ["FAMILIES", "FAMILY_MODULES", "get", "select", "cases", "parse", "canonical_id", "CaseIdError"]
