"""Every input bounded before it is parsed, every numeric option finite and in range, typos refused.

Each test names the hostile input it was written for; on the code before it, each failed (a
traceback, a hang, memory without bound, or a silent default)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.accept.profile import ProfileError, load_profile
from harness.cli import main
from harness.core import yamlfile
from harness.core.options import UsageError
from harness.core.store import (
    MAX_RECORD_BYTES,
    ResultsFileError,
    iter_records,
    read_json,
)
from harness.diagnose import rules
from harness.gate import schedule
from harness.gate.config import ConfigError, load_baselines, load_config
from harness.gate.schedule import Plan, Schedule, Spend, fits
from harness.gate.sides import RoundResult
from harness.gate.trees import BASE, CANDIDATE
from harness.run import timing
from conftest import derived_record

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
ROOT = Path(__file__).resolve().parents[1]

PROFILE = """schema: critpath.accept/1
name: t
world: 1
checks:
  - name: noop
    case: "{case}"
    statistic: p50_us
    {bound}
    source: a test
"""


def _profile(tmp_path, bound: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE.format(case=NOOP, bound=bound))
    return path


def _nested(depth: int) -> str:
    return "a: " + "[" * depth + "]" * depth + "\n"


# -- 17: YAML nested 400 deep -------------------------------------------------------------------

@pytest.mark.parametrize("reader", [load_profile, load_config, load_baselines, rules.load])
def test_yaml_nested_400_deep_is_refused_with_its_line_in_every_reader(tmp_path, reader):
    path = tmp_path / "deep.yaml"
    path.write_text("x: 1\n" + _nested(400))
    with pytest.raises(ValueError) as err:  # each reader's own error; all are ValueErrors
        reader(path)
    assert f"{path}:2: nested {yamlfile.MAX_DEPTH + 1} deep; at most {yamlfile.MAX_DEPTH}" in str(err.value)


def test_yaml_within_the_depth_limit_still_loads(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(_nested(yamlfile.MAX_DEPTH - 1))  # the mapping is the first level
    expected: list = []
    for _ in range(yamlfile.MAX_DEPTH - 2):
        expected = [expected]
    assert yamlfile.load(path)[0] == {"a": expected}


# -- 8: thresholds that are not numbers -----------------------------------------------------------

@pytest.mark.parametrize("bound", ["max: .inf", "min: -.inf", "max: .nan", "min: .NaN"])
def test_a_threshold_that_is_not_finite_is_refused_at_load_naming_file_line_field(tmp_path, bound):
    path = _profile(tmp_path, bound)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    key = bound.split(":")[0]
    assert f"{path}:8: field checks.0.{key}:" in str(err.value) and "finite" in str(err.value)


def test_a_float_without_a_dot_is_a_number_and_quoted_text_is_refused_naming_the_line(tmp_path):
    assert load_profile(_profile(tmp_path, "min: 4e11"))["checks"][0]["min"] == 4e11
    assert load_profile(_profile(tmp_path, "max: 1e-6"))["checks"][0]["max"] == 1e-6
    path = _profile(tmp_path, 'min: "4e11"')
    with pytest.raises(ProfileError, match=r"profile.yaml:8: field checks.0.min: expected a number, got '4e11'"):
        load_profile(path)


def test_the_yaml_float_resolver_leaves_other_scalars_alone(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("a: 4e11\nb: '1e3'\nc: 12\nd: 1.5\ne: abc1e3\nf: 1e\n")
    assert yamlfile.load(path)[0] == {"a": 4e11, "b": "1e3", "c": 12, "d": 1.5, "e": "abc1e3", "f": "1e"}


# -- 9: configuration typos -------------------------------------------------------------------------

@pytest.mark.parametrize("text,line,expected", [
    ("min_effect:\n  families:\n    allreduec: 0.1\n", 3,
     "field min_effect.families.allreduec: unknown family 'allreduec'; known: allreduce"),
    ("min_effect:\n  families:\n    nosuchfamily: 0.1\n", 3, "unknown family 'nosuchfamily'"),
    ("min_effect:\n  cases:\n    'selftest/fault_rank=0,mdoe=noop,world=1': 0.2\n", 3, "has no key 'mdoe'"),
    ("min_effect:\n  cases:\n    'selftest/mode=noop': 0.2\n", 3, "missing key 'fault_rank'"),
    ("alpha: 0.01\nconfidnce: 0.9\n", 2, "unknown key 'confidnce'; known: alpha, confidence"),
    ("min_effect:\n  defualt: 0.1\n", 2, "did you mean 'default'?"),
    ("min_effect:\n  default: .inf\n", 2, "field min_effect.default: inf is not a finite number"),
    ("alpha: .nan\n", 1, "field alpha: nan is not a finite number"),
])
def test_gate_config_typos_are_refused_naming_line_and_what_is_known(tmp_path, text, line, expected):
    path = tmp_path / "gate.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}:{line}: ") and expected in str(err.value), str(err.value)


def test_a_gate_config_typo_exits_2_before_any_worktree(tmp_path, capsys):
    path = tmp_path / "gate.yaml"
    path.write_text("min_effect:\n  families: {nosuchfamily: 0.5}\n")
    code = main(["gate", "--repo", str(tmp_path), "--config", str(path), "--case", NOOP, "--out", str(tmp_path / "o")])
    assert code == 2
    assert "gate.yaml:2: field min_effect.families.nosuchfamily: unknown family" in json.loads(
        (tmp_path / "o" / "gate.json").read_text())["error"]


def test_a_baseline_table_refuses_an_unknown_key_and_an_infinite_value_naming_the_line(tmp_path):
    path = tmp_path / "table.yaml"
    path.write_text(f"baselines:\n  - case_id: '{NOOP}'\n    value: 100\n    statistc: p50_ns\n")
    with pytest.raises(ConfigError, match=r"table.yaml:4: field baselines.0.statistc: unknown key .*did you mean 'statistic'"):
        load_baselines(path)
    path.write_text(f"baselines:\n  - case_id: '{NOOP}'\n    value: .inf\n")
    with pytest.raises(ConfigError, match=r"table.yaml:3: field baselines.0.value: inf is not a finite number"):
        load_baselines(path)


def test_profiles_and_rule_files_name_an_unknown_key_with_its_line_and_a_near_match(tmp_path):
    path = _profile(tmp_path, "max: 3\n    maxx: 4")
    with pytest.raises(ProfileError, match=r"profile.yaml:9: field checks.0.maxx: unknown key 'maxx'.*did you mean 'max'"):
        load_profile(path)
    path = tmp_path / "rules.yaml"
    path.write_text("schema: critpath.diagnose/1\nrules:\n  r:\n    function: variance\n    criteria: '< -0.1'\n"
                    "    verdict: suspect\n    categories: bw\n    metrics: ['.*']\n    metircs: [x]\n")
    with pytest.raises(rules.RuleFileError, match=r"rules.yaml:9: field rules.r.metircs: unknown key.*'metrics'"):
        rules.load(path)


# -- 11: numeric options, and the gate's budget -------------------------------------------------

@pytest.mark.parametrize("argv,option", [
    (["gate", "--budget", "nan"], "--budget"), (["gate", "--budget", "inf"], "--budget"),
    (["gate", "--budget", "1e400"], "--budget"), (["gate", "--budget", "1e9"], "--budget"),
    (["gate", "--window", "nan"], "--window"), (["gate", "--window", "inf"], "--window"),
    (["gate", "--rounds", "1000000000"], "--rounds"), (["gate", "--iters", "1000000000"], "--iters"),
    (["gate", "--max-pairs", "0"], "--max-pairs"), (["gate", "--alpha", "nan"], "--alpha"),
    (["gate", "--alpha", "0.9"], "--alpha"), (["gate", "--min-effect", "inf"], "--min-effect"),
    (["gate", "--repeats", "1"], "--repeats"), (["compare", "a", "b", "--min-effect", "-1"], "--min-effect"),
    (["run", "--iters", "1000000000"], "--iters"), (["run", "--warmup", "1e3"], "--warmup"),
    (["run", "--world", "100000000"], "--world"), (["gate-power", "--trials", "-1"], "--trials"),
    (["gate-power", "--budget", "inf"], "--budget"), (["gate-power", "--rounds-sweep", "1,0"], "--rounds-sweep"),
    (["gate-power", "--slowdowns", "uniform:nan"], "--slowdowns"), (["moe-sim", "--tokens", "1000000000000"], "--tokens"),
    (["moe-sim", "--worlds", "8,0"], "--worlds"), (["moe-sim", "--window-ms", "nan"], "--window-ms"),
    (["moe-sim", "--planner-us", "inf"], "--planner-us"), (["model", "--ranks", "2,3,...,1000000000000"], "--ranks"),
])
def test_a_numeric_option_that_is_not_finite_or_out_of_range_is_refused_by_the_parser(argv, option, capsys):
    started = time.perf_counter()
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"argument {option}" in capsys.readouterr().err
    assert time.perf_counter() - started < 10  # refused before anything is built


class _FakeSide:
    """A worker whose start and rounds cost fixed seconds on the schedule's fake clock."""

    START_S, ROUND_S = 1.0, 0.5

    def __init__(self, tree, side, number, run_dir, run_args, extra_env=None) -> None:
        self.side, self.number, self.run_dir = side, number, run_dir

    def start(self):
        _CLOCK.now += self.START_S / 2  # both sides start: a generation's start is START_S

    def await_ready(self, timeout_s):
        pass

    def prepare(self, ids):
        pass

    def await_prepared(self, timeout_s):
        pass

    def run_round(self, number, cases, timeout_s):
        _CLOCK.now += self.ROUND_S
        records = {c.case_id: derived_record(c.case_id, [1000 + number] * 20) for c in cases}
        return RoundResult(self.side, self.number, number, self.run_dir, self.ROUND_S, records)

    def stop(self):
        pass

    def kill(self):
        pass


