"""Numbers read from critpath's files (YAML tags, baselines, gate config, model profile, diagnose
criteria, fingerprints, records) held to harness.core.numbers: finite, typed, in a declared range,
and refused naming the file and field."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from harness.accept.verdicts import EXIT_UNVERIFIED
from harness.claims.baselines import BaselineError, load_file
from harness.cli import main
from harness.core import yamlfile
from harness.core.records import MAX_SAMPLES
from harness.core.store import (
    PLANNED,
    ResultsFileError,
    RunDir,
    iter_records,
    load_run,
    planned_digest,
)
from harness.diagnose import rules
from harness.gate.config import (
    N_RESAMPLES_RANGE,
    ConfigError,
    load_baselines,
    load_config,
)
from harness.model.profile import (
    GPUS_PER_NODE_RANGE,
    N_CHANNELS_RANGE,
    ProfileError,
    load_profile,
    shipped_profiles,
)
from harness.nccltests.parse import parse_json, parse_text
from harness.nccltests.values import NcclTestsFormatError
from conftest import derived_record

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
FIXTURES = Path(__file__).parent / "fixtures"


def _refusal(load, path, text: str, error: type) -> str:
    """The message of the ``error`` that ``load(path)`` raises once ``path`` holds ``text``."""
    path.write_text(text)
    with pytest.raises(error) as err:
        load(path)
    return str(err.value)

# -- YAML: an explicit !!int or !!float tag is held to the 1.2 grammar -----------------------------

@pytest.mark.parametrize("text", ["!!float 1:20", "!!int 1:20", "!!int 0b11", "!!int 1_000", "!!float 1_000.5",
                                  "!!int ٣", "!!float ٣", "!!int -0x10", "!!float 0x10", '!!float "5\\n"',
                                  "!!int [1]", "!!float {a: 1}"])
def test_an_explicit_number_tag_outside_yaml_1_2_is_refused_naming_file_and_line(tmp_path, text):
    path = tmp_path / "t.yaml"
    path.write_text(f"x: 1\na: {text}\n")  # !!float 1:20 was 80, !!int 1_000 was 1000, !!int ٣ was 3
    tag = text.split()[0]
    with pytest.raises(yamlfile.YamlFileError, match=rf"^{re.escape(str(path))}:2: {tag} .* is not an? .* by YAML 1.2's core schema"):
        yamlfile.load(path)


@pytest.mark.parametrize("text,value", [("!!int 5", 5), ('!!int "5"', 5), ("!!int +5", 5), ("!!int 0x1F", 31),
                                        ("!!int 0o17", 15), ("!!float 5", 5.0), ("!!float 1.5e3", 1500.0),
                                        ("!!float -.INF", float("-inf")), ('!!float "2.5"', 2.5)])
def test_an_explicit_number_tag_in_yaml_1_2_reads_as_the_untagged_number(tmp_path, text, value):
    path = tmp_path / "t.yaml"
    path.write_text(f"a: {text}\n")
    assert yamlfile.load(path)[0] == {"a": value}


def test_an_explicit_int_tag_keeps_the_leading_zero_refusal(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("a: !!int 017\n")
    with pytest.raises(yamlfile.YamlFileError, match=rf"^{re.escape(str(path))}:1: '017': a number with a leading zero is refused"):
        yamlfile.load(path)


# -- gate config: every number typed and in its declared range --------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("n_resamples: 100.9\n", "field n_resamples: expected an integer, got 100.9"),  # was truncated to 100
    ("n_resamples: true\n", "field n_resamples: expected an integer, got True"),
    (f"n_resamples: {N_RESAMPLES_RANGE[1] + 1}\n", "field n_resamples: 1000001 is outside the range"),
    ("n_resamples: 99\n", "field n_resamples: 99 is outside the range it may take (from 100 to 1000000)"),
    ("confidence: .inf\n", "field confidence: inf is not a finite number"),
    ("confidence: 1\n", "field confidence: 1 is outside the range"),
    ("alpha: true\n", "field alpha: expected a number, got True"),
    ("min_effect:\n  families: {selftest: -.inf}\n", "field min_effect.families.selftest: -inf is not a finite number"),
])
def test_a_gate_config_number_is_typed_and_in_its_declared_range(tmp_path, text, expected):
    path = tmp_path / "gate.yaml"
    message = _refusal(load_config, path, text, ConfigError)
    assert message.startswith(f"{path}:{text.count(chr(10))}: {expected}"), message


def test_a_gate_config_within_its_ranges_loads(tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text(f"n_resamples: {N_RESAMPLES_RANGE[0]}\nconfidence: 0.9\nalpha: 0.05\n")
    policy = load_config(path).policy
    assert (policy.n_resamples, policy.confidence, policy.alpha) == (N_RESAMPLES_RANGE[0], 0.9, 0.05)
    assert type(policy.n_resamples) is int


@pytest.mark.parametrize("value,expected", [(".nan", "nan is not a finite number"), ("-5", "-5 is outside"),
                                            ("0", "must be a number > 0, got 0"), ("true", "expected a number, got True"),
                                            ("'100'", "expected a number, got '100'")])
def test_a_gate_baseline_value_is_a_finite_positive_number(tmp_path, value, expected):
    path = tmp_path / "table.yaml"
    message = _refusal(load_baselines, path, f"baselines:\n  - case_id: '{NOOP}'\n    value: {value}\n", ConfigError)
    assert message.startswith(f"{path}:3: field baselines.0.value: {expected}"), message


# -- claims baselines: every number finite, min_world a count of ranks ---------------------------

@pytest.mark.parametrize("old,new,line,expected", [
    ("    value: 1\n    section: \"1.1\"", "    value: .nan\n    section: \"1.1\"", 16, "claims.0.value: nan is not a finite"),
    ("    value: 1\n    section: \"1.1\"", "    value: -.inf\n    section: \"1.1\"", 16, "claims.0.value: -inf is not a finite"),
    ("    value: 1\n    section: \"1.1\"", "    before: 1.5\n    after: .inf\n    section: \"1.1\"", 17,
     "claims.0.after: inf is not a finite"),
    ("{factor: 1, why", "{factor: .inf, why", 24, "claims.0.measure.tolerance.factor: inf is not a finite"),
    ("select: {algo: ring}", "select: {size_bytes: [1, .nan]}", 38, "claims.1.measure.select.size_bytes.1: nan is not a finite"),
    ("      compare: bound\n      tolerance: {factor: 1, why: \"a fixture: exact figures\"}\n  - id",
     "      compare: bound\n      min_world: 2.0\n      tolerance: {factor: 1, why: \"a fixture: exact figures\"}\n  - id",
     24, "claims.0.measure.min_world: expected an integer, got 2.0"),
    ("      compare: bound\n      tolerance: {factor: 1, why: \"a fixture: exact figures\"}\n  - id",
     "      compare: bound\n      min_world: 70000\n      tolerance: {factor: 1, why: \"a fixture: exact figures\"}\n  - id",
     24, "claims.0.measure.min_world: 70000 is outside the range"),
])
def test_a_baseline_number_that_is_not_finite_is_refused_naming_file_line_and_field(tmp_path, old, new, line, expected):
    text = FIXTURES.joinpath("baselines_fixture.yaml").read_text()
    assert old in text
    path = tmp_path / "claims.yaml"
    message = _refusal(load_file, path, text.replace(old, new, 1), BaselineError)
    assert message.startswith(f"{path}:{line}: field {expected}"), message


def test_finite_baseline_numbers_still_load(tmp_path):
    text = FIXTURES.joinpath("baselines_fixture.yaml").read_text()
    path = tmp_path / "claims.yaml"
    path.write_text(text.replace("select: {algo: ring}", "select: {size_bytes: [8, 1048576]}")
                    .replace("{factor: 1, why", "{factor: 1.5, why"))
    claims = load_file(path)
    assert claims[1].measure.select == {"size_bytes": [8, 1048576]} and claims[0].measure.tolerance.factor == 1.5


# -- model hardware profile: unknown keys refused, every number in its declared range -------------

def _model_profile(extra: str = "", tier: str = "kind: nvlink, alpha_us: 1, bandwidth_gbytes_s: 10",
                   nccl: str = "intra_hw: nvlink, n_channels: 8, speed_intra_gbytes_s: 24, speed_inter_gbytes_s: 12") -> str:
    return f"name: x\ngpus_per_node: 8\nintra: nv\ntiers:\n  nv: {{{tier}}}\nnccl: {{{nccl}}}\n{extra}"


@pytest.mark.parametrize("text,line,expected", [
    (_model_profile("gpus_per_nodes: 4\n"), 7, "field gpus_per_nodes: unknown key 'gpus_per_nodes'; known: "),
    (_model_profile(tier="kind: nvlink, alpha_us: 1, bandwidth_gbytes_s: 10, alpha: 5"), 5,
     "field tiers.nv.alpha: unknown key 'alpha'; known: alpha_us, bandwidth_gbytes_s, kind, source; did you mean"),
    (_model_profile(nccl="intra_hw: nvlink, n_channels: 8, speed_intra_gbytes_s: 24, speed_inter_gbytes_s: 12, "
                         "nchannels: 4"), 6, "field nccl.nchannels: unknown key 'nchannels'"),
    (_model_profile().replace("gpus_per_node: 8", "gpus_per_node: 9223372036854775807"), 2,
     f"field gpus_per_node: 9223372036854775807 is outside the range it may take (from 1 to {GPUS_PER_NODE_RANGE[1]})"),
    (_model_profile(nccl="intra_hw: nvlink, n_channels: 9223372036854775807, speed_intra_gbytes_s: 24, "
                         "speed_inter_gbytes_s: 12"), 6, f"field nccl.n_channels: 9223372036854775807 is outside the "
                                                         f"range it may take (from 1 to {N_CHANNELS_RANGE[1]})"),
    (_model_profile(tier="kind: nvlink, alpha_us: 1e300, bandwidth_gbytes_s: 10"), 5,
     "field tiers.nv.alpha_us: 1e+300 is outside the range"),
    (_model_profile(tier="kind: nvlink, alpha_us: 1, bandwidth_gbytes_s: 1e-300"), 5,
     "field tiers.nv.bandwidth_gbytes_s: 1e-300 is outside the range"),
    (_model_profile("gamma_s_per_byte: 1e300\n"), 7, "field gamma_s_per_byte: 1e+300 is outside the range"),
    (_model_profile(nccl="intra_hw: nvlink, n_channels: 8.0, speed_intra_gbytes_s: 24, speed_inter_gbytes_s: 12"),
     6, "field nccl.n_channels: expected an integer, got 8.0"),
    (_model_profile(nccl="intra_hw: nvlink, n_channels: 8, speed_intra_gbytes_s: 24, speed_inter_gbytes_s: 12, "
                         "comp_cap: -9223372036854775808"), 6, "field nccl.comp_cap: -9223372036854775808 is outside"),
    (_model_profile().replace("gpus_per_node: 8", "gpus_per_node: true"), 2,
     "field gpus_per_node: expected an integer, got True"),
])
def test_a_model_profile_refuses_an_unknown_key_and_a_number_out_of_its_range(tmp_path, text, line, expected):
    path = tmp_path / "hw.yaml"
    message = _refusal(load_profile, path, text, ProfileError)
    assert message.startswith(f"{path}:{line}: {expected}"), message


def test_a_model_profile_within_its_ranges_loads_and_every_shipped_one_still_does(tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text(_model_profile())
    profile = load_profile(path)
    assert profile.gpus_per_node == 8 and profile.nccl.n_channels == 8 and profile.tiers["nv"].alpha_us == 1.0
    assert all(load_profile(name).tiers for name in shipped_profiles())


# -- diagnose criteria: the threshold by parse_float, patterns ASCII --------------------------------

RULE = """schema: critpath.diagnose/1
rules:
  busbw_low:
    function: variance
    criteria: "{criteria}"
    verdict: suspect
    categories: bandwidth
    metrics: ['{metric}']
