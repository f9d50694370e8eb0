"""Baselines: the figures the source articles report, as validated data (``baselines/*.yaml``).

Each file holds one article's claims. A claim is a reference point from someone else's cluster;
its ``measure`` block says how critpath measures the comparable quantity here (a family, the
parameters of the records to use and a statistic), or why nothing can (``not_measurable``).

A malformed file is reported with its file, line and field: the YAML is composed into nodes
(which keep their line numbers) and the JSON Schema error's path is walked down those nodes.
"""
from __future__ import annotations

import difflib
import json
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import jsonschema
import yaml

from harness.core import registry, yamlfile
from harness.core.case import CaseIdError
from harness.core.echo import shown
from harness.core.numbers import NumberError, check_float, check_int
from harness.core.figures import STATISTIC_TEXT, statistic_fault
from harness.core.options import path_option, print_error
from harness.core.schema import strict_validator
from harness.core.scale import MAX_WORLD
from harness.run.fingerprint import PROJECT_ROOT

SCHEMA_ID = "critpath.baselines/1"
DEFAULT_DIR = PROJECT_ROOT / "baselines"

Selector = Mapping[str, Union[int, float, str, list]]


class BaselineError(ValueError):
    """A baselines file that does not load; the message names file, line and field."""


def _schema() -> dict:
    return json.loads(resources.files("harness").joinpath("schemas/baselines-1.json").read_text())


_SCHEMA = _schema()
_VALIDATOR = strict_validator(_SCHEMA)
# The parameters a record must have: a claim's select and an acceptance check's select alike.
SELECTOR_SCHEMA = _SCHEMA["$defs"]["selector"]


def _near(word: str, known) -> str:
    near = difflib.get_close_matches(word, [str(k) for k in known], n=1)
    return f"; did you mean {near[0]!r}?" if near else ""


def selector_faults(family_name: str, selector: Selector) -> list[tuple[list, str]]:
    """(the field under the selector, why) for each part of ``selector`` that no record of the family
    can have, by the family's own Param declarations: a key it does not declare, a value of another
    type or outside the key's choices and bounds, a value a list gives twice. Such a selector matches
    nothing, so a claim or check would say "no record matches" of every run, never what was misspelt.
    A claim's select and an acceptance check's alike; nothing for a family not in the registry."""
    if family_name not in registry.FAMILIES:
        return []
    declared = registry.get(family_name).declared
    faults: list[tuple[list, str]] = []
    for key, want in selector.items():
        if key not in declared:
            faults.append(([key], f"family {family_name!r} has no parameter {key!r}; its parameters: "
                                  f"{', '.join(declared)}{_near(key, declared)}"))
            continue
        if want is None:
            continue  # the record must not have the key
        param, values = declared[key], want if isinstance(want, list) else [want]
        for index, value in enumerate(values):
            at = [key, index] if isinstance(want, list) else [key]
            if value in values[:index]:
                faults.append((at, f"{shown(value)} is given twice in the list of {key}"))
            elif not isinstance(value, param.type) and not (param.type is float and isinstance(value, int)):
                faults.append((at, f"{shown(value)} is not {param.type.__name__}: {family_name}.{key} is declared "
                                   f"{param.type.__name__}"))
            elif not param.admits(value):
                hint = _near(str(value), param.choices) if param.choices else ""
                faults.append((at, f"{shown(value)} is no value of {family_name}.{key}, which is "
                                   f"{param.allowed()}{hint}"))
    return faults


@dataclass(frozen=True)
class Tolerance:
    """How far the measured magnitude may be from the article's and still confirm it: within a
    factor either way, for the reason given (loopback vs a network, another CPU ...)."""

    factor: float
    why: str


@dataclass(frozen=True)
class Measure:
    status: str  # available | pending | not_measurable
    family: Optional[str] = None
    case: Optional[str] = None
    select: Selector = field(default_factory=dict)
    before: Optional[Selector] = None
    after: Optional[Selector] = None
    statistic: Optional[str] = None
    compare: Optional[str] = None  # bound | change | range
    min_world: int = 1
    expect: Optional[str] = None  # lower | higher: a change the article states without figures
    ignore: tuple[str, ...] = ()  # change: parameters that do not take part in pairing
    over: str = "worst"  # bound: worst (must hold for every matching case) or best (shown by at least one)
    # change: what is held against the article's figure: the after/before ratio, the difference
    # before - after (a stall, a handshake, in the statistic's unit), or one side's own figure.
    magnitude: str = "ratio"
    # the records the claim speaks of ("every TCP_NODELAY ping-pong case"): a test holds the
    # selection to cover every case of a default run that matches this rule.
    covers: Optional[Selector] = None
    tolerance: Optional[Tolerance] = None
    reason: str = ""
    note: str = ""


@dataclass(frozen=True)
class Article:
    """The source article a file's claims come from: a third-party article, cited by its title in
    the original and in English, with what it measured on what hardware, as it says."""

    file: str
    short: str  # the name the claims table cites it by
    title: str  # in the original language, as written
    title_en: str
    measured_on: str
    attribution: str
    title_note: str = ""  # where the title comes from when the original has none


