"""What a gate leaves behind: an exit code, JSON, JUnit XML and a markdown summary.

Exit codes (distinct, for CI):
- 0: pass: nothing regressed and every case was measured (improved, unchanged, inconclusive);
- 1: at least one case regressed (a definite finding; it wins over could-not-run elsewhere);
- 2: the gate could not run, or some case could not be measured on a side (failed or timed-out
  run, wrong answer, case unknown to one side, bad ref, bad config). Never a silent pass.

An inconclusive case passes when its estimate is short of the minimum effect; one whose estimate
is a worsening of at least the minimum effect (``likely_regression``, the budget ran out before
significance) fails with exit 1 unless ``--allow-inconclusive``. ``--fail-on-inconclusive`` fails
every inconclusive case.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

from harness.core import atomic
from harness.core.claim import refuse_held_above
from harness.core.escape import for_code_span, for_file, for_markdown, for_markdown_cell, for_xml
from harness.core.options import UsageError
from harness.core.runfiles import GATE_RESULT_FILES
from harness.gate.stats import Outcome, Policy, Verdict

EXIT_PASS, EXIT_REGRESSION, EXIT_COULD_NOT_RUN = 0, 1, 2
SCHEMA_ID = "critpath.gate/1"
TESTS = {"ab": "Wilcoxon signed-rank on paired log ratios", "compare": "Mann-Whitney U",
         "against": "Wilcoxon signed-rank against the table's value"}


def fails_build(outcome: str, likely_regression: bool, fail_on_inconclusive: bool = False,
                allow_inconclusive: bool = False) -> bool:
    """The exit rules: whether a case with this outcome fails the build."""
    if outcome == Outcome.REGRESSED:
        return True
    if outcome != Outcome.INCONCLUSIVE:
        return False
    return fail_on_inconclusive or (likely_regression and not allow_inconclusive)


@dataclass
class GateResult:
    mode: str  # "ab" (gate --base), "compare" (two stored runs), "against" (baseline table)
    statistic: str
    unit: str  # "process" or "iteration" (see harness.gate.stats)
    policy: Policy
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    base: dict = field(default_factory=dict)
    candidate: dict = field(default_factory=dict)
    repeats: int = 0
    wall_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    error: str = ""  # set when the gate as a whole could not run
    fail_on_inconclusive: bool = False
    allow_inconclusive: bool = False  # a likely regression at the budget passes
    extra: dict = field(default_factory=dict)

    def fails_build(self, v: Verdict) -> bool:
        """Whether this case's verdict fails the build under this gate's exit rules."""
        return fails_build(v.outcome, v.likely_regression, self.fail_on_inconclusive, self.allow_inconclusive)

    def counts(self) -> dict[str, int]:
        counts = {o: 0 for o in Outcome.ALL}
        for v in self.verdicts.values():
            counts[v.outcome] += 1
        return counts

    @property
    def exit_code(self) -> int:
        counts = self.counts()
        if any(self.fails_build(v) for v in self.verdicts.values()):
            return EXIT_REGRESSION
        if self.error or counts[Outcome.COULD_NOT_RUN] or not self.verdicts:
            return EXIT_COULD_NOT_RUN
        return EXIT_PASS

    @property
    def headline(self) -> str:
        code = self.exit_code
        if self.error:
            return f"could not run: {self.error}"
        c = self.counts()
        parts = [f"{c[o]} {o.replace('_', ' ')}" for o in Outcome.ALL if c[o]]
        likely = sum(1 for v in self.verdicts.values() if v.likely_regression)
        if likely:
            parts.append(f"{likely} likely regression{'s' if likely > 1 else ''}"
                         + (" (allowed)" if self.allow_inconclusive else ""))
        word = {EXIT_PASS: "PASS", EXIT_REGRESSION: "FAIL (regression)", EXIT_COULD_NOT_RUN: "COULD NOT RUN"}[code]
        return f"{word}: " + (", ".join(parts) if parts else "no cases")

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA_ID,
            "mode": self.mode,
            "exit_code": self.exit_code,
            "headline": self.headline,
            "error": self.error,
            "statistic": self.statistic,
            "unit": self.unit,
            "policy": self.policy.to_dict(),
            "multiple_comparisons": "holm",
            "fail_on_inconclusive": self.fail_on_inconclusive,
            "allow_inconclusive": self.allow_inconclusive,
            # null: the gate stopped before it knew anything of the side (``error`` says why)
            "base": self.base or None,
            "candidate": self.candidate or None,
            "repeats": self.repeats,
            "wall_s": round(self.wall_s, 3),
            "counts": self.counts(),
            "warnings": list(self.warnings),
            "cases": [{"case_id": cid, **v.to_dict()} for cid, v in self.verdicts.items()],
            "extra": self.extra,
        }


def _json_ready(value):
    """Infinite or NaN numbers (an interval with too few pairs to be bounded, a boundary with
    nothing spent yet) become null, and a lone surrogate in a message is written visibly: gate.json
    stays strict JSON that any parser reads."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return for_file(value)
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    return value