_CLOCK = SimpleNamespace(now=0.0)


def _fake_schedule(monkeypatch, tmp_path, budget_s: float, rounds: int) -> schedule.ScheduleResult:
    monkeypatch.setattr(schedule, "WorkerSide", _FakeSide)
    _CLOCK.now = 0.0
    undecided = SimpleNamespace(outcome=None)
    plan = Plan(budget_s=budget_s, rounds=rounds)
    gate = Schedule([NOOP], {BASE: None, CANDIDATE: None}, "worker", plan, tmp_path, "mean_ns",
                    lambda tau, pairs, final: {c: undecided for c in pairs}, clock=lambda: _CLOCK.now)
    return gate.run()


def test_budget_5_with_40_rounds_a_pair_ends_within_the_budget_and_records_the_cut(monkeypatch, tmp_path):
    # One generation: 1 s to start, 1 s a round pair. 40 rounds would take 41 s.
    result = _fake_schedule(monkeypatch, tmp_path, budget_s=5.0, rounds=40)
    assert result.wall_s <= 5.0
    assert result.stopped == "budget" and result.generations == 1
    assert result.cut == [{"generation": 0, "rounds_run": 4, "rounds_planned": 40, "elapsed_s": 5.0,
                           "round_pair_s": 1.0}]
    assert len(result.tracks[NOOP].pairs) == 1 and len(result.tracks[NOOP].values[BASE][0]) == 4
    assert result.summary()["cut"] == result.cut


