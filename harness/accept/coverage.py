"""What an acceptance profile's own run measures, and the checks no record of it could satisfy.

``critpath accept`` without ``--run`` runs the profile's ``run.cases``; a check of another algo,
world or data type than those cases, or one that accepts only imported records, would be measured
for nothing and end COULD NOT VERIFY. The cases are the runner's own selection from the options
the command runs them with (``run_options``, ``harness.run.plan.select_cases``), and a check is held
to them by the rule that judges records (``harness.accept.match.means``), so what the load refuses
is exactly what judging would find no record of.

Some checks no run could satisfy whatever it holds: a case wider than the profile's world, or of
another backend than the one it pins (a run's fingerprint is held to its records, and its pins to
the profile). Those are refused in either mode, judging a stored run too (``unreachable``).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from harness.accept.checks import why_no_record
from harness.accept.match import MEASURED, canonical_parts, means, selects
from harness.core import registry
from harness.core.case import Case
from harness.core.family import GridOptions
from harness.run.plan import RunOptions, select_cases

Problem = tuple[list, str]  # (the check's field as a path below the profile, what is wrong)


def run_options(profile: Mapping[str, Any], out: Optional[Path] = None) -> RunOptions:
    """The options ``accept`` runs the profile's cases with: one declaration, for the run and for
    the cases the load holds the checks to."""
    spec = profile["run"]
    return RunOptions(case_ids=tuple(spec["cases"]), world=profile["world"], backend=profile.get("backend"),
                      iters=spec.get("iters"), warmup=spec.get("warmup"), timeout_s=spec.get("timeout_s", 60.0),
                      out=out, argv=tuple(sys.argv))


def planned_cases(profile: Mapping[str, Any]) -> list[Case]:
    """The cases the profile's run measures, as the runner selects them (a UsageError as it would)."""
    opts = run_options(profile)
    grid = GridOptions(opts.profile, opts.world, opts.backend or GridOptions.backend, opts.sizes_bytes)
    return select_cases(opts, grid)


def _check_field(check: Mapping[str, Any]) -> str:
    return "case" if "case" in check else "select" if check.get("select") else "family"


def unmeasured(profile: Mapping[str, Any], cases: Sequence[Case]) -> list[tuple[int, Problem]]:
    """(check index, problem) for each check no record of the profile's run could satisfy."""
    problems = []
    for i, check in enumerate(profile["checks"]):
        sources = check.get("sources")
        if sources and MEASURED not in sources:
            problems.append((i, (["sources"], f"the profile's run gives records from {MEASURED}; this check "
                                              f"accepts only {', '.join(sources)}: judge those with --run RUN_DIR")))
            continue
        chosen = [case for case in cases if means(case, case.id, check)]
        if not chosen:
            problems.append((i, ([_check_field(check)], f"the profile's run cannot satisfy this check: "
                                                        f"{_in_run_terms(why_no_record(check, cases))}; "
                                                        f"run.cases measures {_listed(cases)}")))
            continue
        reference = check.get("relative_to")
        if reference is not None:
            family = chosen[0].family
            if not any(case.family == family and selects(case, reference) for case in cases):
                problems.append((i, (["relative_to"], f"no case of run.cases is the reference {reference} of "
                                                      f"family {family}; run.cases measures {_listed(cases)}")))
    return problems


def _in_run_terms(why: str) -> str:
    return why.replace(" in this run", " in the profile's run")


def _listed(cases: Sequence[Case], most: int = 4) -> str:
    ids = [case.id for case in cases]
    return ", ".join(ids[:most]) + (f" and {len(ids) - most} more" if len(ids) > most else "")


def _values(check: Mapping[str, Any], key: str) -> Optional[list]:
    """The values of ``key`` a record of the check may have; None where the check leaves it open."""
    if "case" in check:
        family, params = canonical_parts(check["case"])
        if family not in registry.FAMILIES or key not in params:
            return None
        return [registry.parse(check["case"]).params[key]]
    want = check.get("select", {}).get(key)
    if want is None:
        return None
    return list(want) if isinstance(want, list) else [want]


def unreachable(profile: Mapping[str, Any]) -> list[tuple[int, Problem]]:
    """(check index, problem) for each check whose records no run could hold and pass the profile's
    pins: a wider world than the profile's, another backend than the one it pins."""
    problems = []
    for i, check in enumerate(profile["checks"]):
        field = _check_field(check)
        at = [field] if field == "case" else [field, "world"]
        worlds = _values(check, "world")
        if worlds and all(isinstance(w, int) and w > profile["world"] for w in worlds):
            problems.append((i, (at, f"world {'|'.join(map(str, worlds))} is wider than the profile's world "
                                     f"{profile['world']}: a run its world pin passes holds no record that wide")))
            continue
        backends = _values(check, "backend")
        if "backend" in profile and backends and profile["backend"] not in backends:
            at = [field] if field == "case" else [field, "backend"]
            problems.append((i, (at, f"backend {'|'.join(map(str, backends))}, but the profile pins backend "
                                     f"{profile['backend']}: a run its backend pin passes holds only "
                                     f"{profile['backend']} records")))
    return problems
