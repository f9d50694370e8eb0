"""``critpath accept --profile PROFILE.yaml``: hardware acceptance against a profile of thresholds.

A profile pins the machine (GPU count and name, driver, NCCL version, PCIe generation and width,
active NVLinks; world size and node layout), bounds node facts (ECC errors, remapped rows, clock
slowdowns: harness.run.nodefacts), and lists checks (a case or a family + parameters, a statistic, a
``max`` or ``min``, and where the threshold comes from). The cases run through the normal runner,
or come from a stored run (``--run``), imports of nccl-tests output included.

Three verdicts (harness.accept.verdicts): pass, fail, could not verify. A check whose case the run does
not hold, in a data type or from a source the check does not accept, or whose statistic its
records cannot give, and a pin or fact the fingerprint did not record, could not be verified; only
a measured value or a recorded property that misses the profile fails.

Exit codes: 0 everything passed; 1 a check, pin or fact failed; 2 something could not be verified
and nothing failed, or acceptance could not start (bad profile, unreadable run).
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import jsonschema

from harness.core import yamlfile
from harness.claims.check import matches
from harness.core.case import CaseIdError
from harness.core.comparable import mismatch
from harness.core.family import SOURCE_MARKS
from harness.core.declarations import declared
from harness.core.figures import FigureUnavailable, is_sample_statistic, sample_parts
from harness.core.figures import value as figure_value
from harness.run.nodefacts import FACT_NAMES
from harness.accept.pins import fact_outcome, pin_outcomes
from harness.core.records import Record
from harness.accept.verdicts import EXIT_UNVERIFIED, FAIL, PASS, UNVERIFIED, Outcome, exit_code, line, show_value, word
from harness.document.blocks import Heading, Para, Table

# Where a record came from: critpath measured it, or it was imported (extra.imported.source).
RECORD_SOURCES = ("critpath", "nccl-tests")
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
        "world": {"type": "integer", "minimum": 1},
        "backend": {"enum": ["gloo", "nccl"]},
        "nodes": {"type": "integer", "minimum": 1},
        "ranks_per_node": {"type": "integer", "minimum": 1},
        "run": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "cases": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "iters": {"type": "integer", "minimum": 1},
                "warmup": {"type": "integer", "minimum": 0},
                "timeout_s": {"type": "number", "exclusiveMinimum": 0},
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
                    "select": {"type": "object"},
                    "relative_to": {"type": "object", "description": "select of the reference record; the check compares the ratio"},
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
_VALIDATOR = jsonschema.Draft202012Validator(PROFILE_SCHEMA)


class ProfileError(ValueError):
    """A profile that cannot be used; the message names file, line and field."""


def _case_parts(case_id: str) -> tuple[str, dict[str, str]]:
    """``allreduce/algo=ring,dtype=float32`` -> ("allreduce", {"algo": "ring", "dtype": "float32"}), as text."""
    family, _, body = case_id.partition("/")
    return family, dict(item.partition("=")[::2] for item in body.split(",") if item)


def _semantic_problems(check: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, message) for what the schema cannot say about one check."""
    from harness.core import registry

    problems = []
    dtypes = check.get("dtypes")
    if "case" in check:
        family, params = _case_parts(check["case"])
        _, slash, body = check["case"].partition("/")
        problem = None
        if not family or not slash or any("=" not in item for item in body.split(",") if item):
            problem = f"{check['case']!r} is not a case ID (family/key=value,...)"
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
        if dtypes and "dtype" in check.get("select", {}):
            problems.append(("dtypes", "give the data types once: in dtypes, or in select.dtype, not both"))
    stat = check["statistic"]
    if family in registry.FAMILIES and not is_sample_statistic(stat) and declared(family, stat) is None:
        names = ", ".join(f.name for f in registry.get(family).figures)
        problems.append(("statistic", f"family {family!r} declares no figure {stat!r}; it declares {names}, "
                                      "and every record gives pNN_us, mean_us, max_ms ..."))
    return problems


