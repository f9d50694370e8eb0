"""critpath: latency of collectives and control messages on the critical path of LLM inference.

What users and family authors may import from ``harness`` itself (docs/writing-a-family.md,
docs/analyse.md); every other module is internal and may move between releases:

- writing a family: ``Family``, ``Param``, ``Case``, ``GridOptions``, ``RankContext``,
  ``CheckResult``, ``Column``, ``WRONG_COLUMN``, ``Figure``, ``Summary``, ``BACKEND``,
  ``world_param``, ``bytes_param``, the nccl-tests bandwidth helpers (``bandwidth_figures``, ``algbw_gbps``,
  ``busbw_gbps``, ``BANDWIDTH_COLUMNS``) and ``parse_sizes`` / ``format_size``;
- a family's plots and findings: ``Plot``, ``Finding``, ``Concluded``, and for drawing ``Drawn``,
  ``subplots``, ``legend``, ``palette`` (one look for every plot of a report);
- finding families and cases: ``FAMILIES`` (name -> Family, each imported on first use),
  ``get_family(name)``, ``parse_case(case_id)``;
- reading results: ``load_records``, ``Record``, ``figure_value`` (a figure of a record by name,
  in the grammar the gate and claims use), ``frame`` and ``samples_frame`` (pandas).
"""
from __future__ import annotations

import importlib
from typing import Any

from harness import moved

__version__ = "0.2.0"

# Public name -> (module, name there). Resolved on first use: `import harness` takes about 10 ms,
# while these modules pull numpy, jsonschema and (for the frames) pandas, 0.4-1 s here, which a
# process that needs none of them (an rpc echo server, `critpath --help`) must not pay.
_PUBLIC: dict[str, tuple[str, str]] = {
    **{name: ("harness.core.family", name) for name in (
        "Family", "GridOptions", "RankContext", "CheckResult", "Column", "WRONG_COLUMN", "BACKEND", "world_param",
        "bytes_param", "Plot", "Finding", "Concluded")},
    **{name: ("harness.core.plotting", name) for name in ("Drawn", "subplots", "legend", "palette")},
    **{name: ("harness.core.case", name) for name in ("Case", "Param", "CaseIdError")},
    "Figure": ("harness.core.figures", "Figure"),
    "FigureUnavailable": ("harness.core.figures", "FigureUnavailable"),
    "figure_value": ("harness.core.figures", "value"),
    "Summary": ("harness.core.stats", "Summary"),
    **{name: ("harness.core.bandwidth", name) for name in (
        "bandwidth_figures", "algbw_gbps", "busbw_gbps", "BANDWIDTH_COLUMNS")},
    "parse_sizes": ("harness.core.sizes", "parse_sizes"),
    "format_size": ("harness.core.sizes", "format_size"),
    # Not "families" or "family": those are harness.families (the package) and 0.1's harness.family.
    "FAMILIES": ("harness.core.registry", "FAMILIES"),
    "get_family": ("harness.core.registry", "get"),
    "parse_case": ("harness.core.registry", "parse"),
    "Record": ("harness.core.records", "Record"),
    "load_records": ("harness.core.store", "load_records"),
    "frame": ("harness.tables.frame", "frame"),
    "samples_frame": ("harness.tables.frame", "samples_frame"),
}
__all__ = sorted(_PUBLIC)

moved.install()


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        module, attribute = _PUBLIC[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value  # resolved once
        return value
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
