"""Which records a check means: its case (or family and select), in one of its data types.

One rule for the records of a run being judged (harness.accept.checks) and for the cases a
profile's own run would measure (harness.accept.coverage), so that what the profile's load refuses
as out of its run's reach is exactly what judging it would find no record of.
"""
from __future__ import annotations

from typing import Any, Mapping

from harness.claims.check import matches

# Where a record critpath measured comes from; an import names its own (extra.imported.source).
MEASURED = "critpath"


def case_parts(case_id: str) -> tuple[str, dict[str, str]]:
    """``allreduce/algo=ring,dtype=float32`` -> ("allreduce", {"algo": "ring", "dtype": "float32"}), as text."""
    family, _, body = case_id.partition("/")
    return family, dict(item.partition("=")[::2] for item in body.split(",") if item)


def means(item, case_id: str, check: Mapping[str, Any]) -> bool:
    """The record (or planned case: anything with ``family`` and ``params``) of this case ID is of
    the check's case (or family and select), in one of its data types."""
    dtypes = check.get("dtypes")
    if "case" in check:
        want_family, want = case_parts(check["case"])
        have = case_parts(case_id)[1]
        if dtypes:
            want, have = ({k: v for k, v in d.items() if k != "dtype"} for d in (want, have))
        if item.family != want_family or have != want:
            return False
    elif item.family != check["family"] or not matches(item, check.get("select", {})):
        return False
    return not dtypes or item.params.get("dtype") in dtypes