@dataclass(frozen=True)
class Claim:
    id: str
    figure: str
    metric: str
    unit: str
    direction: str  # lower | higher | none
    hardware: str
    section: str  # the article's heading, in its original language
    article_file: str
    measure: Measure
    section_en: str = ""  # the heading in English: what a report shows, readable with any font
    article: Optional[Article] = None
    value: Optional[float] = None
    relation: str = "="
    before: Optional[float] = None
    after: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    context: str = ""
    model_dependent: bool = False
    source: str = ""  # baselines file:line, for messages

    @property
    def article_figure(self) -> str:
        """The article's figure in one short string, with its unit."""
        if self.before is not None:
            return f"{_num(self.before)} -> {_num(self.after)} {self.unit}"
        if self.low is not None:
            return f"{_num(self.low)}-{_num(self.high)} {self.unit}"
        rel = "" if self.relation in ("=",) else f"{self.relation} "
        return f"{rel}{_num(self.value)} {self.unit}"


def _num(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:g}"


# The line of a field, shared with every reader that names file:line:field.
_node_at, line_of_field = yamlfile.node_at, yamlfile.line_of


def statistic_type_fault(root: yaml.Node, error) -> Optional[str]:
    """A schema's type error on a ``statistic`` field worded as every reader of a statistic words
    it (``yamlfile.string_fault``: the value as the file writes it, true, not True); None otherwise."""
    where = list(error.absolute_path)
    if error.validator != "type" or not where or where[-1] != "statistic":
        return None
    return yamlfile.string_fault(root, where, error.instance, STATISTIC_TEXT)


def refuse_unknown_key(path: Path, root: yaml.Node, error, raise_as: type) -> None:
    """A schema's ``additionalProperties`` error worded as every critpath reader words an unknown
    key (``yamlfile.refuse_unknown``: its line, the keys known, the nearest); nothing otherwise."""
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return
    try:
        yamlfile.refuse_unknown(path, root, list(error.absolute_path), error.instance, error.schema.get("properties", {}))
    except yamlfile.YamlFileError as exc:
        raise raise_as(str(exc)) from None


def load_checked(path: Path, validator, error: type, what: str,
                 explain: Optional[Callable[[Any], Optional[str]]] = None) -> tuple[dict, yaml.Node]:
    """The mapping in the YAML file ``path``, valid against the JSON Schema ``validator``, and its
    node tree (for the line of a field). Otherwise ``error("file:line: field F: why")``; ``what``
    says what the file must be, ``explain(schema_error)`` may word an error better than jsonschema."""
    path = Path(path)
    try:
        data, root = yamlfile.load(path)
    except yamlfile.YamlFileError as exc:
        raise error(str(exc)) from None
    if root is None or not isinstance(data, dict):
        raise error(f"{path}:1: {what}")
    found = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if found is not None:
        refuse_unknown_key(path, root, found, error)
        where = list(found.absolute_path)
        line = line_of_field(root, where)
        field_name = ".".join(str(p) for p in where) or "(file)"
        if found.validator == "required" and isinstance(found.instance, dict):
            missing = [k for k in found.validator_value if k not in found.instance]
            field_name = ".".join(str(p) for p in [*where, missing[0]]) if missing else field_name
        raise error(f"{path}:{line}: field {field_name}: {(explain and explain(found)) or statistic_type_fault(root, found) or found.message}")
    return data, root


def _explain(error) -> Optional[str]:
    """A CJK character in a field that must be English says so, not the character-class regex."""
    if error.validator == "pattern" and "\\u2e80" in str(error.validator_value):
        return f"{error.instance!r} must be English (no CJK characters): it is what renders with any font"
    return None


def articles(claims: Sequence[Claim]) -> list[Article]:
    """The articles these claims cite, each once, in the claims' order."""
    seen: dict[str, Article] = {}
    for claim in claims:
        if claim.article is not None:
            seen.setdefault(claim.article.file, claim.article)
    return list(seen.values())


def _check_numbers(path: Path, root: yaml.Node, data: dict) -> None:
    """Every number in a baselines file finite (YAML reads .nan and .inf as numbers, which the
    schema's 'number' admits: a claim of inf confirms nothing), and min_world a count of ranks
    (the schema's 'integer' admits 2.0); BaselineError naming the file and field otherwise."""
    def walk(value: Any, where: list) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, [*where, key])
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, [*where, index])
        elif isinstance(value, float):
            check_float(value, yamlfile.field_at(path, root, where))

    try:
        walk(data, [])
        for index, claim in enumerate(data["claims"]):
            if "min_world" in claim["measure"]:
                where = ["claims", index, "measure", "min_world"]
                check_int(claim["measure"]["min_world"], yamlfile.field_at(path, root, where), 1, MAX_WORLD)
    except NumberError as exc:
        raise BaselineError(str(exc)) from None