def load_profile(path: Path) -> dict:
    from harness.claims.baselines import line_of_field# same file:line:field reporting as baselines

    path = Path(path)
    try:
        data, root = yamlfile.load(path)
    except yamlfile.YamlFileError as exc:
        raise ProfileError(str(exc)) from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}:1: a profile must be a mapping")
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(data))
    if error is not None:
        where = list(error.absolute_path)
        field = ".".join(str(p) for p in where) or "(profile)"
        raise ProfileError(f"{path}:{line_of_field(root, where)}: field {field}: {error.message}")
    for i, check in enumerate(data["checks"]):
        for key, message in _semantic_problems(check):
            where = ["checks", i, key]
            raise ProfileError(f"{path}:{line_of_field(root, where)}: field checks.{i}.{key}: {message}")
    return data


def record_source(record: Record) -> str:
    imported = (record.extra or {}).get("imported")
    return str(imported.get("source", "imported")) if isinstance(imported, Mapping) else "critpath"


def _where(record: Record) -> str:
    """The record, and for an import the file and line it came from."""
    imported = (record.extra or {}).get("imported")
    if not isinstance(imported, Mapping):
        return record.case_id
    return f"{record.case_id} from {imported.get('source')} {imported.get('file')} {imported.get('where')}".rstrip()


def _matches(record: Record, check: Mapping[str, Any]) -> bool:
    """The record is of the check's case (or family and select), in one of its data types."""
    dtypes = check.get("dtypes")
    if "case" in check:
        family, want = _case_parts(check["case"])
        have = _case_parts(record.case_id)[1]
        if dtypes:
            want, have = ({k: v for k, v in d.items() if k != "dtype"} for d in (want, have))
        if record.family != family or have != want:
            return False
    elif record.family != check["family"] or not matches(record, check.get("select", {})):
        return False
    return not dtypes or record.params.get("dtype") in dtypes


def _spread(values: Sequence[str]) -> str:
    if values and all(v.lstrip("-").isdigit() for v in values):
        nums = sorted(int(v) for v in values)
        return str(nums[0]) if len(nums) == 1 else f"{nums[0]} .. {nums[-1]}"
    return ", ".join(sorted(values)[:6]) + (" ..." if len(values) > 6 else "")


def why_no_record(check: Mapping[str, Any], records: Sequence[Record]) -> str:
    """What the run lacks for this check, parameter by parameter: ``no allreduce record with
    dtype=bfloat16 (the run has float32)``."""
    if "case" in check:
        family, want = _case_parts(check["case"])
    else:
        family, want = check["family"], {k: v for k, v in check.get("select", {}).items() if v is not None}
    same = [r for r in records if r.family == family]
    if not same:
        held = ", ".join(sorted({r.family for r in records})) or "none"
        return f"no {family} record in this run (its families: {held})"
    if check.get("dtypes"):
        want = {**want, "dtype": check["dtypes"]}
    gaps = []
    hint = ""
    for key, value in want.items():
        options = [str(v) for v in value] if isinstance(value, list) else [str(value)]
        have = sorted({str(r.params.get(key)) for r in same})
        if not set(options) & set(have):
            gaps.append(f"{key}={'|'.join(options)} (the run has {_spread(have)})")
            if key == "dtype" and not check.get("dtypes"):
                hint = f"; a check may accept {', '.join(have)} too: dtypes: [{', '.join(options + have)}]"
    if not gaps:
        return f"no {family} record with all of {want} (each value is in the run, not together)"
    return f"no {family} record with " + ", ".join(gaps) + hint


def unit_of(family: str, statistic: str) -> tuple[str, str]:
    """(unit, mark): the unit a statistic is in, from its name (p99_us) or its family's declaration
    (busbw_gbps: GB/s); mark says when the figure is modelled or simulated. "" where none is declared."""
    parts = sample_parts(statistic)
    if parts:
        return parts[1], ""
    if is_sample_statistic(statistic):
        return "ratio", ""  # pNN_over_mean
    figure = declared(family, statistic)
    if figure is None:
        return "", ""
    return figure.unit, SOURCE_MARKS[figure.source]