def _json_bytes(result: GateResult, path: Path) -> bytes:
    return atomic.json_bytes(path, _json_ready(result.to_dict()), sort_keys=False)


def _pct(ratio: float) -> str:
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return "unbounded" if ratio is not None and ratio == math.inf else "n/a"
    return f"{(ratio - 1) * 100:+.1f} %"


def _test_text(v: Verdict) -> str:
    """The significance figure: Holm-adjusted p of a fixed-size test, or z against the boundary of
    a sequential one (whose nominal p is not comparable to alpha)."""
    d = v.detail
    if "z" in d:
        boundary = d.get("test_boundary")
        return f"z={d['z']:.2f} vs {boundary:.2f}" if boundary is not None else f"z={d['z']:.2f} (nothing spent yet)"
    return f"p_adj={v.p_adjusted:.3g}" if v.p_adjusted is not None else ""


def _figures(v: Verdict) -> str:
    c = v.comparison
    if c is None:
        return ""
    d = v.detail
    n = f"{d['n_pairs']} pairs" if "n_pairs" in d else f"n={c.n_base}/{c.n_cand}"
    text = (f"ratio {c.ratio:.4f} ({_pct(c.ratio)}), {c.confidence * 100:g} % {d.get('interval', 'CI')} "
            f"[{c.ci_low:.4f}, {c.ci_high:.4f}], p={c.p_value:.3g}, {_test_text(v)}, {n}, "
            f"base {c.base_center:.6g}, candidate {c.cand_center:.6g}, min effect {v.min_effect * 100:g} %")
    if d.get("mde") is not None:
        text += f", detectable here: >= {d['mde'] * 100:.1f} %"
    if v.repeats_to_decide:
        text += f", about {v.repeats_to_decide} {'pairs' if 'n_pairs' in d else 'repeats per side'} would decide it"
    return text


