"""An acceptance profile: its schema, and its loading with every error naming file, line and field.

A profile pins the machine (GPU count and name, driver, NCCL version, PCIe generation and width,
active NVLinks; world size, backend and node layout), bounds node facts (ECC errors, remapped rows, clock
slowdowns: harness.run.nodefacts), and lists checks (a case or a family + parameters, a statistic, a
``max`` or ``min``, and where the threshold comes from). A check the schema admits but its family
cannot mean (a key the family does not declare, a figure it does not define) is refused here too.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Optional

import jsonschema

from harness.accept.coverage import planned_cases, unmeasured, unreachable
from harness.accept.match import MEASURED, case_parts
from harness.claims.baselines import (  # as baselines
    SELECTOR_SCHEMA,
    line_of_field,
    refuse_unknown_key,
    selector_faults,
    statistic_type_fault,
)
from harness.core import registry, yamlfile
from harness.core.case import CaseIdError
from harness.core.declarations import declared
from harness.core.figures import is_sample_statistic, statistic_fault
from harness.core.imported import IMPORTED_FAMILIES
from harness.core.options import MAX_SECONDS, UsageError
from harness.core.records import MAX_SAMPLES
from harness.core.scale import MAX_WORLD
from harness.core.schema import strict_validator
from harness.run.nodefacts import FACT_NAMES

# Where a record came from: critpath measured it, or it was imported (extra.imported.source).
RECORD_SOURCES = (MEASURED, "nccl-tests")
_BOUND = {"oneOf": [{"required": ["max"]}, {"required": ["min"]}]}

PROFILE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema", "name", "world", "checks"],
    "additionalProperties": False,
    "properties": {
        "schema": {"const": "critpath.accept/1"},
        "name": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "world": {"type": "integer", "minimum": 1, "maximum": MAX_WORLD},
        "backend": {"enum": ["gloo", "nccl"]},
        "nodes": {"type": "integer", "minimum": 1, "maximum": MAX_WORLD},  # a node holds a rank or more
        "ranks_per_node": {"type": "integer", "minimum": 1, "maximum": MAX_WORLD},
        "run": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "cases": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "iters": {"type": "integer", "minimum": 1, "maximum": MAX_SAMPLES},
                "warmup": {"type": "integer", "minimum": 0, "maximum": MAX_SAMPLES},
                "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_SECONDS},
            },
            "required": ["cases"],
        },
        "fingerprint": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "gpu_count": {"type": "integer", "minimum": 0},
                "gpu_name": {"type": "string"},
                "driver_version": {"type": "string"},
                "nccl_version": {"type": "string"},
                "pcie_gen": {"type": "integer", "minimum": 1, "description": "maximum link generation (pcie_gen_max)"},
                "pcie_width": {"type": "integer", "minimum": 1, "description": "maximum link width (pcie_width_max)"},
                "nvlink_active": {"type": "integer", "minimum": 0},
            },
        },
        "facts": {
            "type": "array",
            "items": {
                "type": "object", "additionalProperties": False,
                "required": ["name", "fact", "source"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "fact": {"enum": list(FACT_NAMES)},
                    "max": {"type": "number"},
                    "min": {"type": "number"},
                    "source": {"type": "string", "minLength": 1},
                },
                **_BOUND,
            },
        },
        "checks": {
            "type": "array", "minItems": 1,
            "items": {
                "type": "object", "additionalProperties": False,
                "required": ["name", "statistic", "source"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "case": {"type": "string"},
                    "family": {"type": "string"},
                    "select": SELECTOR_SCHEMA,
                    "relative_to": {**SELECTOR_SCHEMA,
                                    "description": "select of the reference record; the check compares the ratio"},
                    "statistic": {"type": "string"},
                    "max": {"type": "number"},
                    "min": {"type": "number"},
                    "source": {"type": "string", "minLength": 1},
                    "dtypes": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1,
                               "uniqueItems": True, "description": "data types whose records satisfy the check"},
                    "sources": {"type": "array", "items": {"enum": list(RECORD_SOURCES)}, "minItems": 1,
                                "uniqueItems": True, "description": "where records that satisfy the check may come from"},
                },
                **_BOUND,
                "anyOf": [{"required": ["case"]}, {"required": ["family"]}],
            },
        },
    },
}
_VALIDATOR = strict_validator(PROFILE_SCHEMA)


class ProfileError(ValueError):
    """A profile that cannot be used; the message names file, line and field."""


def _select_problems(family: str, check: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What no record of the family can have, by the rule a claim's select is held to
    (``selector_faults``): a key it does not declare, 1024.0 for an int key (Python's 1024.0 == 1024,
    though no case ID can say 1024.0), a value outside the key's choices, one a list gives twice.
    A null, which in a claim means "no such key", is refused: a check's select reads a key left out
    of a record's ID at its default, so every record has every key, and the null matched nothing."""
    problems = [(f"{section}.{key}", f"null is no value of {family}.{key}: give its value (a key left out of a "
                                     "case ID is at its family's default), or leave the key out of the select")
                for section in ("select", "relative_to") for key, want in check.get(section, {}).items()
                if want is None]
    return problems + [(".".join(str(p) for p in [section, *at]), why) for section in ("select", "relative_to")
                       for at, why in selector_faults(family, check.get(section, {}))]


