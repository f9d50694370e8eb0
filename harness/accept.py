"""``critpath accept --profile PROFILE.yaml``: hardware acceptance against a profile of thresholds.

A profile pins the machine (GPU count and name, driver, NCCL version, PCIe generation and width,
active NVLinks; world size and node layout) and lists checks (a case or a family + parameters, a
statistic, a ``max`` or ``min``, and where the threshold comes from). The cases run through the
normal runner, or come from a stored run (``--run``). Every check reports measured value and
margin; a pinned property that differs fails acceptance and says which device and what differs.

Exit codes: 0 every check passed; 1 a check or a pin failed; 2 acceptance could not run (bad
profile, a check with no record to judge, an unreadable run).
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import jsonschema

from harness import yamlfile
from harness.claims import matches
from harness.comparable import mismatch
from harness.figures import FigureUnavailable
from harness.figures import value as figure_value
from harness.records import Record
from harness.store import incompleteness

EXIT_PASS, EXIT_FAIL, EXIT_CANNOT = 0, 1, 2
PASS, FAIL, CANNOT = "pass", "fail", "could not run"

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
                "pcie_gen": {"type": "integer"},
                "pcie_width": {"type": "integer"},
                "nvlink_active": {"type": "integer"},
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
                },
                "oneOf": [{"required": ["max"]}, {"required": ["min"]}],
                "anyOf": [{"required": ["case"]}, {"required": ["family"]}],
            },
        },
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(PROFILE_SCHEMA)


class ProfileError(ValueError):
    """A profile that cannot be used; the message names file, line and field."""


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    verdict: str
    measured: Optional[float]
    threshold: str  # "<= 20000" / ">= 0.01"
    margin_pct: Optional[float]  # headroom: positive passes, negative fails
    detail: str
    source: str


def load_profile(path: Path) -> dict:
    from harness.baselines import line_of_field  # same file:line:field reporting as baselines

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
    return data


def _select(records: Sequence[Record], check: Mapping[str, Any]) -> list[Record]:
    if "case" in check:
        return [r for r in records if r.case_id == check["case"]]
    return [r for r in records if r.family == check["family"] and matches(r, check.get("select", {}))]


def evaluate_check(check: Mapping[str, Any], records: Sequence[Record]) -> CheckOutcome:
    name, stat, source = check["name"], check["statistic"], check["source"]
    bound_max = check.get("max")
    threshold = f"<= {bound_max:g}" if bound_max is not None else f">= {check['min']:g}"

    def out(verdict, measured=None, margin=None, detail=""):
        return CheckOutcome(name, verdict, measured, threshold, margin, detail, source)

    chosen = _select(records, check)
    if not chosen:
        what = check.get("case") or f"{check['family']} {check.get('select', {})}"
        return out(CANNOT, detail=f"no record of {what} in this run")
    failed = [r for r in chosen if not r.ok]
    if failed:
        r = failed[0]
        why = r.error.message.splitlines()[0] if r.error and r.error.message else (
            f"{r.check.wrong} wrong of {r.check.checked}" if r.check else r.status)
        return out(FAIL, detail=f"{r.case_id} {r.status}: {why}")
    try:
        values = [figure_value(r, stat) for r in chosen]
        if "relative_to" in check:
            refs = [r for r in records if r.family == chosen[0].family and matches(r, check["relative_to"]) and r.ok]
            if not refs:
                return out(CANNOT, detail=f"no reference record {check['relative_to']} in this run")
            differs = mismatch({"checked": chosen, "reference": refs[:1]})
            if differs:
                return out(CANNOT, detail=differs)
            ref = figure_value(refs[0], stat)
            values = [v / ref for v in values]
    except FigureUnavailable as exc:
        return out(CANNOT, detail=str(exc))
    # The least favourable record decides: a threshold must hold for every matching case.
    if bound_max is not None:
        measured = max(values)
        margin = (bound_max - measured) / abs(bound_max) * 100 if bound_max else None
        verdict = PASS if measured <= bound_max else FAIL
    else:
        measured = min(values)
        margin = (measured - check["min"]) / abs(check["min"]) * 100 if check["min"] else None
        verdict = PASS if measured >= check["min"] else FAIL
    detail = f"worst of {len(values)} records" if len(values) > 1 else chosen[0].case_id
    return out(verdict, measured, margin, detail)


def fingerprint_problems(profile: Mapping[str, Any], fp: Mapping[str, Any]) -> list[str]:
    """Each pinned property that the run's machine does not have, said plainly."""
    problems = []
    if profile.get("world") is not None and fp.get("world") not in (None, profile["world"]):
        problems.append(f"world size is {fp.get('world')}, the profile pins {profile['world']}")
    layout = fp.get("layout") or {}
    nodes = layout.get("nodes", 1 if fp.get("launch") == "local" else None)
    if "nodes" in profile:
        if nodes is None:
            problems.append(f"node layout unknown (fingerprint has no layout); the profile pins {profile['nodes']} nodes")
        elif nodes != profile["nodes"]:
            problems.append(f"{nodes} node(s), the profile pins {profile['nodes']}")
    if "ranks_per_node" in profile and layout.get("ranks_per_node") is not None \
            and layout["ranks_per_node"] != profile["ranks_per_node"]:
        problems.append(f"{layout['ranks_per_node']} ranks per node, the profile pins {profile['ranks_per_node']}")
    pins = profile.get("fingerprint") or {}
    if not pins:
        return problems
    gpus = fp.get("gpus") or {}
    devices = gpus.get("devices") or []
    if "gpu_count" in pins and len(devices) != pins["gpu_count"]:
        reason = "" if gpus.get("present") else f" ({gpus.get('reason', 'no GPUs')})"
        problems.append(f"{len(devices)} GPU(s){reason}, the profile pins {pins['gpu_count']}")
    if "driver_version" in pins and gpus.get("driver_version") != pins["driver_version"]:
        problems.append(f"driver {gpus.get('driver_version')}, the profile pins {pins['driver_version']}")
    if "nccl_version" in pins and fp.get("nccl_version") != pins["nccl_version"]:
        problems.append(f"NCCL {fp.get('nccl_version')}, the profile pins {pins['nccl_version']}")
    for key, label in (("gpu_name", "name"), ("pcie_gen", "pcie_gen"), ("pcie_width", "pcie_width"),
                       ("nvlink_active", "nvlink_active")):
        if key not in pins:
            continue
        # Group devices by what they have, so 8 GPUs missing a field give one line, not eight.
        by_value: dict = {}
        for d in devices:
            if d.get(label) != pins[key]:
                by_value.setdefault(d.get(label), []).append(str(d.get("index", "?")))
        for value, indices in by_value.items():
            what = "not recorded in the fingerprint" if value is None else f"is {value}"
            problems.append(f"GPU {','.join(indices)}: {label} {what}, the profile pins {pins[key]}")
    return problems


