"""Gate configuration and baseline tables, from YAML (``harness.core.yamlfile``: safe, no duplicate
keys, no aliases); errors name the file and the field.

Gate config (``--config``)::

    alpha: 0.01            # family-wise false-alarm rate across the cases of one run (Holm)
    confidence: 0.95       # of the repeated confidence interval on the ratio
    statistic: mean_ns     # per-round statistic (see harness.gate.values)
    min_effect:            # relative; a case's own entry wins over its family's, then default
      default: 0.05
      families: {allreduce: 0.05, selftest: 0.10}
      cases: {"selftest/fault_rank=0,mode=noop,world=1": 0.20}

Baseline table (``critpath gate --against FILE``), a minimal shape until the baselines format
settles; every entry compares the candidate's repeats against a fixed value::

    baselines:
      - case_id: "selftest/fault_rank=0,mode=spin,spin_iters=1000,world=1"
        statistic: p50_ns
        value: 30000          # in the statistic's unit
        direction: lower      # optional; else as the family declares the figure (p50_ns: lower)
        min_effect: 0.10      # optional; else the config's
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional

from harness.core import registry, yamlfile
from harness.core.case import CaseIdError
from harness.core.figures import STATISTIC_TEXT, FigureUnavailable, sample_parts
from harness.core.numbers import NumberError, check_float, check_int
from harness.gate.stats import DIRECTIONS, MIN_CONFIDENCE, MIN_N_RESAMPLES, Policy
from harness.gate.values import default_direction, validate_statistic


class ConfigError(ValueError):
    """A config or baseline file that cannot be used; the message names file and field."""


@dataclass(frozen=True)
class GateConfig:
    policy: Policy = Policy()
    # The mean sees every iteration: a slowdown of one iteration in ten moves it, which the
    # median and the minimum never see (docs/gate.md has the measured case).
    statistic: str = "mean_ns"
    family_min_effect: Mapping[str, float] = field(default_factory=dict)
    case_min_effect: Mapping[str, float] = field(default_factory=dict)
    direction_override: Optional[str] = None  # --direction: every case's; None: as its family declares

    def min_effect(self, case_id: str) -> float:
        case_id = _canonical(case_id)  # keys are canonical (load_config); so must the lookup be
        if case_id in self.case_min_effect:
            return self.case_min_effect[case_id]
        family = case_id.partition("/")[0]
        return self.family_min_effect.get(family, self.policy.min_effect)

    def direction(self, case_id: str) -> str:
        """Which way is better for the statistic of ``case_id``; FigureUnavailable where its family
        declares none and no direction was given."""
        return self.direction_override or default_direction(case_id, self.statistic)

    def overridden(self, alpha: Optional[float] = None, min_effect: Optional[float] = None,
                   statistic: Optional[str] = None, direction: Optional[str] = None) -> "GateConfig":
        """This config under what the command line sets (None: as the file, or the default, has it)."""
        policy = self.policy
        if alpha is not None:
            policy = replace(policy, alpha=alpha)
        if min_effect is not None:
            policy = replace(policy, min_effect=min_effect)
        return replace(self, policy=policy, statistic=statistic or self.statistic,
                       direction_override=direction or self.direction_override)


@dataclass(frozen=True)
class Baseline:
    case_id: str
    statistic: str
    value: float
    direction: str = "lower"
    min_effect: Optional[float] = None


def _load_yaml(path: Path) -> tuple[Any, Any]:
    try:
        return yamlfile.load(path)
    except yamlfile.YamlFileError as exc:
        raise ConfigError(str(exc)) from None


def _refuse_unknown(path: Path, root, where: list, given, known, what: str = "key") -> None:
    try:
        yamlfile.refuse_unknown(path, root, where, given, known, what)
    except yamlfile.YamlFileError as exc:
        raise ConfigError(str(exc)) from None


def _number(path: Path, root, where: list, value: Any, low: Optional[float] = None,
            high: Optional[float] = None) -> float:
    """``value`` as a finite float in [low, high]; ConfigError naming file:line:field otherwise."""
    try:
        return check_float(value, yamlfile.field_at(path, root, where), low, high)
    except NumberError as exc:
        raise ConfigError(str(exc)) from None


def _integer(path: Path, root, where: list, value: Any, low: int, high: int) -> int:
    """``value`` as an integer in [low, high] (100.9 is refused, not truncated); ConfigError
    naming file:line:field otherwise."""
    try:
        return check_int(value, yamlfile.field_at(path, root, where), low, high)
    except NumberError as exc:
        raise ConfigError(str(exc)) from None


def _mapping(path: Path, root, where: list, value: Any) -> Mapping:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}:{yamlfile.line_of(root, where)}: field {'.'.join(map(str, where)) or '(top level)'}: "
                          f"expected a mapping, got {type(value).__name__}")
    return value


def _case_problem(case_id: str) -> str:
    """Why ``case_id`` names no case of this checkout's families ('' when it does): a misspelt
    parameter would leave the case at its family's default."""
    if "/" not in case_id:
        return "not a case ID (family/key=value,...)"
    try:
        registry.parse(case_id)
    except (CaseIdError, KeyError) as exc:
        return str(exc).strip("'\"")
    return ""


