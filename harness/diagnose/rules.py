"""Diagnosis rule files: which figures are judged, against what, and what a violation means.

The format follows SuperBench's rule files for ``sb result diagnosis`` (docs/user-tutorial/
data-diagnosis.md in microsoft/superbenchmark): named rules, each with a ``function``, a
``criteria``, ``categories`` and ``metrics`` regexes, ``store`` for a rule that only feeds a
``multi_rules`` rule. Two differences: the baseline is the fleet's own median (no baseline file),
and a criteria is a comparison such as ``"< -0.10"``, never Python code (SuperBench evaluates a
``lambda`` from the file).

```yaml
schema: critpath.diagnose/1
rules:
  busbw_low:
    function: variance        # (value - fleet median) / fleet median
    criteria: "< -0.10"       # busbw below 0.9 x the fleet median
    verdict: suspect
    categories: bandwidth
    metrics: ['.*/busbw_gbps']   # FAMILY/FIGURE, a full-match regex
```

Functions: ``variance`` and ``ratio`` (value / fleet median) compare with the fleet, ``value``
with the criteria itself, ``failure_check`` flags failed, timed-out or wrong records and runs cut
short (its ``metrics`` match case IDs), ``multi_rules`` flags what at least ``at_least`` of the
listed ``rules`` flagged. critpath's own additions: ``min_fleet`` (subjects a median needs,
default 3) and ``min_cases`` (cases, such as the sizes of a sweep, that must all flag a subject
before it counts; default 1).
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

try:
    from re import _parser as _sre_parse  # Python 3.11 and later
except ImportError:  # 3.10
    import sre_parse as _sre_parse

from harness.claims.baselines import line_of_field, load_checked
from harness.core.echo import shown
from harness.core.numbers import NumberError, parse_float
from harness.core.scale import MAX_RUN_CASES, MAX_WORLD
from harness.core.schema import strict_validator

SCHEMA_ID = "critpath.diagnose/1"
FUNCTIONS = ("variance", "ratio", "value", "failure_check", "multi_rules")
RELATIVE = ("variance", "ratio")  # judged against the fleet median
VERDICTS = ("suspect", "failed")
OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
# An operator and a word; the word is a number by harness.core.numbers (parse_float), which names
# what is wrong with it ('-1e400' is not finite, '٣' not ASCII). Spaces and tabs are spelt out, not
# \s: the schema's pattern is matched without re.ASCII, and both must read the same text alike.
CRITERIA = re.compile(r"^[ \t]*(<=|>=|<|>)[ \t]*([^ \t<>=]+)[ \t]*$", re.ASCII)
# The settings only some functions have, for the message that refuses one elsewhere.
SETTING_OF = {"criteria": "variance, ratio and value rules", "rules": "multi_rules rules",
              "at_least": "multi_rules rules", "metrics": "rules other than multi_rules",
              "min_cases": "variance, ratio and value rules"}
# The longest text a metrics regex is matched against: four times the longest case ID of the
# registry's grids (253 characters); with nested quantifiers refused, matching stays short.
MAX_MATCHED_CHARS = 1024
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}
# A relative rule needs this many subjects to have a median worth comparing with (default).
MIN_FLEET = 3
# The most a count may ask for: a fleet has at most MAX_WORLD ranks (so as many nodes), and a run
# at most MAX_RUN_CASES cases. A rule asking for more is never judged, so it is refused, not kept
# silently idle.
MAX_COUNT = {"min_fleet": (MAX_WORLD, f"subjects than a fleet has (MAX_WORLD = {MAX_WORLD} ranks)"),
             "min_cases": (MAX_RUN_CASES, f"cases than a run holds (MAX_RUN_CASES = {MAX_RUN_CASES})")}

_ABSENT = {"not": {}}  # a setting this function does not have (False would lose the field's path in jsonschema 4)
_RULE_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "required": ["function", "categories"],
    "properties": {
        "function": {"enum": list(FUNCTIONS)},
        "criteria": {"type": "string", "pattern": CRITERIA.pattern},
        "verdict": {"enum": list(VERDICTS)},
        "store": {"type": "boolean"},
        "categories": {"type": "string", "minLength": 1},
        "metrics": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "rules": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "at_least": {"type": "integer", "minimum": 1},
        "min_fleet": {"type": "integer", "minimum": 2, "maximum": MAX_COUNT["min_fleet"][0]},
        "min_cases": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT["min_cases"][0]},
        "description": {"type": "string"},
    },
    "allOf": [
        {"if": {"properties": {"function": {"enum": ["variance", "ratio", "value"]}}},
         "then": {"required": ["criteria", "metrics"], "properties": {"rules": _ABSENT, "at_least": _ABSENT}}},
        {"if": {"properties": {"function": {"const": "multi_rules"}}},
         "then": {"required": ["rules", "at_least"], "properties": {"metrics": _ABSENT, "criteria": _ABSENT,
                                                                        "min_cases": _ABSENT}}},
        {"if": {"properties": {"function": {"const": "failure_check"}}},
         "then": {"properties": {"criteria": _ABSENT, "rules": _ABSENT, "at_least": _ABSENT,
                                 "min_cases": _ABSENT}}},
        {"if": {"not": {"properties": {"store": {"const": True}}, "required": ["store"]}},
         "then": {"required": ["verdict"]}},
    ],
}
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object", "additionalProperties": False,
    "required": ["schema", "rules"],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "description": {"type": "string"},
        "rules": {"type": "object", "minProperties": 1,
                  "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_.-]*$"},
                  "additionalProperties": _RULE_SCHEMA},
    },
}
_VALIDATOR = strict_validator(SCHEMA)


class RuleFileError(ValueError):
    """A rule file that cannot be used; the message starts with ``file:line:`` and names the field."""


@dataclass(frozen=True)
class Criteria:
    op: str
    threshold: float

    def holds(self, value: float) -> bool:
        return OPERATORS[self.op](value, self.threshold)

    def __str__(self) -> str:
        return f"{self.op} {self.threshold:g}"


@dataclass(frozen=True)
class Rule:
    name: str
    function: str
    categories: str
    source: str  # file:line of the rule, printed with every finding
    verdict: Optional[str] = None  # None only for a stored rule
    criteria: Optional[Criteria] = None
    metrics: tuple[re.Pattern, ...] = ()
    store: bool = False
    rules: tuple[str, ...] = ()  # multi_rules: the rules counted
    at_least: int = 0
    min_fleet: int = MIN_FLEET
    # A subject is flagged only when this many cases (the sizes of a sweep) flag it: a fault shows
    # in every size; a scheduler's stall on a shared machine hits one case.
    min_cases: int = 1

    def matches(self, name: str) -> bool:
        """``name`` is FAMILY/FIGURE (a case ID, for failure_check); full match, as SuperBench's.
        A name longer than MAX_MATCHED_CHARS is none of critpath's and matches nothing."""
        return len(name) <= MAX_MATCHED_CHARS and any(p.fullmatch(name) for p in self.metrics)

    def describe(self, median_word: str = "fleet median") -> str:
        what = {"variance": f"(value - {median_word}) / {median_word}", "ratio": f"value / {median_word}",
                "value": "value"}.get(self.function, self.function)
        return f"{what} {self.criteria}" if self.criteria else what


