"""The families critpath knows, by name. Everything else iterates this registry."""
from __future__ import annotations

from typing import Iterable

from harness.case import Case, CaseIdError, parse_case_id
from harness.family import Family, GridOptions
from harness.families import (
    allreduce,
    sendrecv,
    pipeline,
    moe_a2a,
    rpc,
    kv_alloc,
    allreduce_tiers,
    p2p_tiers,
    selftest,
)

# Order is the order of `critpath list` and of a run.
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        allreduce.FAMILY,
        sendrecv.FAMILY,
        pipeline.FAMILY,
        moe_a2a.FAMILY,
        rpc.FAMILY,
        kv_alloc.FAMILY,
        allreduce_tiers.FAMILY,
        p2p_tiers.FAMILY,
        selftest.FAMILY,
    )
}


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


def parse(case_id: str) -> Case:
    return parse_case_id(case_id, {name: f.declared for name, f in FAMILIES.items()})


__all__ = ["FAMILIES", "get", "select", "cases", "parse", "CaseIdError"]
