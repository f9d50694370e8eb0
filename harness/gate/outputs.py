"""What a gate leaves behind: an exit code, JSON, JUnit XML and a markdown summary.

Exit codes (distinct, for CI):
- 0: pass: nothing regressed and every case was measured (improved, unchanged, inconclusive);
- 1: at least one case regressed (a definite finding; it wins over could-not-run elsewhere);
- 2: the gate could not run, or some case could not be measured on a side (failed or timed-out
  run, wrong answer, case unknown to one side, bad ref, bad config). Never a silent pass.

Inconclusive cases pass by default (the gate could not tell, and says how many repeats would);
``--fail-on-inconclusive`` turns them into exit 1 for a stricter gate.
"""
from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

from harness.gate.stats import Outcome, Policy, Verdict

EXIT_PASS, EXIT_REGRESSION, EXIT_COULD_NOT_RUN = 0, 1, 2
SCHEMA_ID = "critpath.gate/1"
TESTS = {"ab": "Mann-Whitney U", "compare": "Mann-Whitney U",
         "against": "Wilcoxon signed-rank against the table's value"}


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
    extra: dict = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        counts = {o: 0 for o in Outcome.ALL}
        for v in self.verdicts.values():
            counts[v.outcome] += 1
        return counts

    @property
    def exit_code(self) -> int:
        counts = self.counts()
        if counts[Outcome.REGRESSED] or (self.fail_on_inconclusive and counts[Outcome.INCONCLUSIVE]):
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
            "base": self.base,
            "candidate": self.candidate,
            "repeats": self.repeats,
            "wall_s": round(self.wall_s, 3),
            "counts": self.counts(),
            "warnings": list(self.warnings),
            "cases": [{"case_id": cid, **v.to_dict()} for cid, v in self.verdicts.items()],
            "extra": self.extra,
        }


def write_json(result: GateResult, path: Path) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f} %"


def _figures(v: Verdict) -> str:
    c = v.comparison
    if c is None:
        return ""
    text = (f"ratio {c.ratio:.4f} ({_pct(c.ratio)}), {c.confidence * 100:g} % CI [{c.ci_low:.4f}, {c.ci_high:.4f}], "
            f"p={c.p_value:.3g}, p_adj={v.p_adjusted:.3g}, n={c.n_base}/{c.n_cand}, "
            f"base {c.base_center:.6g}, candidate {c.cand_center:.6g}, min effect {v.min_effect * 100:g} %")
    if v.repeats_to_decide:
        text += f", about {v.repeats_to_decide} repeats per side would decide it"
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
        if v.outcome == Outcome.REGRESSED or (v.outcome == Outcome.INCONCLUSIVE and result.fail_on_inconclusive):
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
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def junit_schema_path() -> Path:
    return Path(str(resources.files("harness").joinpath("gate/junit.xsd")))


def markdown(result: GateResult) -> str:
    """A summary for a CI step summary (GitHub's $GITHUB_STEP_SUMMARY renders it)."""
    lines = [f"### critpath gate: {result.headline}", ""]
    base = result.base.get("commit") or result.base.get("ref", "?")
    cand = result.candidate.get("commit") or result.candidate.get("ref", "?")
    lines.append(f"{result.mode}: base `{str(base)[:12]}` vs candidate `{str(cand)[:12]}`"
                 + (" (with uncommitted changes)" if result.candidate.get("dirty") else "")
                 + f"; statistic `{result.statistic}`, unit of replication: {result.unit}"
                 + (f", {result.repeats} repeats per side" if result.repeats else "")
                 + f"; Holm-adjusted {TESTS.get(result.mode, TESTS['ab'])} at alpha {result.policy.alpha:g}; "
                 f"{result.wall_s:.0f} s.")
    lines.append("")
    for w in result.warnings:
        lines.append(f"> **Warning:** {w}")
        lines.append("")
    if result.error:
        lines.append(f"**Could not run:** {result.error}")
        lines.append("")
    if result.verdicts:
        lines.append("| case | verdict | change | CI | p (Holm) | n | min effect | note |")
        lines.append("|---|---|---|---|---|---|---|---|")
        order = {o: i for i, o in enumerate(Outcome.ALL)}
        for case_id, v in sorted(result.verdicts.items(), key=lambda kv: order[kv[1].outcome]):
            c = v.comparison
            if c is None:
                cells = ["", "", "", ""]
            else:
                cells = [_pct(c.ratio), f"[{_pct(c.ci_low)}, {_pct(c.ci_high)}]", f"{v.p_adjusted:.2g}",
                         f"{c.n_base or 'ref'}/{c.n_cand}"]
            note = v.reason if v.outcome == Outcome.COULD_NOT_RUN else ""
            if v.outcome == Outcome.INCONCLUSIVE:
                note = (f"~{v.repeats_to_decide} repeats per side would decide it" if v.repeats_to_decide
                        else "sits on the minimum effect; more repeats alone will not settle it")
            note = note.replace("|", "\\|")
            lines.append(f"| `{case_id}` | **{v.outcome.replace('_', ' ')}** | " + " | ".join(cells)
                         + f" | {v.min_effect * 100:g} % | {note} |")
    lines.append("")
    return "\n".join(lines)


def write_outputs(result: GateResult, out_dir: Path, markdown_path: Optional[Path] = None) -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "gate.json", "junit": out_dir / "gate.xml", "markdown": out_dir / "gate.md"}
    write_json(result, paths["json"])
    paths["junit"].write_text(junit_xml(result))
    text = markdown(result)
    paths["markdown"].write_text(text)
    if markdown_path is not None:
        # Appended, as CI step-summary files collect several steps.
        with open(markdown_path, "a") as f:
            f.write(text + "\n")
    return paths