# The shape a metrics regex may have, chosen so that matching a name of MAX_MATCHED_CHARS cannot
# backtrack for long: a quantifier that can match many times (*, +, {m,n}) applies to one character
# only (a letter, ., [...]), at most MAX_FREE_REPEATS of them in a pattern, and the alternatives of
# its groups and ?s multiply to at most MAX_ALTERNATIVES. Backtracking then tries at most
# MAX_ALTERNATIVES x C(n + 2, 2) splits of an n-character name (about 8 million for 1,024):
# well under a second, where (.|.|.|.)*Z or .*.*.*.*.*Z took minutes.
MAX_FREE_REPEATS = 2
MAX_ALTERNATIVES = 16
_ONE_CHARACTER = {"LITERAL", "NOT_LITERAL", "ANY", "IN", "CATEGORY"}


def _one_character(items) -> bool:
    while len(items) == 1 and str(items[0][0]) == "SUBPATTERN":
        items = items[0][1][-1]
    return len(items) == 1 and str(items[0][0]) in _ONE_CHARACTER


def _shape(items) -> tuple[int, int, Optional[str]]:
    """(free repeats, alternatives, why refused or None) of the parsed regex ``items``."""
    free, ways = 0, 1
    for op, av in items:
        kind = str(op)
        parts: list = []
        if kind in _REPEATS:
            low, high, body = av
            if high <= 1:  # x? is x or nothing: two alternatives
                parts, factor = [body], 2 if low == 0 else 1
            elif high == low and _one_character(body):
                continue  # a{3}: one way to match
            elif not _one_character(body):
                return free, ways, "repeats a group (like (a|b)* or (a+)+), which can take exponential time to " \
                                   "match; a quantifier may follow one character only (a letter, ., [...])"
            else:
                free, factor = free + 1, 1
        elif kind == "SUBPATTERN":
            parts, factor = [av[-1]], 1
        elif kind == "BRANCH":
            parts, factor = list(av[1]), 0
        elif kind in ("ASSERT", "ASSERT_NOT"):
            parts, factor = [av[1]], 1
        elif kind == "ATOMIC_GROUP":
            parts, factor = [av], 1
        elif kind == "GROUPREF_EXISTS":
            parts, factor = [b for b in av[1:] if b is not None], 0
        else:
            continue
        inner_ways = 0 if factor == 0 else 1
        for part in parts:
            part_free, part_ways, why = _shape(part)
            if why:
                return free, ways, why
            free += part_free
            inner_ways = inner_ways + part_ways if factor == 0 else inner_ways * part_ways
        ways *= inner_ways * (factor or 1)
        if free > MAX_FREE_REPEATS or ways > MAX_ALTERNATIVES:
            break
    if free > MAX_FREE_REPEATS:
        return free, ways, f"has more than MAX_FREE_REPEATS = {MAX_FREE_REPEATS} quantifiers that match many " \
                           "times (*, +, {m,n}), which can take polynomial time to match; .*x.*y is one .* too many"
    if ways > MAX_ALTERNATIVES:
        return free, ways, f"has more than MAX_ALTERNATIVES = {MAX_ALTERNATIVES} ways through its groups " \
                           "(| and ?), which multiply when a match backtracks"
    return free, ways, None


