"""What the registered families declare, looked up by a family's name: the figure a record's
metric names, and which way is better for any figure.

Above the registry on purpose: ``figures`` defines the grammar and knows no family, the registry
knows the families, and this module joins the two for readers that hold only a family's name
(the gate, claims, acceptance, tables, diagnosis).
"""
from __future__ import annotations

from typing import Optional

from harness.core import registry
from harness.core.figures import (
    SAMPLE_BETTER,
    Figure,
    FigureUnavailable,
    is_sample_statistic,
    sample_parts,
)


def declared(family_name: str, name: str) -> Optional[Figure]:
    """The figure ``name`` as family ``family_name`` declares it; None for a family critpath does
    not know (an imported nccl-tests collective other than all_reduce) or a name it does not declare."""
    if family_name not in registry.FAMILIES:
        return None
    return registry.get(family_name).figure(name)


def unit_of(family_name: str, name: str) -> Optional[str]:
    """The unit of figure ``name`` of a record of ``family_name``: a sample statistic's its name
    gives (``p50_us``: us; a tail ratio ``p99_over_mean``: ratio), a metric's as its family declares
    it; None for a name the family does not declare."""
    if is_sample_statistic(name):
        parts = sample_parts(name)
        return parts[1] if parts else "ratio"
    figure = declared(family_name, name)
    return figure.unit if figure is not None else None


def better(family_name: str, name: str) -> str:
    """Which way is better for ``name`` of a record of ``family_name``: sample statistics are times
    (lower); a metric is as its family declares it. Never guessed from the name's suffix."""
    if is_sample_statistic(name):
        return SAMPLE_BETTER
    figure = declared(family_name, name)
    if figure is None:
        raise FigureUnavailable(f"{name!r} is not a figure that family {family_name!r} declares; give the direction "
                                "(--direction lower|higher, or direction: in a table)")
    if figure.better == "neither":
        raise FigureUnavailable(f"{family_name}.{name} ({figure.definition}) is context, not better or worse; "
                                "gate on another figure")
    return figure.better