def test_a_generation_that_fits_is_not_cut(monkeypatch, tmp_path):
    result = _fake_schedule(monkeypatch, tmp_path, budget_s=9.0, rounds=3)  # 4 s a generation: two fit
    assert (result.generations, result.cut, result.stopped) == (2, [], "budget")
    assert result.wall_s == 8.0


def test_fits_and_the_spend_estimates():
    assert fits(4.0, None, 5.0)  # nothing measured yet: the first piece runs
    assert fits(4.0, 1.0, 5.0) and not fits(4.1, 1.0, 5.0)
    spend = Spend()
    assert spend.next_generation_s() is None and spend.next_round_pair_s() is None
    spend.start_s.append(2.0)
    spend.round_pair_s += [9.0, 1.0, 1.0, 1.2]  # the median of the last three: a slow first round drops out
    assert spend.next_round_pair_s() == 1.0 and spend.next_generation_s() == 3.0


@pytest.mark.slow
def test_a_real_gate_with_budget_5_and_40_rounds_ends_near_its_budget(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "harness", repo / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "b"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    started = time.perf_counter()
    main(["gate", "--repo", str(repo), "--base", "HEAD", "--case", NOOP, "--budget", "5", "--rounds", "40",
          "--out", str(tmp_path / "out")])
    wall_s = time.perf_counter() - started
    data = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert wall_s < 5 + 30, wall_s  # the budget plus one generation, generously (it took 96 s before)
    assert data["extra"]["cut"] and data["extra"]["cut"][0]["rounds_planned"] == 40
    assert any("cut" in w for w in data["warnings"])


# -- 12: readers bounded before they read ---------------------------------------------------------

@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_at_once_by_every_reader(tmp_path, fifo):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").symlink_to(fifo)
    (run / "run.json").symlink_to(fifo)
    with pytest.raises(ResultsFileError, match="a FIFO, not a regular file"):
        list(iter_records(run / "results.jsonl"))
    with pytest.raises(ResultsFileError, match="a FIFO, not a regular file"):
        read_json(run / "run.json")
    for reader in (load_profile, load_config, rules.load):
        with pytest.raises(ValueError, match="a FIFO, not a regular file"):
            reader(fifo)


@pytest.mark.timeout(20)
def test_results_pointing_at_dev_zero_are_refused_not_read(tmp_path):
    (tmp_path / "results.jsonl").symlink_to("/dev/zero")
    with pytest.raises(ResultsFileError, match="a character device, not a regular file"):
        list(iter_records(tmp_path / "results.jsonl"))


def test_a_results_file_is_read_a_line_at_a_time(tmp_path):
    path = tmp_path / "results.jsonl"
    record = derived_record(NOOP, [100] * 10)
    with open(path, "wb") as f:
        f.write((record.to_json() + "\n").encode())
        for _ in range(200):
            f.write(b" " * 100_000 + b"\n")  # 20 MB of blank lines
    tracemalloc.start()
    try:
        assert [r.case_id for r in iter_records(path)] == [NOOP]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak  # the whole file was 20 MB, and its split list far more


def test_a_line_longer_than_a_record_is_named_and_the_next_line_still_read(tmp_path):
    path = tmp_path / "results.jsonl"
    record = derived_record(NOOP, [100] * 10)
    path.write_bytes(b"x" * (MAX_RECORD_BYTES + 1) + b"\n" + (record.to_json() + "\n").encode())
    skipped: list = []
    assert [r.case_id for r in iter_records(path, skip_invalid=True, skipped=skipped)] == [NOOP]
    assert skipped[0].line == 1 and f"more than {MAX_RECORD_BYTES} bytes" in skipped[0].reason


def test_a_yaml_file_above_its_limit_is_refused_naming_the_limit(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as f:
        f.truncate(yamlfile.MAX_YAML_BYTES + 1)
    with pytest.raises(yamlfile.YamlFileError, match=f"a YAML file is at most {yamlfile.MAX_YAML_BYTES} bytes"):
        yamlfile.load(path)


# -- 14: --iters far beyond a record ----------------------------------------------------------------

def test_time_each_holds_only_what_it_timed(monkeypatch):
    done = {"n": 0}

    def step(_):
        done["n"] += 1
        if done["n"] > 1000:  # the case's timeout, as the supervisor's kill would end it
            raise TimeoutError

    tracemalloc.start()
    try:
        with pytest.raises(TimeoutError):
            timing.time_each(step, None, 50_000_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak  # a list for 50 million samples is 400 MB
    assert list(timing.time_each(lambda _: None, None, timing.CHUNK_ITERS * 2 + 3) >= 0).count(True) == \
        timing.CHUNK_ITERS * 2 + 3
    assert timing.time_each(lambda _: None, None, 0).shape == (0,)


# -- 15: a rule's regex that backtracks -------------------------------------------------------------

@pytest.mark.parametrize("pattern", [r"^(([a-z_/0-9]+)+)+!$", "(a+)+", "(x*y)*", "(a|b+)*", "(?:a{2,3})+", "(ab?)+", "(.|.|.|.)*Z", "(?:.|.|.|.)*Z", "(?:ab)*"])
def test_a_rule_regex_with_a_quantifier_inside_a_quantifier_is_refused_naming_the_line(tmp_path, pattern):
    path = tmp_path / "rules.yaml"
    path.write_text("schema: critpath.diagnose/1\nrules:\n  r:\n    function: failure_check\n    verdict: failed\n"
                    f"    categories: c\n    metrics:\n      - '{pattern}'\n")
    started = time.perf_counter()
    with pytest.raises(rules.RuleFileError, match=r"rules.yaml:8: field rules.r.metrics.0: .* repeats a group"):
        rules.load(path)
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("pattern", [".*/busbw_gbps", "allreduce/.*", "p(50|99)_us", "(a+)?", "a{3}/.*_us",
                                     "(?:allreduce|allgather)/(?:p50|p99)_us", ".*/p99_us|.*/p999_us"])
def test_ordinary_rule_regexes_still_load(pattern):
    assert rules._metric_pattern(pattern).pattern == pattern


def test_a_name_longer_than_any_case_id_matches_no_rule():
    rule = rules.Rule("r", "failure_check", "c", "f:1", "failed", metrics=(rules._metric_pattern(".*"),))
    assert rule.matches("a" * rules.MAX_MATCHED_CHARS) and not rule.matches("a" * (rules.MAX_MATCHED_CHARS + 1))


# -- 20: garbage in the launcher's environment --------------------------------------------------------

@pytest.mark.parametrize("env,expected", [
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc': expected an integer in [0, 1]"),
    ({"SLURM_PROCID": "x", "SLURM_NTASKS": "2"}, "SLURM_PROCID='x': expected an integer in [0, 1]"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "many"}, "SLURM_NTASKS='many': expected an integer"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "set MASTER_ADDR and MASTER_PORT"),
    ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "99999999"},
     "MASTER_PORT='99999999': expected an integer in [1, 65535]"),
    ({"RANK": "3", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK='3': expected an integer in [0, 1]"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0': expected an integer in [1, 65536]"),
    # torch's env:// waited out its timeout on a MASTER_ADDR that names no host, without a word
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "-oProxy", "MASTER_PORT": "1"},
     "MASTER_ADDR='-oProxy': expected a host name or an IP address"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a b", "MASTER_PORT": "1"}, "MASTER_ADDR='a b': expected a host"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "[::1", "MASTER_PORT": "1"}, "MASTER_ADDR='[::1': expected a host"),
    # an IPv6 zone took any text: an option, escape sequences, 5,000 characters
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "::1%-oProxy x", "MASTER_PORT": "1"}, "MASTER_ADDR="),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "fe80::1%\x1b]0;x\x07", "MASTER_PORT": "1"}, "MASTER_ADDR="),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "fe80::1%" + "a" * 5000, "MASTER_PORT": "1"}, "MASTER_ADDR="),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "[1.2.3.4]", "MASTER_PORT": "1"}, "MASTER_ADDR='[1.2.3.4]'"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "999.999.999.999", "MASTER_PORT": "1"}, "MASTER_ADDR='999."),
    # a zone belongs to IPv6 only: torch retried '127.0.0.1%0' for two minutes
    *(({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": host, "MASTER_PORT": "1"},
       f"MASTER_ADDR={host!r}: expected a host name or an IP address")
      for host in ("127.0.0.1%0", "1.2.3.4%eth0", "[1.2.3.4%0]", "::1%.", "::1%..", "::1%-oProxy",
                   # inet_aton's numeric spellings are addresses to some readers and names to others
                   "0x7f000001", "0X7F.1")),
])
def test_a_garbage_launcher_environment_is_one_line_naming_the_variable(env, expected):
    from harness.run.joined import joined_rank

    with pytest.raises(UsageError) as err:
        joined_rank(env)
    assert str(err.value).startswith(expected.split(":")[0]) and expected in str(err.value)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "node-01", "node-01.cluster.local.", "h", "10.0.0.2",
                                  "fe80::1%eth0", "[fe80::1%ib0.8001]", "fe80::1%2", "3com.example"])