def evaluate_check(check: Mapping[str, Any], records: Sequence[Record]) -> Outcome:
    name, stat, source = check["name"], check["statistic"], check["source"]
    family = check.get("family") or _case_parts(check.get("case", ""))[0]
    unit, mark = unit_of(family, stat)
    if "relative_to" in check:
        stat, unit = f"{stat} / reference {stat}", "ratio"
    bound_max = check.get("max")
    op, bound = ("<=", bound_max) if bound_max is not None else (">=", check["min"])

    def out(verdict, measured=None, margin=None, detail=""):
        return Outcome("check", name, verdict, stat, unit, measured, op, bound, margin, detail, source)

    sources = check.get("sources")
    usable = [r for r in records if not sources or record_source(r) in sources]
    chosen = [r for r in usable if _matches(r, check)]
    if not chosen:
        came = ", ".join(sorted({record_source(r) for r in records} - set(sources or ())))
        if not usable:
            why = f"the check accepts records from {', '.join(sources)}; this run's come from {came}"
        elif any(_matches(r, check) for r in records):
            why = f"the run's records of it come from {came}; the check accepts sources {', '.join(sources)}"
        else:
            why = why_no_record(check, usable)
        return out(UNVERIFIED, detail=why)
    failed = [r for r in chosen if not r.ok]
    if failed:
        r = failed[0]
        why = r.error.message.splitlines()[0] if r.error and r.error.message else (
            f"{r.check.wrong} wrong of {r.check.checked}" if r.check else r.status)
        return out(FAIL, detail=f"{_where(r)} {r.status}: {why}")
    try:
        values = [figure_value(r, check["statistic"]) for r in chosen]
        if "relative_to" in check:
            refs = [r for r in records if r.family == chosen[0].family and matches(r, check["relative_to"]) and r.ok]
            if not refs:
                return out(UNVERIFIED, detail=f"no reference record {check['relative_to']} in this run")
            differs = mismatch({"checked": chosen, "reference": refs[:1]})
            if differs:
                return out(UNVERIFIED, detail=differs)
            ref = figure_value(refs[0], check["statistic"])
            values = [v / ref for v in values]
    except FigureUnavailable as exc:
        return out(UNVERIFIED, detail=str(exc))
    # The least favourable record decides: a threshold must hold for every matching case.
    if bound_max is not None:
        worst = max(range(len(values)), key=values.__getitem__)
        measured = values[worst]
        margin = (bound_max - measured) / abs(bound_max) * 100 if bound_max else None
        verdict = PASS if measured <= bound_max else FAIL
    else:
        worst = min(range(len(values)), key=values.__getitem__)
        measured = values[worst]
        margin = (measured - check["min"]) / abs(check["min"]) * 100 if check["min"] else None
        verdict = PASS if measured >= check["min"] else FAIL
    decider = chosen[worst]
    detail = (f"worst of {len(values)} records: " if len(values) > 1 else "") + _where(decider)
    wanted_dtype = _case_parts(check["case"])[1].get("dtype") if "case" in check else None
    if wanted_dtype and decider.params.get("dtype") != wanted_dtype:
        detail += f"; {decider.params.get('dtype')} accepted by the check's dtypes"
    return out(verdict, measured, margin, detail + mark)


@dataclass(frozen=True)
class Acceptance:
    profile: str
    checks: tuple[Outcome, ...]
    pins: tuple[Outcome, ...] = ()
    facts: tuple[Outcome, ...] = ()
    incomplete: str = ""  # the run did not finish every case: no verdict can pass it

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        return self.checks + self.pins + self.facts

    @property
    def exit_code(self) -> int:
        return exit_code([o.verdict for o in self.outcomes] + ([UNVERIFIED] if self.incomplete else []))

    @property
    def verdict(self) -> str:
        return word(self.exit_code)

    def counts(self) -> dict[str, int]:
        return {v: sum(o.verdict == v for o in self.outcomes) for v in (PASS, FAIL, UNVERIFIED)}

    def to_dict(self) -> dict:
        # /2: three verdicts ("could not verify" replaced "could not run"); pins and facts are outcomes
        # like checks, with statistic and unit, instead of a list of problem strings.
        return {"schema": "critpath.acceptance/2", "profile": self.profile, "verdict": self.verdict,
                "exit_code": self.exit_code, "incomplete": self.incomplete, "counts": self.counts(),
                "checks": [o.to_dict() for o in self.checks], "pins": [o.to_dict() for o in self.pins],
                "facts": [o.to_dict() for o in self.facts]}