def _mapping_faults(measure: Mapping[str, Any]) -> list[tuple[list, str]]:
    """(the field under the measure, why) for what a mapping names that the registry lacks.

    ``available`` means the family exists and every selector key is one of its declared parameters,
    each value one it admits; a ``case`` must parse against the registry. A ``pending`` mapping whose
    family is in the registry is held to the same check (a misspelt key would never match); one
    whose family is not there yet is reported by the claims check as pending."""
    if measure["status"] == "not_measurable":
        return []
    faults: list[tuple[list, str]] = []
    if isinstance(measure.get("statistic"), str) and (fault := statistic_fault(measure["statistic"])):
        faults.append((["statistic"], f"statistic {fault}"))
    if measure.get("case") is not None:
        try:
            registry.parse(measure["case"])
        except (CaseIdError, KeyError) as exc:
            faults.append((["case"], str(exc)))
    family = measure.get("family") or ""
    if family not in registry.FAMILIES:
        if measure["status"] != "pending":
            faults.append((["family"], f"family {family!r} is not in the registry (mark the claim pending)"))
        return faults
    for section in ("select", "before", "after", "covers"):
        faults += [([section, *at], why) for at, why in selector_faults(family, measure.get(section) or {})]
    declared = registry.get(family).declared
    faults += [(["ignore", i], f"family {family!r} has no parameter {key!r}{_near(key, declared)}")
               for i, key in enumerate(measure.get("ignore", ())) if key not in declared]
    return faults


def _check_mappings(path: Path, root: yaml.Node, data: dict) -> None:
    """BaselineError naming the file, line and field of the first mapping the registry cannot meet."""
    for index, claim in enumerate(data["claims"]):
        for at, why in _mapping_faults(claim["measure"])[:1]:
            raise BaselineError(f"{yamlfile.field_at(path, root, ['claims', index, 'measure', *at])}: "
                                f"claim {claim['id']}: {why}")


def load_file(path: Path) -> list[Claim]:
    """The claims of one baselines file, each valid and each mapping one the registry can meet;
    BaselineError naming file, line and field otherwise. Every reader of baselines loads them so."""
    path = Path(path)
    data, root = load_checked(path, _VALIDATOR, BaselineError,
                              "a baselines file must be a mapping with schema, article and claims", _explain)
    _check_numbers(path, root, data)
    _check_mappings(path, root, data)
    article = Article(**data["article"])
    claims = []
    for index, raw in enumerate(data["claims"]):
        line = _node_at(root, ["claims", index]).start_mark.line + 1
        m = raw["measure"]
        claims.append(
            Claim(
                id=raw["id"], figure=raw["figure"], metric=raw["metric"], unit=raw["unit"],
                direction=raw["direction"], hardware=raw["hardware"], section=raw["section"],
                section_en=raw["section_en"], article_file=article.file, article=article,
                measure=Measure(
                    status=m["status"], family=m.get("family"), case=m.get("case"),
                    select=m.get("select", {}), before=m.get("before"), after=m.get("after"),
                    statistic=m.get("statistic"), compare=m.get("compare"), min_world=m.get("min_world", 1), expect=m.get("expect"), over=m.get("over", "worst"), ignore=tuple(m.get("ignore", ())),
                    magnitude=m.get("magnitude", "ratio"), covers=m.get("covers"),
                    tolerance=Tolerance(**m["tolerance"]) if "tolerance" in m else None,
                    reason=m.get("reason", ""), note=m.get("note", ""),
                ),
                value=raw.get("value"), relation=raw.get("relation", "="), before=raw.get("before"),
                after=raw.get("after"), low=raw.get("low"), high=raw.get("high"),
                context=raw.get("context", ""), model_dependent=raw.get("model_dependent", False),
                source=f"{path.name}:{line}",
            )
        )
    return claims


def load_dir(directory: Path = DEFAULT_DIR) -> list[Claim]:
    """Every claim in ``directory/*.yaml``, in file order; an ID given twice is an error."""
    directory = Path(directory)
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise BaselineError(f"{directory}: no baselines files (*.yaml)")
    claims: list[Claim] = []
    seen: dict[str, str] = {}
    for path in files:
        for claim in load_file(path):
            if claim.id in seen:
                raise BaselineError(f"{claim.source}: claim {claim.id} is already defined at {seen[claim.id]}")
            seen[claim.id] = claim.source
            claims.append(claim)
    return claims


def register(sub) -> None:
    p = sub.add_parser("baselines", help="validate baselines YAML and list the claims with how each is measured")
    p.add_argument("--dir", type=path_option, default=DEFAULT_DIR,
                   help="directory of baselines YAML (default: baselines/)")
    p.set_defaults(func=cmd_baselines)


def cmd_baselines(args) -> int:
    try:
        claims = load_dir(args.dir)
    except BaselineError as exc:
        print_error("baselines", exc)
        return 2
    article = None
    for claim in claims:
        if claim.article is not article:
            article = claim.article
            print(f"{article.short}: {article.title_en} ({article.file}; {article.attribution})")
        m = claim.measure
        how = m.reason if m.status == "not_measurable" else f"{m.family} {m.compare} on {m.statistic}"
        print(f"  {claim.id:22} {m.status:15} {claim.article_figure:28} {how} [{claim.section_en}]")
    counts = Counter(c.measure.status for c in claims)
    print(f"{len(claims)} claims: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return 0
