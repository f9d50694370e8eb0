"""Which records a check means: its case (or family and select), in one of its data types.

One rule for the records of a run being judged (harness.accept.checks) and for the cases a
profile's own run would measure (harness.accept.coverage), so that what the profile's load refuses
as out of its run's reach is exactly what judging it would find no record of.

A key at its default may be left out of a case ID or written, and names the same case
(harness.core.case): a check's case is compared in its canonical spelling, and a select (or
relative_to) of a key's default matches a record whose ID leaves that key out.
"""
from __future__ import annotations

import functools
from typing import Any, Mapping, Optional

from harness.core import registry

# Where a record critpath measured comes from; an import names its own (extra.imported.source).
MEASURED = "critpath"


def case_parts(case_id: str) -> tuple[str, dict[str, str]]:
    """``allreduce/algo=ring,dtype=float32`` -> ("allreduce", {"algo": "ring", "dtype": "float32"}), as text."""
    family, _, body = case_id.partition("/")
    return family, dict(item.partition("=")[::2] for item in body.split(",") if item)


@functools.lru_cache(maxsize=4096)  # a check is held to every record of a run: one parse per ID
def canonical_parts(case_id: str) -> tuple[str, dict[str, str]]:
    """``case_parts`` of the one spelling runs give ``case_id``'s case (a key at its default left out
    or written, as its family declares); the text as given where it names no case of this checkout."""
    return case_parts(registry.canonical_id(case_id))


def value_of(item, key: str) -> Optional[Any]:
    """The value of ``key`` in the record (or planned case): its own where its ID gives one, else
    the default its family declares (what an ID that leaves the key out means); None without either."""
    if key in item.params:
        return item.params[key]
    if item.family not in registry.FAMILIES:
        return None
    param = registry.FAMILIES[item.family].declared.get(key)
    return None if param is None else param.default


def selects(item, selector: Mapping[str, Any]) -> bool:
    """Does the record (or planned case) match a select (or relative_to) of parameters: a list means
    any of its values, None that the record has no such parameter, a key's default a record whose
    ID leaves it out?"""
    for key, want in selector.items():
        if want is None:
            if key in item.params:
                return False
        elif value_of(item, key) not in (want if isinstance(want, list) else [want]):
            return False
    return True


def means(item, case_id: str, check: Mapping[str, Any]) -> bool:
    """The record (or planned case: anything with ``family`` and ``params``) of this case ID is of
    the check's case (or family and select), in one of its data types."""
    dtypes = check.get("dtypes")
    if "case" in check:
        want_family, want = canonical_parts(check["case"])
        have = canonical_parts(case_id)[1]
        if dtypes:
            want, have = ({k: v for k, v in d.items() if k != "dtype"} for d in (want, have))
        if item.family != want_family or have != want:
            return False
    elif item.family != check["family"] or not selects(item, check.get("select", {})):
        return False
    return not dtypes or value_of(item, "dtype") in dtypes