def accept(profile: Mapping[str, Any], records: Sequence[Record], fp: Mapping[str, Any],
           incomplete: str = "") -> Acceptance:
    return Acceptance(profile["name"], tuple(evaluate_check(c, records) for c in profile["checks"]),
                      tuple(pin_outcomes(profile, fp)), tuple(fact_outcome(f, fp) for f in profile.get("facts", [])),
                      incomplete)


def acceptance_blocks(result: Acceptance) -> list:
    rows = [[o.kind, o.name, o.verdict, o.statistic, show_value(o.measured, o.unit), o.threshold,
             "-" if o.margin_pct is None else f"{o.margin_pct:+.1f} %", o.detail, o.source] for o in result.outcomes]
    counts = result.counts()
    blocks = [Heading(2, f"Acceptance: {result.profile} — {result.verdict}"),
              Para(f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[UNVERIFIED]} could not be verified "
                   "(a pin or fact the fingerprint did not record, a case the run does not hold, a statistic its "
                   "records cannot give).")]
    if result.incomplete:
        blocks.append(Para(f"Could not verify the run: {result.incomplete}."))
    blocks.append(Table(["kind", "name", "verdict", "statistic", "measured", "threshold", "margin", "detail",
                         "threshold source"], rows))
    return blocks


def register(sub) -> None:
    p = sub.add_parser("accept", help="hardware acceptance against a profile: pass, fail or could not verify")
    p.add_argument("--profile", type=Path, required=True, metavar="PROFILE.yaml")
    p.add_argument("--run", type=Path, metavar="RUN_DIR", help="judge a stored run instead of running the cases")
    p.add_argument("--out", type=Path, help="run directory for the cases run now (default reports/<run-id>)")
    p.add_argument("--no-report", action="store_true", help="skip writing report.md / report.html")
    p.set_defaults(func=cmd_accept)


def _run_cases(profile: Mapping[str, Any], out: Optional[Path]) -> tuple[Path, int]:
    from harness.run.runner import RunOptions, run
    from harness.core.store import new_run_id

    spec = profile.get("run")
    if not spec:
        raise ProfileError(f"profile {profile['name']!r} has no run.cases; pass --run RUN_DIR")
    out = out or Path("reports") / f"accept-{new_run_id()}"
    opts = RunOptions(case_ids=tuple(spec["cases"]), world=profile["world"], backend=profile.get("backend"),
                      iters=spec.get("iters"), warmup=spec.get("warmup"), timeout_s=spec.get("timeout_s", 60.0),
                      out=out, argv=tuple(sys.argv))
    code = run(opts)  # failed cases become records; the checks judge them
    return out, code


def cmd_accept(args) -> int:
    from harness.report.cli import make_report, write_report
    from harness.core.store import load_run

    import os

    try:
        profile = load_profile(args.profile)
        if args.run:
            run_dir = args.run
        else:
            run_dir, code = _run_cases(profile, args.out)
            if int(os.environ.get("RANK", "0")) != 0:
                # Under torchrun/Slurm every rank ran the cases; rank 0 alone holds and judges them.
                return 0 if code == 0 else 1
        run = load_run(run_dir)
    except ProfileError as exc:
        print(f"critpath accept: error: {exc}", file=sys.stderr)
        return EXIT_UNVERIFIED
    result = accept(profile, run.records, run.fingerprint, run.incomplete)
    print(f"acceptance {profile['name']}: {result.verdict} ({run_dir})")
    if result.incomplete:
        print(f"  {word(EXIT_UNVERIFIED):16}  the run: {result.incomplete}")
    for o in result.outcomes:
        print("  " + line(o))
    counts = result.counts()
    print(f"{counts[PASS]} pass, {counts[FAIL]} fail, {counts[UNVERIFIED]} could not verify: "
          f"{result.verdict}, exit {result.exit_code}")
    out = args.out if args.run and args.out else Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "acceptance.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    if not args.no_report:
        report = make_report([run_dir])
        report.blocks[2:2] = acceptance_blocks(result)  # after the title and preamble
        md, _ = write_report(report, out)
        print(f"report: {md}")
    return result.exit_code