def _metric_pattern(text: str) -> re.Pattern:
    """``text`` compiled, or ValueError: not a regex, or not of the shape that bounds its matching."""
    try:
        pattern = re.compile(text, re.ASCII)  # \d is 0-9 and \w [A-Za-z0-9_], as in a case ID
        parsed = _sre_parse.parse(text, re.ASCII)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise ValueError(f"{shown(text)} is not a regex: {exc}") from None
    why = _shape(parsed)[2]
    if why:
        raise ValueError(f"{shown(text)} {why}")
    return pattern


def load(path: Path) -> list[Rule]:
    """The rules of ``path`` in file order, or RuleFileError naming file, line and field."""
    def explain(error) -> Optional[str]:
        key = list(error.absolute_path)[-1:]
        if error.validator == "pattern" and key == ["criteria"]:
            return f"{error.instance!r} is not a comparison like \"< 0.9\" or \">= 2\""
        if error.validator == "maximum" and key and key[0] in MAX_COUNT:
            return f"{error.instance} asks for more {MAX_COUNT[key[0]][1]}: the rule would never be judged"
        if error.validator == "not" and key and key[0] in SETTING_OF:  # a setting the rule's function has not
            return f"a setting of {SETTING_OF[key[0]]} only"
        return None

    path = Path(path)
    data, root = load_checked(path, _VALIDATOR, RuleFileError,
                              f"a rule file must be a mapping with schema: {SCHEMA_ID} and rules", explain)
    rules: list[Rule] = []
    for name, raw in data["rules"].items():
        line = line_of_field(root, ["rules", name])
        patterns = []
        for i, text in enumerate(raw.get("metrics", ())):
            try:
                patterns.append(_metric_pattern(text))
            except ValueError as exc:
                at = line_of_field(root, ["rules", name, "metrics", i])
                raise RuleFileError(f"{path}:{at}: field rules.{name}.metrics.{i}: {exc}") from None
        if raw["function"] == "failure_check" and not patterns:
            patterns = [re.compile(".*")]  # every case
        for other in raw.get("rules", ()):
            if other not in {r.name for r in rules}:
                at = line_of_field(root, ["rules", name, "rules"])
                raise RuleFileError(f"{path}:{at}: field rules.{name}.rules: {other!r} is not a rule defined above it")
        if raw.get("at_least", 0) > len(raw.get("rules", ())) and raw["function"] == "multi_rules":
            at = line_of_field(root, ["rules", name, "at_least"])
            raise RuleFileError(f"{path}:{at}: field rules.{name}.at_least: {raw['at_least']} but only "
                                f"{len(raw['rules'])} rules are listed")
        criteria = None
        if "criteria" in raw:
            op, number = CRITERIA.match(raw["criteria"]).groups()
            at = line_of_field(root, ["rules", name, "criteria"])
            try:
                criteria = Criteria(op, parse_float(number, f"{path}:{at}: field rules.{name}.criteria"))
            except NumberError as exc:
                raise RuleFileError(str(exc)) from None
        rules.append(Rule(name=name, function=raw["function"], categories=raw["categories"],
                          source=f"{path.name}:{line}", verdict=raw.get("verdict"), criteria=criteria,
                          metrics=tuple(patterns), store=raw.get("store", False), rules=tuple(raw.get("rules", ())),
                          at_least=raw.get("at_least", 0), min_fleet=raw.get("min_fleet", MIN_FLEET),
                          min_cases=raw.get("min_cases", 1)))
    return rules