def junit_xml(result: GateResult) -> str:
    """One testcase per case: regressed -> <failure>, could_not_run -> <error>, inconclusive ->
    <skipped> (not decided; unless --fail-on-inconclusive, then <failure>)."""
    suites = ET.Element("testsuites", name="critpath gate")
    suite = ET.SubElement(suites, "testsuite", name=f"critpath gate ({result.mode}, {result.statistic})")
    failures = errors = skipped = 0
    props = ET.SubElement(suite, "properties")
    for key, value in (("statistic", result.statistic), ("unit", result.unit), ("alpha", result.policy.alpha),
                       ("multiple_comparisons", "holm"), ("repeats", result.repeats),
                       ("base", result.base.get("commit") or result.base.get("ref", "")),
                       ("candidate", result.candidate.get("commit") or result.candidate.get("ref", ""))):
        ET.SubElement(props, "property", name=key, value=str(value))
    if result.error:
        case = ET.SubElement(suite, "testcase", classname="critpath.gate", name="gate", time="0")
        ET.SubElement(case, "error", message=result.error, type="could_not_run").text = result.error
        errors += 1
    for case_id, v in result.verdicts.items():
        family = case_id.partition("/")[0]
        case = ET.SubElement(suite, "testcase", classname=f"critpath.gate.{family}", name=case_id, time="0")
        message = f"{v.outcome}: {v.reason}"
        if result.fails_build(v):
            ET.SubElement(case, "failure", message=message, type=v.outcome).text = _figures(v)
            failures += 1
        elif v.outcome == Outcome.COULD_NOT_RUN:
            ET.SubElement(case, "error", message=message, type=v.outcome).text = v.reason
            errors += 1
        elif v.outcome == Outcome.INCONCLUSIVE:
            ET.SubElement(case, "skipped", message=message)
            skipped += 1
        ET.SubElement(case, "system-out").text = f"{message}\n{_figures(v)}"
    total = len(result.verdicts) + (1 if result.error else 0)
    suite.set("tests", str(total))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    suite.set("time", f"{result.wall_s:.3f}")
    for key in ("tests", "failures", "errors", "skipped", "time"):
        suites.set(key, suite.get(key))
    for element in suites.iter():  # every message and property as XML 1.0 allows (harness.core.escape)
        element.text = for_xml(element.text) if element.text is not None else None
        element.attrib.update({k: for_xml(v) for k, v in element.attrib.items()})
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def junit_schema_path() -> Path:
    return Path(str(resources.files("harness").joinpath("gate/junit.xsd")))


def _note(v: Verdict, result: GateResult) -> str:
    if v.outcome == Outcome.COULD_NOT_RUN:
        return v.reason
    parts = []
    if v.outcome == Outcome.INCONCLUSIVE:
        if v.likely_regression:
            parts.append("fails the build: the estimate reaches the minimum effect but the budget ran out before "
                         "significance" + (" (allowed by --allow-inconclusive)" if result.allow_inconclusive else ""))
        if v.repeats_to_decide:
            unit = "pairs" if "n_pairs" in v.detail else "repeats per side"
            seconds = v.detail.get("budget_to_decide_s")
            parts.append(f"~{v.repeats_to_decide} {unit} would decide it"
                         + (f" (--budget {seconds:.0f})" if seconds else ""))
        elif not v.likely_regression:
            parts.append("sits on the minimum effect; more repeats alone will not settle it")
    if v.detail.get("mde") is not None:
        parts.append(f"detectable here: >= {v.detail['mde'] * 100:.1f} %")
    return "; ".join(parts)


SHORT_COMMIT = 12  # hex digits of a commit in gate.md: unique within any one repository


def _side_text(side: dict) -> str:
    """A side as gate.md names it: its commit, short; else its ref (a run's path, a table) whole,
    since two paths cut to a length can be one text for two sides."""
    commit = side.get("commit")
    return str(commit)[:SHORT_COMMIT] if commit else str(side.get("ref", "?"))


def _repeats_text(result: GateResult) -> str:
    """How many repeats gate.md says each side had: a compare of uneven sides names each count."""
    runs = (result.base.get("runs"), result.candidate.get("runs"))
    if runs[0] != runs[1]:
        return f", {runs[0]} runs of the base and {runs[1]} of the candidate"
    return f", {result.repeats} repeats per side" if result.repeats else ""