def test_a_master_addr_that_is_a_host_is_taken(host):
    from harness.run.launchenv import env_host

    assert env_host({"MASTER_ADDR": host}, "MASTER_ADDR") == host


@pytest.mark.parametrize("value,expected", [
    ("garbage", "not JSON"), ("[]", "expected a JSON object"), ('{"x/y=1": [1, 0]}', "two integers in [1, "),
    ('{"x/y=1": [1e400, 1]}', "'1e400' is not a finite number"), ("[" * 100_000, "nested too deep"),
])
def test_a_garbage_slowdown_variable_is_a_usage_error_naming_it(value, expected):
    from harness.core import registry
    from harness.gatepower.inject import INJECT_ENV, from_environment

    with pytest.raises(UsageError) as err:
        from_environment(registry.get("selftest"), {INJECT_ENV: value})
    assert str(err.value).startswith(INJECT_ENV) and expected in str(err.value)


@pytest.mark.parametrize("env", [{"RANK": "abc", "WORLD_SIZE": "2"}, {"CRITPATH_INJECT_SLOWDOWN": "garbage"}])
def test_critpath_run_under_a_garbage_environment_exits_2_with_one_line(tmp_path, env):
    result = subprocess.run([sys.executable, "-m", "harness", "run",
                             "--case", NOOP, "--out", str(tmp_path / "run")],
                            env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and next(iter(env)) in result.stderr


# -- D1: a YAML file within the byte cap that takes minutes to load --------------------------------

@pytest.mark.parametrize("reader", [load_profile, load_config, load_baselines, rules.load])
def test_a_400_kb_flow_list_is_refused_by_its_node_count_in_a_second_in_every_reader(tmp_path, reader):
    path = tmp_path / "big.yaml"
    path.write_text("x: [" + "1," * 200_000 + "1]\n")  # 36 s and 306 MB before, parsed three times
    started = time.perf_counter()
    with pytest.raises(Exception, match=f"big.yaml:1: more than MAX_NODES = {yamlfile.MAX_NODES} values"):
        reader(path)
    assert time.perf_counter() - started < 5


def test_a_yaml_file_over_one_mib_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("x: [" + "1," * (2 << 20) + "1]\n")  # 4 MiB: over 150 s before
    started = time.perf_counter()
    with pytest.raises(yamlfile.YamlFileError, match=f"a YAML file is at most {yamlfile.MAX_YAML_BYTES} bytes"):
        yamlfile.load(path)
    assert time.perf_counter() - started < 1 and yamlfile.MAX_YAML_BYTES == 1 << 20


def test_every_shipped_yaml_file_loads_within_the_limits():
    files = [p for p in ROOT.rglob("*.yaml") if ".git" not in p.parts]
    assert len(files) > 5
    for path in files:
        yamlfile.load(path)


# -- D4/D5: YAML integers too big, and YAML 1.1's numbers --------------------------------------------

@pytest.mark.parametrize("digits", [20, 400, 5000])
def test_a_yaml_integer_outside_64_bits_is_refused_at_load_naming_the_line(tmp_path, digits):
    path = _profile(tmp_path, "max: " + "9" * digits)  # OverflowError / ValueError tracebacks before
    with pytest.raises(ProfileError, match=r"profile.yaml:8: integer '9{20}.* is outside 64 bits") as err:
        load_profile(path)
    assert len(str(err.value)) < 300  # the number is not echoed whole
    table = tmp_path / "table.yaml"
    table.write_text(f"baselines:\n  - case_id: '{NOOP}'\n    value: {'9' * digits}\n")
    with pytest.raises(ConfigError, match=r"table.yaml:3: integer .* is outside 64 bits"):
        load_baselines(table)
    gate = tmp_path / "gate.yaml"
    gate.write_text(f"min_effect:\n  default: {'9' * digits}\n")
    with pytest.raises(ConfigError, match=r"gate.yaml:2: integer .* is outside 64 bits"):
        load_config(gate)


def test_the_64_bit_bounds_themselves_load(tmp_path):
    path = tmp_path / "n.yaml"
    path.write_text("a: 9223372036854775807\nb: -9223372036854775808\nc: 0o17\nd: 0x10\ne: 0\nf: -0\n")
    assert yamlfile.load(path)[0] == {"a": (1 << 63) - 1, "b": -(1 << 63), "c": 15, "d": 16, "e": 0, "f": 0}


@pytest.mark.parametrize("text,value", [("1:20", "1:20"), ("1_000", "1_000"), ("0b11", "0b11"), ("1.5e3", 1500.0),
                                        ("4e11", 4e11), ("012.5", 12.5)])
def test_yaml_numbers_are_read_as_yaml_1_2_core_schema_reads_them(tmp_path, text, value):
    path = tmp_path / "n.yaml"
    path.write_text(f"a: {text}\n")  # 1:20 was 80 (sexagesimal), 1_000 was 1000
    assert yamlfile.load(path)[0] == {"a": value}


@pytest.mark.parametrize("text", ["017", "0100", "-007"])
def test_a_yaml_integer_with_a_leading_zero_is_refused_not_read_as_octal(tmp_path, text):
    path = _profile(tmp_path, f"max: {text}")  # 017 was 15, 0100 was 64
    with pytest.raises(ProfileError, match=r"profile.yaml:8: .* a number with a leading zero is refused .*0o"):
        load_profile(path)


def test_a_sexagesimal_threshold_is_refused_as_not_a_number(tmp_path):
    with pytest.raises(ProfileError, match=r"profile.yaml:8: "):
        load_profile(_profile(tmp_path, "max: 1:20"))  # was max 80


def test_a_yaml_value_a_constructor_refuses_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("a: 1\nb: 2020-13-45\n")
    with pytest.raises(yamlfile.YamlFileError, match=r"d.yaml:2: not a value critpath reads"):
        yamlfile.load(path)


# -- D2/D3: regexes whose matching is unbounded, or that the engine cannot compile ------------------

@pytest.mark.parametrize("pattern,why", [(".*.*.*.*.*.*.*.*.*.*Z", "MAX_FREE_REPEATS"), (".*a.*b.*c", "MAX_FREE_REPEATS"),
                                         ("(a|a)(a|a)(a|a)(a|a)(a|a)Z", "MAX_ALTERNATIVES"),
                                         ("a?a?a?a?a?a?aaaaaaZ", "MAX_ALTERNATIVES"),
                                         ("a{4294967295}", "is not a regex"), ("a{1,4294967295}", "is not a regex")])
def test_a_rule_regex_whose_matching_is_not_bounded_is_refused_naming_the_line(tmp_path, pattern, why):
    path = tmp_path / "rules.yaml"
    path.write_text("schema: critpath.diagnose/1\nrules:\n  r:\n    function: failure_check\n    verdict: failed\n"
                    f"    categories: c\n    metrics:\n      - '{pattern}'\n")
    with pytest.raises(rules.RuleFileError, match=rf"rules.yaml:8: field rules.r.metrics.0: .*{why}"):
        rules.load(path)


@pytest.mark.parametrize("pattern", ["(?:a|a)(?:a|a)(?:a|a)(?:a|a)[a-z]*a[a-z]*aZ", ".*.*Z", "(.*|x)?.*Z",
                                     ".{0,1000}.{0,1000}Z", "(?:x|.*)(?:y|.*)Z"])
def test_the_worst_accepted_rule_regexes_match_the_longest_name_in_well_under_a_second(pattern):
    compiled = rules._metric_pattern(pattern)
    started = time.perf_counter()
    for name in ("a" * rules.MAX_MATCHED_CHARS, "." * rules.MAX_MATCHED_CHARS):
        compiled.fullmatch(name)
    assert time.perf_counter() - started < 1


# -- D7: a fingerprint.json field of the wrong type --------------------------------------------------

def _run_with_fingerprint(path: Path, fingerprint: dict) -> Path:
    import numpy as np

    from harness.core.store import RunDir

    run = RunDir(path, "r")
    case_id = "allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=65536,world=2"
    run.append(derived_record(case_id, np.full(200, 100_000, dtype=np.int64), run_id="r", reports=[{}, {}]))
    run.write_fingerprint(fingerprint)
    run.write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": 1})
    return path


@pytest.mark.parametrize("fingerprint,field", [
    ({"layout": "zz"}, "layout"), ({"host": ["x"]}, "host"), ({"layout": {"node_keys": "ab"}}, "layout.node_keys"),
    ({"layout": {"node_keys": [1, 2]}}, "layout.node_keys.0"), ({"layout": {"node_keys": ["a"], "hosts": 3}}, "layout.hosts"),
    ({"layout": {"node_keys": ["a"], "node_of_rank": ["x"]}}, "layout.node_of_rank.0"),
    ({"layout": {"node_keys": ["a"], "node_of_rank": [0, 7]}}, "layout.node_of_rank"),
    ({"gpus": []}, "gpus"), ({"gpus": {"devices": [1]}}, "gpus.devices.0"),
    ({"gpus": {"devices": [{"host": 5}]}}, "gpus.devices.0.host")])
def test_a_wrongly_typed_fingerprint_field_exits_2_naming_file_and_field(tmp_path, capsys, fingerprint, field):
    runs = [_run_with_fingerprint(tmp_path / f"r{i}", {"host": f"h{i}"}) for i in range(2)]
    _run_with_fingerprint(tmp_path / "bad", fingerprint)  # an AttributeError traceback, exit 1, before
    code = main(["diagnose", *map(str, runs), str(tmp_path / "bad")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"bad/fingerprint.json: field {field}: must be" in err or f"bad/fingerprint.json: field {field}: a node" in err
    for command in (["show", str(tmp_path / "bad")], ["report", str(tmp_path / "bad"), "--out", str(tmp_path / "rep")]):
        assert main(command) in (0, 2)  # show and report read the fingerprint without a traceback


# -- D8/D9 and list options: repeated values --------------------------------------------------------

def test_3000_cases_each_named_twice_are_deduplicated_in_linear_time(capsys):
    from harness.run.plan import select_cases

    ids = [f"selftest/fault_rank=0,mode=spin,spin_iters={i},world=1" for i in range(1, 3001)]
    started = time.perf_counter()
    cases = select_cases(SimpleNamespace(case_ids=tuple(ids * 2)), None)  # over 100 s before
    assert time.perf_counter() - started < 10
    assert [c.id for c in cases] == ids
    assert "--case named 3000 case(s) again" in capsys.readouterr().err


def test_more_case_values_than_a_run_holds_are_refused_before_any_is_parsed():
    from harness.core.store import MAX_RUN_CASES
    from harness.run.plan import select_cases

    with pytest.raises(UsageError, match=f"--case given {MAX_RUN_CASES + 1} times; a run holds at most {MAX_RUN_CASES}"):
        select_cases(SimpleNamespace(case_ids=("x",) * (MAX_RUN_CASES + 1)), None)


@pytest.mark.parametrize("argv,expected", [
    (["run", "--families", "selftest,selftest", "--world", "1"], "argument --families: 'selftest' is given twice"),
    (["list", "--families", ",".join(["allreduce"] * 12000)], "more than MAX_LIST_ITEMS = 1024"),
    (["list", "--families", "allreduce,allreduce"], "'allreduce' is given twice"),
    (["gate-power", "--slowdowns", ""], "argument --slowdowns: expected one or more comma-separated values"),
    (["gate-power", "--rounds-sweep", ",,"], "argument --rounds-sweep: expected one or more comma-separated values"),
    (["moe-sim", "--worlds", "8,8,8"], "argument --worlds: '8' is given twice"),
])
def test_a_list_option_that_is_empty_too_long_or_repeats_a_value_is_refused(argv, expected, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--out", str(tmp_path / "o")] if argv[0] == "run" else argv)
    assert exit_.value.code == 2
    assert expected in capsys.readouterr().err


# -- D6: a JSON integer of 5,000 digits in a run's files ---------------------------------------------

@pytest.mark.parametrize("name,line", [("results.jsonl", 1), ("run.json", None), ("fingerprint.json", None)])
def test_a_5000_digit_json_integer_in_a_run_exits_2_naming_the_line_in_show_and_diagnose(tmp_path, capsys, name, line):
    runs = [_run_with_fingerprint(tmp_path / f"r{i}", {"host": f"h{i}"}) for i in range(2)]
    bad = _run_with_fingerprint(tmp_path / "bad", {"host": "bad"})
    text = (bad / name).read_text().rstrip()
    (bad / name).write_text(text[:-1] + f', "zz": {"9" * 5000}}}\n')  # past Python's int digit limit
    for command in (["show", str(bad)], ["diagnose", *map(str, runs), str(bad)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"bad/{name}:{line or ''}" in err and "field zz: the integer 9" in err and "(5000 digits)" in err
        assert len(err) < 600


# -- D10: message sizes bounded, 0 refused, the sizes grammar names its token -------------------------

@pytest.mark.parametrize("argv,expected", [
    (["run", "--families", "allreduce", "--world", "1", "--sizes", "1000G"], "size '1000G' must be 1 to 16G bytes"),
    (["run", "--sizes", "0,8"], "size '0' must be 1 to 16G bytes"),
    (["run", "--sizes", "0:8:x2"], "size '0' must be 1 to 16G bytes"),
    (["run", "--sizes", "1:1G:x"], "factor 'x' must be x2 to x999999"),
    (["run", "--sizes", "1:1G:x٣"], "factor 'x٣' must be x2 to x999999"),
    (["run", "--sizes", "٣"], "not a size: '٣'"),
    (["model", "--sizes", "999999999999999G"], "size '999999999999999G' must be 1 to 1048576G bytes"),
    (["run", "--sizes", ",".join(["8"] * 5000)], "gives more than 4096 sizes"),
])
def test_a_size_out_of_range_or_malformed_is_refused_naming_the_token(argv, expected, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.splitlines()[-1]) < 300


def test_the_declared_size_bounds_themselves_are_accepted():
    from harness.core.sizes import MAX_MODEL_SIZE_BYTES, MAX_RUN_SIZE_BYTES, parse_sizes

    assert parse_sizes("16G") == (MAX_RUN_SIZE_BYTES,)
    assert parse_sizes("1G:1048576G:x1024", MAX_MODEL_SIZE_BYTES)[-1] == MAX_MODEL_SIZE_BYTES


# -- minor: counts in range, ASCII digits, echoed input cut short -----------------------------------

def test_a_profile_with_more_nodes_than_ranks_can_exist_is_refused(tmp_path):
    path = _profile(tmp_path, "max: 3")
    path.write_text(path.read_text().replace("world: 1\n", "world: 1\nnodes: 1000000000\n"))
    with pytest.raises(ProfileError, match=r"profile.yaml:4: field nodes: .*65536"):
        load_profile(path)


@pytest.mark.parametrize("argv", [["run", "--world", "٣"], ["run", "--world", "²"], ["run", "--iters", "١٠"],
                                  ["run", "--timeout", "٣"]])
def test_a_number_option_takes_ascii_digits_only(argv, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2 and "invalid" in capsys.readouterr().err


@pytest.mark.parametrize("env,expected", [({"RANK": "٣", "WORLD_SIZE": "8"}, "RANK='٣': expected an integer"),
                                          ({"RANK": "0", "WORLD_SIZE": "²"}, "WORLD_SIZE='²': expected an integer")])
def test_a_launcher_variable_takes_ascii_digits_only(env, expected):
    from harness.run.joined import joined_rank

    with pytest.raises(UsageError, match=expected):
        joined_rank(env)


def test_a_node_rank_variable_in_other_digits_is_refused_naming_it():
    from harness.run import fingerprint

    var = fingerprint.NODE_RANK_VARS[0]
    assert "²".isdigit()  # and int("²") raises ValueError: the rank's identity must not
    with pytest.raises(UsageError, match=f"^{var}='²': expected an integer"):
        fingerprint.rank_identity(0, 0, {var: "²"})
    assert fingerprint.rank_identity(0, 0, {var: "3"})["node_rank"] == 3


def test_an_echoed_input_is_cut_short():
    from harness.core.echo import MAX_ECHOED_CHARS, shown

    assert shown("k" * (1 << 20)).endswith(f"({(1 << 20) + 2} characters)") and len(shown("k" * (1 << 20))) < 100
    assert shown(10 ** 5000).startswith("an integer of about 5001 digits")
    assert shown("short") == "'short'" and shown(12) == "12" and MAX_ECHOED_CHARS == 80


def test_a_one_mib_duplicate_key_is_not_echoed_whole(tmp_path):
    path = tmp_path / "k.yaml"
    key = "k" * 1000  # a plain key is at most 1024 characters in YAML
    path.write_text(f"? {key * 500}\n: 1\n? {key * 500}\n: 2\n")
    with pytest.raises(yamlfile.YamlFileError, match="duplicate key") as err:
        yamlfile.load(path)
    assert len(str(err.value)) < 400