"""


@pytest.mark.parametrize("criteria,expected", [
    ("< -1e400", "'-1e400' is not a finite number"),  # was -inf: no value is below it, the rule never fires
    ("> 1e400", "'1e400' is not a finite number"),
    ("> ٣", "expected a number"),  # was 3
    ("> 1_0", "expected a number"),
    ("> +0.5", "expected a number"),
])
def test_a_criteria_threshold_is_a_finite_ascii_number_named_by_file_line_and_field(tmp_path, criteria, expected):
    path = tmp_path / "rules.yaml"
    message = _refusal(rules.load, path, RULE.format(criteria=criteria, metric=".*/busbw_gbps"), rules.RuleFileError)
    assert message.startswith(f"{path}:5: field rules.busbw_low.criteria: {expected}"), message


@pytest.mark.parametrize("criteria", ["<<", "< 0.9 x median", "0.9"])
def test_a_criteria_that_is_no_comparison_is_still_named_as_such(tmp_path, criteria):
    path = tmp_path / "rules.yaml"
    message = _refusal(rules.load, path, RULE.format(criteria=criteria, metric=".*/busbw_gbps"), rules.RuleFileError)
    assert message.startswith(f"{path}:5: field rules.busbw_low.criteria: ") and "is not a comparison" in message


def test_a_criteria_in_the_grammar_reads_its_threshold_and_a_metric_digit_is_ascii(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(RULE.format(criteria="<=\t-.5", metric=r"allreduce/size_bytes=\d+"))
    (rule,) = rules.load(path)
    assert (rule.criteria.op, rule.criteria.threshold) == ("<=", -0.5)
    assert rule.matches("allreduce/size_bytes=8") and not rule.matches("allreduce/size_bytes=٣")


# -- fingerprint.json: its types checked once, where a run is loaded -----------------------------

ACCEPT_PROFILE = f"""schema: critpath.accept/1
name: t
world: 1
fingerprint: {{gpu_count: 0}}
checks:
  - name: noop
    case: "{NOOP}"
    statistic: p50_us
    max: 1000000
    source: a test