_canonical = registry.canonical_id  # lookups and duplicate checks see one case however it is spelt


CONFIG_KEYS = ("alpha", "confidence", "statistic", "min_effect", "n_resamples")
MIN_EFFECT_KEYS = ("default", "families", "cases")
MAX_MIN_EFFECT = 5.0  # a 500 % change: beyond it a minimum effect is a typo, not a policy
# The family-wise false-alarm rate: above a half, a gate is a coin.
ALPHA_RANGE = (1e-6, 0.5)
# The bootstrap interval's confidence, short of 1 (where the interval has no bound).
CONFIDENCE_RANGE = (MIN_CONFIDENCE, 0.999)
# Bootstrap resamples: past a million, a gate takes minutes a case.
N_RESAMPLES_RANGE = (MIN_N_RESAMPLES, 1_000_000)
# A baseline value divides every figure measured against it (the ratio, and its log). 0 divides by
# zero, and a positive value as small as 1e-320 (subnormal) makes the ratio of any figure inf, read
# as "regressed +inf %". Within 1e-150 to 1e150 the ratio of a figure in the same range is at most
# 1e300 either way: a finite, normal float, whatever unit the statistic is in.
BASELINE_VALUE_RANGE = (1e-150, 1e150)


def load_config(path: Optional[Path], base: GateConfig = GateConfig()) -> GateConfig:
    if path is None:
        return base
    data, root = _load_yaml(path)
    data = _mapping(path, root, [], data)
    _refuse_unknown(path, root, [], data, CONFIG_KEYS)
    policy = base.policy
    if "alpha" in data:
        policy = replace(policy, alpha=_number(path, root, ["alpha"], data["alpha"], *ALPHA_RANGE))
    if "confidence" in data:
        policy = replace(policy, confidence=_number(path, root, ["confidence"], data["confidence"], *CONFIDENCE_RANGE))
    if "n_resamples" in data:
        policy = replace(policy, n_resamples=_integer(path, root, ["n_resamples"], data["n_resamples"], *N_RESAMPLES_RANGE))
    statistic = base.statistic
    if "statistic" in data:
        where = f"{path}:{yamlfile.line_of(root, ['statistic'])}: field statistic"
        if fault := yamlfile.string_fault(root, ["statistic"], data["statistic"], STATISTIC_TEXT):
            raise ConfigError(f"{where}: {fault}")
        try:
            statistic = validate_statistic(data["statistic"])
        except FigureUnavailable as exc:
            raise ConfigError(f"{where}: {exc}") from None
    families: dict[str, float] = dict(base.family_min_effect)
    cases: dict[str, float] = dict(base.case_min_effect)
    effects = data.get("min_effect")
    if effects is not None and not isinstance(effects, dict):
        effects = {"default": effects}
        where_default = ["min_effect"]
    else:
        where_default = ["min_effect", "default"]
    effects = _mapping(path, root, ["min_effect"], effects)
    _refuse_unknown(path, root, ["min_effect"], effects, MIN_EFFECT_KEYS)
    if "default" in effects:
        policy = replace(policy, min_effect=_number(path, root, where_default, effects["default"], 0.0, MAX_MIN_EFFECT))
    given = _mapping(path, root, ["min_effect", "families"], effects.get("families"))
    _refuse_unknown(path, root, ["min_effect", "families"], given, registry.FAMILY_MODULES, "family")
    for name, value in given.items():
        families[str(name)] = _number(path, root, ["min_effect", "families", name], value, 0.0, MAX_MIN_EFFECT)
    named_here: dict[str, str] = {}  # canonical ID -> the key this file spelt it as
    for case_id, value in _mapping(path, root, ["min_effect", "cases"], effects.get("cases")).items():
        where = ["min_effect", "cases", case_id]
        problem = _case_problem(str(case_id))
        if problem:
            raise ConfigError(f"{path}:{yamlfile.line_of(root, where)}: field min_effect.cases.{case_id}: {problem}")
        canonical = _canonical(str(case_id))
        if canonical in named_here:
            raise ConfigError(f"{path}:{yamlfile.line_of(root, where)}: field min_effect.cases.{case_id}: "
                              f"names the same case as {named_here[canonical]!r} ({canonical})")
        named_here[canonical] = str(case_id)
        cases[canonical] = _number(path, root, where, value, 0.0, MAX_MIN_EFFECT)
    return GateConfig(policy, statistic, families, cases)