def _dtype_problems(family: str, dtypes: list) -> list[tuple[str, str]]:
    """The data types of ``dtypes`` no record of the family can be in, by the rule select.dtype is
    held to: a typo would leave the type out of the check without a word."""
    if family not in registry.FAMILIES:
        return []
    if "dtype" not in registry.get(family).declared:
        # no record of the family has a type, so the check would load and then verify nothing
        return [("dtypes", f"family {family!r} has no parameter 'dtype'; leave dtypes out, or name a family "
                           "that has one")]
    return [(".".join(["dtypes", *(str(p) for p in at[1:])]), why)
            for at, why in selector_faults(family, {"dtype": dtypes})]


def _family_problem(family: str) -> Optional[str]:
    """Why no record could be of ``family`` (None when one could): a check of a misspelt family
    loaded and then could not be verified against any run."""
    if family in registry.FAMILIES or family in IMPORTED_FAMILIES:
        return None
    return (f"no family {family!r}; the families: {', '.join(sorted(registry.FAMILIES))}, "
            f"and an import's {', '.join(IMPORTED_FAMILIES)}")


def _semantic_problems(check: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, message) for what the schema cannot say about one check."""
    problems = []
    dtypes = check.get("dtypes")
    if "case" in check:
        family, params = case_parts(check["case"])
        _, slash, body = check["case"].partition("/")
        problem = None
        if not family or not slash or any("=" not in item for item in body.split(",") if item):
            problem = f"{check['case']!r} is not a case ID (family/key=value,...)"
        elif _family_problem(family):
            problem = _family_problem(family)
        elif family in registry.FAMILIES:  # a family's own declaration refuses a typo in a key or value
            try:
                registry.parse(check["case"])
            except CaseIdError as exc:
                problem = str(exc)
        if problem:
            problems.append(("case", problem))
        elif dtypes and "dtype" in params and params["dtype"] not in dtypes:
            problems.append(("dtypes", f"the case is in {params['dtype']}, which dtypes {dtypes} leaves out; "
                                       "list the case's own data type too"))
    else:
        family = check["family"]
        if _family_problem(family):
            return [("family", _family_problem(family))]
        if dtypes and "dtype" in check.get("select", {}):
            problems.append(("dtypes", "give the data types once: in dtypes, or in select.dtype, not both"))
        problems += _select_problems(family, check)
    if dtypes:
        problems += _dtype_problems(family, dtypes)
    stat = check["statistic"]
    if statistic_fault(stat):
        problems.append(("statistic", statistic_fault(stat)))
    elif family in registry.FAMILIES and not is_sample_statistic(stat) and declared(family, stat) is None:
        names = ", ".join(f.name for f in registry.get(family).figures)
        problems.append(("statistic", f"family {family!r} declares no figure {stat!r}; it declares {names}, "
                                      "and every record gives pNN_us, mean_us, max_ms ..."))
    return problems


def _explain(error) -> Optional[str]:
    """What jsonschema says of an entry that matches none or both of its alternatives ("is valid
    under each of {'required': ['min']}, ..."), in words naming the entry; None for other errors."""
    entry, where = error.instance, list(error.absolute_path)
    if error.validator not in ("oneOf", "anyOf") or not isinstance(entry, dict) or len(where) != 2:
        return None
    what = f"{where[0].rstrip('s')} {entry['name']!r}" if isinstance(entry.get("name"), str) else "this entry"
    if error.validator_value == _BOUND["oneOf"]:
        given = "both min and max" if "min" in entry and "max" in entry else "neither min nor max"
        return (f"{what} gives {given}: give one bound, max (the figure may be at most) or min (at least); "
                "a range is two entries")
    return f"{what} names neither a case nor a family: give case: (one case ID) or family: (with select:)"


def _refuse_names_given_twice(path: Path, root, data: dict) -> None:
    """A check's (or fact's) name is how its verdict is told apart from the others': two of one
    name would read as one verdict given twice."""
    for section in ("facts", "checks"):
        first: dict[str, int] = {}
        for i, entry in enumerate(data.get(section, ())):
            if entry["name"] in first:
                where = [section, i, "name"]
                raise ProfileError(f"{path}:{line_of_field(root, where)}: field {section}.{i}.name: {entry['name']!r} "
                                   f"is the name of {section}.{first[entry['name']]} too: give each its own name")
            first[entry["name"]] = i


def load_profile(path: Path, measuring: bool = False) -> dict:
    """The profile at ``path``, every check held to what a record could be. ``measuring``: the
    profile's own run will give the records (``accept`` without ``--run``), so a check no case of
    ``run.cases`` could satisfy is refused here, before anything is measured."""
    path = Path(path)
    try:
        data, root = yamlfile.load(path)
    except yamlfile.YamlFileError as exc:
        raise ProfileError(str(exc)) from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}:1: a profile must be a mapping")
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(data))
    if error is not None:
        refuse_unknown_key(path, root, error, ProfileError)
        where = list(error.absolute_path)
        field = ".".join(str(p) for p in where) or "(profile)"
        raise ProfileError(f"{path}:{line_of_field(root, where)}: field {field}: {_explain(error) or statistic_type_fault(root, error) or error.message}")
    _refuse_names_given_twice(path, root, data)
    for section in ("facts", "checks"):
        for i, entry in enumerate(data.get(section, ())):
            for key in ("max", "min"):
                if key in entry and not math.isfinite(entry[key]):
                    where = [section, i, key]
                    raise ProfileError(f"{path}:{line_of_field(root, where)}: field {section}.{i}.{key}: "
                                       f"{entry[key]} is not a threshold: a bound must be a finite number")
    for i, check in enumerate(data["checks"]):
        for key, message in _semantic_problems(check):
            where = ["checks", i, *(int(p) if p.isdigit() else p for p in key.split("."))]
            raise ProfileError(f"{path}:{line_of_field(root, where)}: field checks.{i}.{key}: {message}")
    _check_run_world(path, root, data)
    _spell_cases_canonically(data)
    problems = unreachable(data)
    if measuring:
        problems += unmeasured(data, _planned(path, root, data))
    if problems:
        i, (at, message) = min(problems, key=lambda problem: problem[0])  # the first check's, in file order
        where = ["checks", i, *at]
        raise ProfileError(f"{path}:{line_of_field(root, where)}: field {'.'.join(map(str, where))}: {message}")
    return data