"""


def _run(path: Path, fingerprint: dict) -> Path:
    """A finished run of one passing selftest record, with ``fingerprint`` as its fingerprint.json."""
    run = RunDir(path, "r")
    run.append(derived_record(NOOP, np.full(200, 1000, dtype=np.int64), run_id="r"))
    run.write_fingerprint(fingerprint)
    run.write_meta({"schema": "critpath.run/1", "run_id": "r", "state": "finished", "cases_total": 1,
                    PLANNED: planned_digest([NOOP])})
    return path


@pytest.mark.parametrize("fingerprint,field", [
    ({"world": True}, "field world: must be an integer >= 1, not True"),  # passed a pin on world 1
    ({"world": 1.0}, "field world: must be an integer >= 1, not 1.0"),
    ({"gpus": "x"}, "field gpus: must be a mapping, not 'x'"),  # AttributeError in report and accept
    ({"gpus": {"count": True}}, "field gpus.count: must be an integer >= 0, not True"),
    ({"gpus": {"devices": [{"index": 0, "ecc_corrected_volatile": "9"}]}},
     "field gpus.devices.0.ecc_corrected_volatile: must be an integer >= 0, not '9'"),
    ({"libraries": {"numpy": 2}}, "field libraries.numpy: must be a string, not 2"),
    ({"git": "abc"}, "field git: must be a mapping, not 'abc'"),
    ({"layout": {"ranks_per_node": "2"}}, "field layout.ranks_per_node: must be an integer >= 1 or a list of"),
])
def test_a_wrongly_typed_fingerprint_is_refused_by_the_one_loader_naming_file_and_field(tmp_path, fingerprint, field):
    path = _run(tmp_path / "bad", {"host": "h", **fingerprint})
    with pytest.raises(ResultsFileError) as err:
        load_run(path)
    assert str(err.value).startswith(f"{path / 'fingerprint.json'}: {field}"), str(err.value)


@pytest.mark.parametrize("fingerprint,field", [({"world": True}, "field world"), ({"gpus": "x"}, "field gpus")])
def test_report_refuses_and_accept_cannot_verify_a_run_whose_fingerprint_is_wrongly_typed(tmp_path, capsys,
                                                                                        fingerprint, field):
    run = _run(tmp_path / "bad", {"host": "h", **fingerprint})
    profile = tmp_path / "p.yaml"
    profile.write_text(ACCEPT_PROFILE)
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 2
    assert f"{run / 'fingerprint.json'}: {field}: must be" in capsys.readouterr().err
    code = main(["accept", "--profile", str(profile), "--run", str(run), "--no-report", "--out", str(tmp_path / "a")])
    out = capsys.readouterr().out
    assert code == EXIT_UNVERIFIED and f"the run: {run / 'fingerprint.json'}: {field}: must be" in out, out
    assert not (tmp_path / "a" / "acceptance.json").exists()


def test_every_fingerprint_critpath_writes_passes_the_check(monkeypatch):
    import sys

    import fake_nvml
    import pynvml

    from harness.core import fingerprintfile
    from harness.run import fingerprint

    healthy = fake_nvml.h100(0)
    unsupported = fake_nvml.h100(1, nvmlDeviceGetTotalEccErrors=fake_nvml.error(), nvlinks=fake_nvml.error(),
                                 nvmlDeviceGetMaxClockInfo=fake_nvml.error(pynvml.NVML_ERROR_NO_PERMISSION))
    for gpus in ([healthy, unsupported], []):
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.module(gpus))
        written = fingerprint.collect("gloo", 2, "local")
        assert len(written["gpus"].get("devices", [])) == len(gpus)
        fingerprintfile.check(written)
    layout = fingerprint.node_layout([fingerprint.rank_identity(r, r, {}) for r in range(2)])
    fingerprintfile.check(fingerprint.collect("gloo", 2, "joined", layout))


def test_a_well_typed_fingerprint_is_accepted_and_judged(tmp_path, capsys):
    run = _run(tmp_path / "good", {"host": "h", "launch": "local", "world": 1, "gpus": {"present": False, "count": 0, "reason": "none"},
                                   "layout": {"nodes": 1, "ranks_per_node": [1], "node_keys": ["h"], "hosts": ["h"],
                                              "node_of_rank": [0]}})
    profile = tmp_path / "p.yaml"
    profile.write_text(ACCEPT_PROFILE)
    assert main(["accept", "--profile", str(profile), "--run", str(run), "--no-report"]) == 0, capsys.readouterr().out


# -- records: every number finite, plan within what --iters may ask ------------------------------

def _results_line(tmp_path: Path, edit) -> Path:
    """A results file of one record as critpath writes it, after ``edit`` of its dict."""
    data = derived_record(NOOP, np.full(200, 1000, dtype=np.int64), run_id="r").to_dict()
    edit(data)
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(data) + "\n")  # json.dumps writes Infinity and NaN, as a hand edit may
    return path


@pytest.mark.parametrize("edit,expected", [
    (lambda d: d.update(wall_s=float("inf")), "field wall_s: inf is not a finite number"),  # was read
    (lambda d: d.update(wall_s=float("nan")), "field wall_s: nan is not a finite number"),
    (lambda d: d["plan"].update(iters=10**18), f"field plan.iters: {10**18} is outside the range it may take "
                                               f"(from 1 to {MAX_SAMPLES})"),  # was read
    (lambda d: d["plan"].update(iters=MAX_SAMPLES + 1), "field plan.iters: 1000001 is outside the range"),
    (lambda d: d["plan"].update(warmup=MAX_SAMPLES + 1), "field plan.warmup: 1000001 is outside the range"),
    (lambda d: d["plan"].update(iters=200.0), "field plan.iters: expected an integer, got 200.0"),
    (lambda d: d.update(world=1.0), "field world: expected an integer, got 1.0"),
    (lambda d: d.update(family_version=1.0), "field family_version: expected an integer, got 1.0"),
    (lambda d: d["check"].update(checked=1.0), "field check.checked: expected an integer, got 1.0"),
    (lambda d: d["summary"].update(mean_ns=float("inf")), "field summary.mean_ns: inf is not a finite number"),
    (lambda d: d["metrics"].update(x=float("-inf")), "field metrics.x: -inf is not a finite number"),
    (lambda d: d.update(status="failed", samples_ns=[], summary=None, metrics={}, check=None,
                        error={"kind": "x", "message": "y", "rank": -1}), "field error.rank: -1 is outside the range"),
])
def test_a_record_number_that_is_not_finite_or_past_its_bound_is_refused_naming_line_and_field(tmp_path, edit,
                                                                                             expected):
    path = _results_line(tmp_path, edit)
    with pytest.raises(ResultsFileError) as err:
        list(iter_records(path))
    assert str(err.value).startswith(f"{path}:1: {expected}"), str(err.value)


def test_a_record_at_its_bounds_is_read(tmp_path):
    # plan.iters is the count of the samples it holds: at the bound, MAX_SAMPLES of them
    data = derived_record(NOOP, np.full(MAX_SAMPLES, 1000, dtype=np.int64), run_id="r",
                          plan={"iters": MAX_SAMPLES, "warmup": MAX_SAMPLES}).to_dict()
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(data) + "\n")
    (record,) = iter_records(path)
    assert record.plan == {"iters": MAX_SAMPLES, "warmup": MAX_SAMPLES} and record.wall_s == data["wall_s"]
    assert len(record.samples_ns) == MAX_SAMPLES


@pytest.mark.parametrize("old,new,expected", [
    ("warmup iters: 5 iters: 20 ", f"warmup iters: 5 iters: {MAX_SAMPLES + 1} ", "iters"),
    ("warmup iters: 5 iters: 20 ", f"warmup iters: {MAX_SAMPLES + 1} iters: 20 ", "warmup iters"),
])
def test_an_nccl_tests_log_of_more_iterations_than_a_record_holds_is_refused_at_its_header(old, new, expected):
    text = (FIXTURES / "nccl_tests" / "all_reduce_h100.txt").read_text()
    assert old in text
    with pytest.raises(NcclTestsFormatError, match=rf"^log.txt:3: {expected}: {MAX_SAMPLES + 1} is more than "
                                                   rf"{MAX_SAMPLES}, the most iterations"):
        parse_text(text.replace(old, new).splitlines(), "log.txt")
    parse_text(text.replace(old, new.replace(str(MAX_SAMPLES + 1), str(MAX_SAMPLES))).splitlines(), "log.txt")


# a row's actual_iterations is held to config.iterations (tests/test_outside_artefacts.py), and so to its bound
@pytest.mark.parametrize("old,new,field", [('"iterations":20', f'"iterations":{MAX_SAMPLES + 1}', "config.iterations"),
                                           ('"warmup_iters":5', f'"warmup_iters":{MAX_SAMPLES + 1}', "config.warmup_iters")])
def test_an_nccl_tests_json_of_more_iterations_than_a_record_holds_is_refused_naming_the_field(old, new, field):
    text = (FIXTURES / "nccl_tests" / "all_reduce_h100.json").read_text()
    assert old in text
    with pytest.raises(NcclTestsFormatError, match=rf"^out.json: (?:field )?{field}: {MAX_SAMPLES + 1} is more than "
                                                   rf"{MAX_SAMPLES}, the most iterations"):
        parse_json(text.replace(old, new, 1), "out.json")
