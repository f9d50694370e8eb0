"""Gate outputs: exit codes, JUnit XML against its schema, markdown, JSON; config and baseline
files with errors that name the file and the field."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import xmlschema

from harness.gate.config import ConfigError, load_baselines, load_config
from harness.gate.outputs import (EXIT_COULD_NOT_RUN, EXIT_PASS, EXIT_REGRESSION, GateResult, junit_schema_path,
                                  junit_xml, markdown, write_outputs)
from harness.gate.stats import CaseInput, Outcome, Policy, Unit, verdicts

FAST = Policy(n_resamples=200)
SCHEMA = xmlschema.XMLSchema(str(junit_schema_path()))


def _result(**cases) -> GateResult:
    inputs = []
    for name, kind in cases.items():
        if kind == "regressed":
            inputs.append(CaseInput(f"fam/{name}=1", [100, 101, 99, 100, 102, 98, 97, 103], [130, 131, 129, 130, 132, 128, 127, 133]))
        elif kind == "improved":
            inputs.append(CaseInput(f"fam/{name}=1", [130, 131, 129, 130, 132, 128, 127, 133], [100, 101, 99, 100, 102, 98, 97, 103]))
        elif kind == "unchanged":
            inputs.append(CaseInput(f"fam/{name}=1", [100, 100.1, 99.9, 100, 100.2, 99.8], [100, 100.1, 99.9, 100.1, 100, 99.9]))
        elif kind == "inconclusive":
            inputs.append(CaseInput(f"fam/{name}=1", [100, 140], [120, 90]))
        elif kind == "could_not_run":
            inputs.append(CaseInput(f"fam/{name}=1", problem="candidate: 1 of 2 runs not ok (first: failed: boom)"))
    result = GateResult("ab", "p50_ns", Unit.PROCESS, FAST, verdicts(inputs, FAST), base={"ref": "main", "commit": "abc"},
                        candidate={"ref": "worktree", "commit": "def"}, repeats=6, wall_s=12.5)
    assert [v.outcome for v in result.verdicts.values()] == list(cases.values())
    return result


@pytest.mark.parametrize("cases,code", [
    ({"a": "unchanged", "b": "improved"}, EXIT_PASS),
    ({"a": "unchanged", "b": "inconclusive"}, EXIT_PASS),
    ({"a": "regressed", "b": "unchanged"}, EXIT_REGRESSION),
    ({"a": "regressed", "b": "could_not_run"}, EXIT_REGRESSION),
    ({"a": "unchanged", "b": "could_not_run"}, EXIT_COULD_NOT_RUN),
    ({}, EXIT_COULD_NOT_RUN),  # nothing measured is never a pass
])
def test_exit_codes(cases, code):
    assert _result(**cases).exit_code == code


def test_fail_on_inconclusive_makes_inconclusive_fail():
    result = _result(a="inconclusive")
    result.fail_on_inconclusive = True
    assert result.exit_code == EXIT_REGRESSION
    root = ET.fromstring(junit_xml(result).split("\n", 1)[1])
    assert root.find(".//failure") is not None


def _likely(result: GateResult) -> GateResult:
    """Mark the inconclusive cases as the budget leaves them when their estimate reaches the
    minimum effect: a likely regression."""
    from dataclasses import replace

    result.verdicts = {c: replace(v, likely_regression=True) if v.outcome == Outcome.INCONCLUSIVE else v
                       for c, v in result.verdicts.items()}
    return result


def test_a_likely_regression_at_the_budget_fails_the_build_by_default():
    result = _likely(_result(a="unchanged", b="inconclusive"))
    assert result.exit_code == EXIT_REGRESSION
    assert "likely regression" in result.headline
    root = ET.fromstring(junit_xml(result).split("\n", 1)[1])
    assert root.find(".//failure").get("type") == "inconclusive"
    assert "fails the build" in markdown(result)


def test_allow_inconclusive_lets_a_likely_regression_pass_and_says_so():
    result = _likely(_result(a="inconclusive"))
    result.allow_inconclusive = True
    assert result.exit_code == EXIT_PASS
    assert "(allowed)" in result.headline and "allowed by --allow-inconclusive" in markdown(result)
    # A real regression still fails: --allow-inconclusive only concerns the budget rule.
    result = _likely(_result(a="inconclusive", b="regressed"))
    result.allow_inconclusive = True
    assert result.exit_code == EXIT_REGRESSION


def test_an_inconclusive_case_short_of_the_minimum_effect_passes():
    result = _result(a="inconclusive")
    assert not result.verdicts["fam/a=1"].likely_regression and result.exit_code == EXIT_PASS


def test_a_gate_that_could_not_run_exits_2_whatever_its_cases():
    result = _result(a="unchanged")
    result.error = "ref 'nope' does not name a commit"
    assert result.exit_code == EXIT_COULD_NOT_RUN
    SCHEMA.validate(junit_xml(result))
    assert "could not run" in markdown(result).lower()


def test_junit_validates_and_maps_every_outcome():
    result = _result(a="regressed", b="improved", c="unchanged", d="inconclusive", e="could_not_run")
    text = junit_xml(result)
    SCHEMA.validate(text)
    root = ET.fromstring(text.split("\n", 1)[1])
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("5", "1", "1", "1")
    by_name = {tc.get("name"): tc for tc in suite.iter("testcase")}
    assert by_name["fam/a=1"].find("failure").get("type") == Outcome.REGRESSED
    assert by_name["fam/e=1"].find("error").get("type") == Outcome.COULD_NOT_RUN
    assert by_name["fam/d=1"].find("skipped") is not None
    assert by_name["fam/c=1"].find("failure") is None and by_name["fam/c=1"].find("error") is None


def test_schema_rejects_a_broken_report():
    bad = '<testsuites><testsuite name="x" tests="1" failures="0"><testcase name="t"/></testsuite></testsuites>'
    assert not SCHEMA.is_valid(bad)  # no errors count, no classname


def test_markdown_and_json_carry_the_verdicts(tmp_path):
    result = _result(a="regressed", b="could_not_run", c="inconclusive")
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    paths = write_outputs(result, tmp_path / "out", markdown_path=summary)
    text = paths["markdown"].read_text()
    assert "FAIL (regression)" in text and "`fam/a=1`" in text and "**regressed**" in text
    assert "repeats per side would decide it" in text or "will not settle it" in text
    assert summary.read_text().startswith("earlier step\n") and "critpath gate" in summary.read_text()
    data = json.loads(paths["json"].read_text())
    assert data["schema"] == "critpath.gate/1" and data["exit_code"] == EXIT_REGRESSION
    assert data["multiple_comparisons"] == "holm"
    cases = {c["case_id"]: c for c in data["cases"]}
    assert cases["fam/a=1"]["outcome"] == "regressed" and cases["fam/a=1"]["comparison"]["ratio"] > 1.2
    assert "runs not ok" in cases["fam/b=1"]["reason"]
    SCHEMA.validate(str(paths["junit"]))


# -- config ----------------------------------------------------------------------------------------

def test_config_min_effect_precedence(tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text("alpha: 0.02\nstatistic: p99_ns\nmin_effect:\n  default: 0.07\n  families: {allreduce: 0.03}\n"
                    "  cases: {'allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=8,world=2': 0.2}\n")
    config = load_config(path)
    assert config.policy.alpha == 0.02 and config.statistic == "p99_ns"
    assert config.min_effect("allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=8,world=2") == 0.2
    assert config.min_effect("allreduce/size_bytes=16") == 0.03
    assert config.min_effect("selftest/mode=noop") == 0.07


@pytest.mark.parametrize("text,field", [
    ("alpha: high\n", "field alpha"),
    ("alpha: 0.9\n", "field alpha"),
    ("min_effect: {families: {rpc: -1}}\n", "field min_effect.families.rpc"),
    ("min_effect: {cases: {notacase: 0.1}}\n", "field min_effect.cases.notacase"),
    ("min_effect: {everything: 0.1}\n", "field min_effect.everything"),
    ("statistic: 'p50 ns'\n", "field statistic"),
    ("alhpa: 0.01\n", "field alhpa"),
    ("alpha: [\n", "gate.yaml:"),
])
def test_config_errors_name_file_and_field(tmp_path, text, field):
    path = tmp_path / "gate.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path.name) in str(err.value) and field in str(err.value)


NOOP = "selftest/fault_rank=0,mode=noop,world=1"
AR8 = "allreduce/algo=tree,backend=gloo,dtype=float32,size_bytes=8,world=2"


def test_baselines_load_and_errors_name_the_entry(tmp_path):
    path = tmp_path / "base.yaml"
    path.write_text(f"baselines:\n  - {{case_id: '{NOOP}', statistic: p50_ns, value: 120, direction: lower, min_effect: 0.1}}\n"
                    f"  - {{case_id: '{AR8}', statistic: busbw_gbps, value: 2.5, direction: higher}}\n")
    entries = load_baselines(path)
    assert [(b.statistic, b.direction, b.min_effect) for b in entries] == [("p50_ns", "lower", 0.1), ("busbw_gbps", "higher", None)]
    path.write_text(f"baselines:\n  - {{case_id: '{NOOP}', value: 120}}\n  - {{case_id: '{AR8}', value: 1, direction: up}}\n")
    with pytest.raises(ConfigError, match=r"base.yaml:3: field baselines\[1\].direction"):
        load_baselines(path)
    path.write_text(f"baselines:\n  - {{case_id: '{NOOP}'}}\n")
    with pytest.raises(ConfigError, match=r"baselines\[0\].value: missing"):
        load_baselines(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_baselines(tmp_path / "missing.yaml")


def test_direction_is_what_the_family_declares_never_a_guess_from_the_name():
    from harness.core.figures import FigureUnavailable
    from harness.gate.values import default_direction

    ar = "allreduce/algo=tree,backend=gloo,dtype=float32,size_bytes=8,world=2"
    kv = "kv_alloc/allocator=paged,block_tokens=16,budget_gb=80,model=7b,policy=per_block,requests=300,speedup=4.0,trace=azure_conv"
    assert default_direction(ar, "p50_ns") == "lower" and default_direction(ar, "p99_us") == "lower"
    assert default_direction(ar, "busbw_gbps") == "higher"
    # mean_running ends in no unit a suffix rule knows; the declaration says higher is better.
    assert default_direction(kv, "mean_running") == "higher"
    with pytest.raises(FigureUnavailable, match="--direction"):
        default_direction(ar, "imbalance")  # not a figure allreduce declares
    with pytest.raises(FigureUnavailable, match="context, not better or worse"):
        default_direction(kv, "events")