def _spell_cases_canonically(data: dict) -> None:
    """Each case a check or run.cases names, in the one spelling runs give it (a key at its default
    left out or written, as its family declares), so that a check naming its case in another valid
    spelling means that case; a case ID of no family of this checkout is left as written."""
    for check in data["checks"]:
        if "case" in check:
            check["case"] = registry.canonical_id(check["case"])
    if data.get("run"):
        data["run"]["cases"] = [registry.canonical_id(case_id) for case_id in data["run"]["cases"]]


def _planned(path: Path, root, data: Mapping[str, Any]) -> list:
    """The cases the profile's run measures, or why it runs none."""
    if not data.get("run"):
        raise ProfileError(f"{path}:1: field run: profile {data['name']!r} has no run.cases, so accept has "
                           "nothing to measure; give run.cases, or judge a stored run with --run RUN_DIR")
    try:
        return planned_cases(data)
    except UsageError as exc:
        raise ProfileError(f"{path}:{line_of_field(root, ['run', 'cases'])}: field run.cases: {exc}") from None


def _check_run_world(path: Path, root, data: Mapping[str, Any]) -> None:
    """The cases a profile runs are on its world: a run of named cases is on the widest of them (its
    fingerprint's world, which the profile pins), so a profile of another world could never pass, and
    the run.json it left would contradict its records (harness.core.runheld)."""
    worlds = []
    for i, case_id in enumerate((data.get("run") or {}).get("cases", ())):
        try:
            worlds.append(registry.parse(case_id).world)
        except (CaseIdError, KeyError) as exc:
            where = ["run", "cases", i]
            raise ProfileError(f"{path}:{line_of_field(root, where)}: field run.cases.{i}: "
                               f"{exc.args[0] if exc.args else exc}") from None
    if worlds and max(worlds) != data["world"]:
        raise ProfileError(f"{path}:{line_of_field(root, ['world'])}: field world: {data['world']}, but the widest "
                           f"case of run.cases is world {max(worlds)}; a run of named cases is on the widest")