BASELINE_KEYS = ("case_id", "statistic", "value", "direction", "min_effect")


def load_baselines(path: Path) -> list[Baseline]:
    data, root = _load_yaml(path)
    data = _mapping(path, root, [], data)
    _refuse_unknown(path, root, [], data, ("baselines",))
    entries = data.get("baselines")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}:{yamlfile.line_of(root, ['baselines'])}: field baselines: "
                          "expected a non-empty list of entries")
    out: list[Baseline] = []
    for i, entry in enumerate(entries):
        where = f"baselines[{i}]"

        def at(key=None):
            return f"{path}:{yamlfile.line_of(root, ['baselines', i] + ([key] if key else []))}: field {where}" \
                   + (f".{key}" if key else "")
        if not isinstance(entry, dict):
            raise ConfigError(f"{at()}: expected a mapping")
        _refuse_unknown(path, root, ["baselines", i], entry, BASELINE_KEYS)
        case_id = entry.get("case_id")
        if not isinstance(case_id, str) or "/" not in case_id:
            raise ConfigError(f"{at('case_id')}: expected a case ID, got {case_id!r}")
        problem = _case_problem(case_id)  # as min_effect.cases: refused here, not after the candidate runs
        if problem:
            raise ConfigError(f"{at('case_id')}: {problem}")
        case_id = _canonical(case_id)
        statistic = entry.get("statistic", "p50_ns")
        if fault := yamlfile.string_fault(root, ["baselines", i, "statistic"], statistic, STATISTIC_TEXT):
            raise ConfigError(f"{at('statistic')}: {fault}")
        try:
            statistic = validate_statistic(statistic)
        except FigureUnavailable as exc:
            raise ConfigError(f"{at('statistic')}: {exc}") from None
        if "value" not in entry:
            raise ConfigError(f"{at()}.value: missing")
        value = _number(path, root, ["baselines", i, "value"], entry["value"], low=0.0)
        if value == 0:  # a ratio against it would divide by zero
            raise ConfigError(f"{yamlfile.field_at(path, root, ['baselines', i, 'value'])}: must be a number > 0, got 0")
        _number(path, root, ["baselines", i, "value"], value, *BASELINE_VALUE_RANGE)
        try:  # absent: as the case's family declares the figure, never assumed lower
            direction = entry["direction"] if "direction" in entry else default_direction(case_id, statistic)
        except FigureUnavailable as exc:
            raise ConfigError(f"{at('direction')}: {exc}") from None
        if direction not in DIRECTIONS:
            raise ConfigError(f"{at('direction')}: expected one of {DIRECTIONS}, got {direction!r}")
        min_effect = entry.get("min_effect")
        if min_effect is not None:
            min_effect = _number(path, root, ["baselines", i, "min_effect"], min_effect, 0.0, MAX_MIN_EFFECT)
        out.append(Baseline(case_id, statistic, value, direction, min_effect))
    _refuse_a_case_given_twice(path, root, out)
    return out


def _refuse_a_case_given_twice(path: Path, root, baselines: list[Baseline]) -> None:
    """One entry per case: a gate's verdicts, gate.json, its Markdown and JUnit are keyed by case,
    as an A/B gate's one statistic makes them, so a second entry of a case (another statistic, or
    one statistic in another unit) would replace the first's verdict while Holm counted both."""
    first: dict[str, int] = {}
    for i, baseline in enumerate(baselines):
        if baseline.case_id not in first:
            first[baseline.case_id] = i
            continue
        earlier = baselines[first[baseline.case_id]]
        line, this_line = (yamlfile.line_of(root, ["baselines", at]) for at in (first[baseline.case_id], i))
        here = f"{path}:{this_line}: field baselines[{i}]: {baseline.case_id}"
        if earlier.statistic == baseline.statistic:
            raise ConfigError(f"{here} {baseline.statistic} listed twice (line {line} too)")
        given = f"line {line} gives {earlier.statistic}, line {this_line} {baseline.statistic}"
        parts = sample_parts(earlier.statistic), sample_parts(baseline.statistic)
        if None not in parts and parts[0][0] == parts[1][0]:
            raise ConfigError(f"{here}: one statistic in two units ({given}): give it once, in one unit")
        raise ConfigError(f"{here}: one statistic per case in a table ({given}); gate them in two tables")