def markdown(result: GateResult) -> str:
    """A summary for a CI step summary (GitHub's $GITHUB_STEP_SUMMARY renders it)."""
    lines = [f"### critpath gate: {for_markdown(result.headline)}", ""]
    plan = result.extra.get("plan")
    if result.mode == "ab" and plan:
        how = (f"; statistic `{result.statistic}`; {result.repeats} pairs of fresh processes, {plan['rounds']} rounds "
               f"each, interleaved; {TESTS['ab']}, sequential within a {plan['budget_s']:g} s budget, Holm across "
               f"cases, alpha {result.policy.alpha:g}; {result.wall_s:.0f} s.")
    else:
        asked = result.extra.get("statistic_asked")
        how = (f"; statistic `{result.statistic}`" + (f" ({for_code_span(asked)} was asked; see the warning)" if asked else "")
               + f", unit of replication: {result.unit}"
               + _repeats_text(result)
               + f"; Holm-adjusted {TESTS.get(result.mode, TESTS['compare'])} at alpha {result.policy.alpha:g}; "
               f"{result.wall_s:.0f} s.")
    base, cand = (for_code_span(_side_text(side)) for side in (result.base, result.candidate))
    lines.append(f"{result.mode}: base {base} vs candidate {cand}"
                 + (" (with uncommitted changes)" if result.candidate.get("dirty") else "") + how)
    lines.append("")
    for w in result.warnings:
        lines.append(f"> **Warning:** {for_markdown(w)}")
        lines.append("")
    if result.error:
        lines.append(f"**Could not run:** {for_markdown(result.error)}")
        lines.append("")
    if result.verdicts:
        lines.append("| case | verdict | change | interval | test | n | min effect | note |")
        lines.append("|---|---|---|---|---|---|---|---|")
        order = {o: i for i, o in enumerate(Outcome.ALL)}
        for case_id, v in sorted(result.verdicts.items(), key=lambda kv: order[kv[1].outcome]):
            c = v.comparison
            if c is None:
                cells = ["", "", "", ""]
            else:
                n = f"{v.detail['n_pairs']} pairs" if "n_pairs" in v.detail else f"{c.n_base or 'ref'}/{c.n_cand}"
                cells = [_pct(c.ratio), f"[{_pct(c.ci_low)}, {_pct(c.ci_high)}]", _test_text(v), n]
            note = _note(v, result)
            verdict_text = v.outcome.replace("_", " ") + (" (likely regression)" if v.likely_regression else "")
            lines.append(f"| {for_code_span(case_id, in_table=True)} | **{verdict_text}** | " + " | ".join(cells)
                         + f" | {v.min_effect * 100:g} % | {for_markdown_cell(note)} |")
    lines.append("")
    return "\n".join(lines)


def output_paths(out_dir: Path) -> dict[str, Path]:
    """The gate's own files in ``out_dir``, by kind."""
    out_dir = Path(out_dir)
    return {kind: out_dir / name for kind, name in zip(("json", "junit", "markdown"), GATE_RESULT_FILES)}


def check_markdown(markdown_path: Path, out_dir: Path) -> None:
    """UsageError naming ``--markdown`` when the summary could not be appended there: one of the
    gate's own files in ``out_dir`` (the append would make two documents in one), an input, not a
    regular file, in a directory that is missing or closed, or in a directory another live process
    holds (its write would be refused at the end). Checked before a gate measures (a
    refusal at the end lost its whole result) and again before anything is written, so a refused
    --markdown leaves no outputs behind."""
    markdown_path = Path(markdown_path)
    if markdown_path.resolve() in {p.resolve() for p in output_paths(out_dir).values()}:
        raise UsageError(f"--markdown {markdown_path} is one of the gate's own outputs in {out_dir}; "
                         "give a file outside it")
    try:
        atomic.check_target(markdown_path)
        atomic.check_creatable(markdown_path)
        refuse_held_above(markdown_path, "choose another --markdown")
    except UsageError as exc:
        raise UsageError(f"--markdown {exc}") from None


def write_outputs(result: GateResult, out_dir: Path, markdown_path: Optional[Path] = None,
                  own: bool = False) -> dict[str, Path]:
    """The result's files in ``out_dir`` (and appended to ``markdown_path``). ``own``: the gate that
    measured ``out_dir``'s sides writes its own result there; any other writer is refused over a
    gate's (``runfiles``)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = output_paths(out_dir)
    if markdown_path is not None:
        check_markdown(markdown_path, out_dir)
    text = markdown(result)
    files = {paths["json"]: _json_bytes(result, paths["json"]), paths["junit"]: junit_xml(result).encode("utf-8"),
             paths["markdown"]: text.encode("utf-8")}
    if markdown_path is not None:
        # Appended, as CI step-summary files collect several steps; whole, and never into an input.
        files[Path(markdown_path)] = atomic.appended(markdown_path, text + "\n")
    atomic.write_set(files, paths.values() if own else ())  # all of them or, on a full disk, none: never one result's JSON beside another's XML
    return paths