@dataclass(frozen=True)
class Acceptance:
    profile: str
    outcomes: tuple[CheckOutcome, ...]
    fingerprint_problems: tuple[str, ...]
    incomplete: str = ""  # the run did not finish every case: no verdict can pass it

    @property
    def exit_code(self) -> int:
        if self.fingerprint_problems or any(o.verdict == FAIL for o in self.outcomes):
            return EXIT_FAIL
        if self.incomplete or any(o.verdict == CANNOT for o in self.outcomes):
            return EXIT_CANNOT
        return EXIT_PASS

    @property
    def verdict(self) -> str:
        return {EXIT_PASS: "PASS", EXIT_FAIL: "FAIL", EXIT_CANNOT: "COULD NOT RUN"}[self.exit_code]

    def to_dict(self) -> dict:
        return {"schema": "critpath.acceptance/1", "profile": self.profile, "verdict": self.verdict,
                "exit_code": self.exit_code, "fingerprint_problems": list(self.fingerprint_problems),
                "incomplete": self.incomplete,
                "checks": [asdict(o) for o in self.outcomes]}


def accept(profile: Mapping[str, Any], records: Sequence[Record], fp: Mapping[str, Any],
           incomplete: str = "") -> Acceptance:
    return Acceptance(profile["name"], tuple(evaluate_check(c, records) for c in profile["checks"]),
                      tuple(fingerprint_problems(profile, fp)), incomplete)


def acceptance_blocks(result: Acceptance) -> list:
    from harness.report.document import Heading, Para, Table

    rows = [[o.name, o.verdict, "-" if o.measured is None else f"{o.measured:.4g}", o.threshold,
             "-" if o.margin_pct is None else f"{o.margin_pct:+.1f} %", o.detail, o.source] for o in result.outcomes]
    blocks = [Heading(2, f"Acceptance: {result.profile} — {result.verdict}"),
              Table(["check", "verdict", "measured", "threshold", "margin", "detail", "threshold source"], rows)]
    if result.fingerprint_problems:
        blocks += [Para("The machine differs from what the profile pins:"),
                   Table(["difference"], [[p] for p in result.fingerprint_problems])]
    else:
        blocks.append(Para("The machine matches every property the profile pins."))
    return blocks


def register(sub) -> None:
    p = sub.add_parser("accept", help="hardware acceptance against a profile of thresholds")
    p.add_argument("--profile", type=Path, required=True, metavar="PROFILE.yaml")
    p.add_argument("--run", type=Path, metavar="RUN_DIR", help="judge a stored run instead of running the cases")
    p.add_argument("--out", type=Path, help="run directory for the cases run now (default reports/<run-id>)")
    p.add_argument("--no-report", action="store_true", help="skip writing report.md / report.html")
    p.set_defaults(func=cmd_accept)


def _run_cases(profile: Mapping[str, Any], out: Optional[Path]) -> tuple[Path, int]:
    from harness.runner import RunOptions, run
    from harness.store import new_run_id

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
    from harness.report.run import load_run

    import os

    try:
        profile = load_profile(args.profile)
        if args.run:
            run_dir = args.run
        else:
            run_dir, code = _run_cases(profile, args.out)
            if int(os.environ.get("RANK", "0")) != 0:
                # Under torchrun/Slurm every rank ran the cases; rank 0 alone holds and judges them.
                return EXIT_PASS if code == 0 else EXIT_FAIL
        run = load_run(run_dir)
    except ProfileError as exc:
        print(f"critpath accept: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT
    result = accept(profile, run.records, run.fingerprint, incompleteness(run.meta, list(run.records)))
    print(f"acceptance {profile['name']}: {result.verdict} ({run_dir})")
    if result.incomplete:
        print(f"  COULD NOT RUN  the run: {result.incomplete}")
    for o in result.outcomes:
        measured = "-" if o.measured is None else f"{o.measured:.4g}"
        margin = "" if o.margin_pct is None else f", margin {o.margin_pct:+.1f} %"
        print(f"  {o.verdict.upper():13} {o.name}: measured {measured} {o.threshold}{margin} ({o.detail})")
    for problem in result.fingerprint_problems:
        print(f"  FAIL          fingerprint: {problem}")
    out = args.out if args.run and args.out else Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "acceptance.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    if not args.no_report:
        report = make_report([run_dir])
        report.blocks[2:2] = acceptance_blocks(result)  # after the title and preamble
        md, _ = write_report(report, out)
        print(f"report: {md}")
    return result.exit_code
