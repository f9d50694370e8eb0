"""Which records may be compared: only those measured under one definition.

pyperf's ``Benchmark.add_run`` refuses a run whose checked metadata differ from the benchmark's;
this is the same rule for critpath's records. Two records of one case compare only when their
family version (what the case and its figures mean), timer (what clock took the samples) and
reduction (how ranks' samples became one) agree. The gate, ``compare`` and the claims ask here and
refuse, naming the field, rather than compare two definitions as if they were one.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional

from harness.core.records import Record

CHECKED_FIELDS = ("family_version", "timer", "reduction")


def definition(record: Record) -> dict:
    """The fields that must agree for ``record`` to be compared with another of its case."""
    return {name: getattr(record, name) for name in CHECKED_FIELDS}


def mismatch(labelled: Mapping[str, Iterable[Record]]) -> Optional[str]:
    """Why the records (grouped by a label such as base / candidate) may not be compared, naming
    the first field that differs and its values; None when they agree."""
    first: Optional[tuple[str, dict]] = None
    for label, records in labelled.items():
        for record in records:
            seen = definition(record)
            if first is None:
                first = (label, seen)
                continue
            for name in CHECKED_FIELDS:
                if seen[name] != first[1][name]:
                    where = label if label == first[0] else f"{first[0]} vs {label}"
                    return (f"{name} differs ({where}: {first[1][name]!r} vs {seen[name]!r}); "
                            f"records of different definitions are not compared (re-measure both sides with one "
                            f"critpath version)")
    return None
