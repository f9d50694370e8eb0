"""``critpath history``'s parts that measure nothing: ranges, the bisection rule, the asv selection,
the suite's version-reset rule, and refusals. The real run over real commits is in
tests/test_asv_history.py."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks import bench_families
from harness.core import registry
from harness.cli import main
from harness.history.campaign import HistoryRunError, bench_regex, commits_in, largest_step
from harness.core.claim import CLAIM_FILE
from harness.core.store import load_records

FIXTURE_RUN = Path(__file__).parent / "fixtures" / "run_mixed"


def _repo(tmp_path, n: int) -> tuple:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    shas = []
    for i in range(n):
        (tmp_path / "f").write_text(str(i))
        subprocess.run(["git", "-C", str(tmp_path), "add", "f"], check=True)
        subprocess.run(["git", "-C", str(tmp_path), "commit", "-q", "-m", f"commit {i}"], check=True, env=env)
        shas.append(subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], check=True,
                                   capture_output=True, text=True).stdout.strip())
    return tmp_path, shas


def test_a_range_is_git_logs_oldest_first_and_find_adds_its_start(tmp_path):
    repo, shas = _repo(tmp_path, 4)
    assert [c.sha for c in commits_in(repo, f"{shas[0]}..{shas[3]}")] == shas[1:]
    assert [c.sha for c in commits_in(repo, f"{shas[0]}..{shas[3]}", include_start=True)] == shas
    assert [c.subject for c in commits_in(repo, "HEAD")] == ["commit 3"]
    with pytest.raises(HistoryRunError, match="holds no commits"):
        commits_in(repo, f"{shas[3]}..{shas[0]}")
    with pytest.raises(HistoryRunError, match="both ends"):
        commits_in(repo, f"..{shas[3]}")
    with pytest.raises(HistoryRunError, match="git"):
        commits_in(repo, "no-such-ref..HEAD")


@pytest.mark.parametrize("values, step", [
    ([10, 10, 10, 13, 13, 13, 13], (2, 3)),
    ([10, 13, 13, 13, 13], (0, 1)),
    ([10, 10, 10, 10, 10, 10, 10, 10, 7], (7, 8)),
    ([10, 20], (0, 1)),
])
def test_bisection_finds_the_step_measuring_about_log2_n_commits(values, step):
    measured = []

    def measure(i):
        measured.append(i)
        return float(values[i])

    assert largest_step(len(values), measure) == step
    assert len(set(measured)) <= 2 + len(values).bit_length()
    assert {0, len(values) - 1} <= set(measured)  # of two commits, nothing was measured: `error: 0`


def test_bisection_refuses_a_figure_without_a_ratio():
    with pytest.raises(ValueError, match="positive"):
        largest_step(3, lambda i: [1.0, 0.0, 2.0][i])


def test_asv_selects_only_the_classes_of_the_families_a_run_measured():
    names = {family: bench_families._make_suite(registry.get(family), []).__name__ for family in registry.FAMILIES}
    regex = re.compile(bench_regex(["moe_a2a", "rpc"]))
    for family, cls in names.items():
        hit = bool(regex.search(f"bench_families.{cls}.track_p50_us"))
        assert hit == (family in ("moe_a2a", "rpc")), (family, cls)
    assert not regex.search("bench_startup.Startup.track_wall_s")


def test_a_familys_asv_version_changes_with_its_definition_version_and_nothing_else():
    rpc, allreduce = registry.get("rpc"), registry.get("allreduce")
    bumped = dataclasses.replace(rpc, version=rpc.version + 1)
    assert bench_families.suite_version(bumped) != bench_families.suite_version(rpc)
    assert bench_families.suite_version(allreduce) == f"allreduce-v{allreduce.version}"
    # Another family's bump, or anything but name and version, leaves it as it was.
    described = dataclasses.replace(rpc, description="reworded")
    assert bench_families.suite_version(described) == bench_families.suite_version(rpc)


def test_tracked_figures_carry_declared_units_and_sources():
    kv = bench_families.tracked_figures(registry.get("kv_alloc"))
    assert kv["p50_us"] == "us" and kv["fragmentation_mean"] == "fraction (simulated)"
    assert bench_families.tracked_figures(registry.get("allreduce"))["busbw_gbps"] == "GB/s"
    for family in registry.FAMILIES.values():
        tracked = bench_families.tracked_figures(family)
        assert set(tracked) - {"p50_us", "p99_us"} == {f.name for f in family.figures if f.headline}


def test_a_directory_outside_git_and_find_without_one_case_are_refused(tmp_path, capsys):
    assert main(["history", "HEAD~1..HEAD", "--repo", str(tmp_path)]) == 2
    assert "not inside a git checkout" in capsys.readouterr().err
    repo, shas = _repo(tmp_path / "r", 2)
    assert main(["history", f"{shas[0]}..{shas[1]}", "--repo", str(repo), "--find", "p50_us"]) == 2
    assert "exactly one --case" in capsys.readouterr().err


def test_the_docs_table_of_headline_figures_is_the_declarations():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "history.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] in registry.FAMILIES:
            rows[cells[0]] = set(re.findall(r"`([a-z0-9_]+)`", cells[1]))
    tracked = {name for name, f in registry.FAMILIES.items() if f.default or name == "selftest"}
    assert set(rows) == tracked
    for name, figures in rows.items():
        assert figures == {f.name for f in registry.get(name).figures if f.headline}, name


def test_the_suite_and_history_name_the_stored_run_alike():
    # The suite cannot import harness.history.campaign (it runs against older trees), so the one name both
    # sides read is checked here.
    from harness.history import campaign as history

    assert bench_families.RUN_ENV == history.RUN_ENV
    assert bench_families.SAMPLE_FIGURES == history.SAMPLE_FIGURES  # what --find may bisect on, beside headlines


def test_the_suite_tracks_a_percentile_only_where_the_samples_support_it():
    """p99 of a case with 99 samples is asv's n/a (SkipNotImplemented) with the reason; 100 give a number."""
    from asv_runner.benchmarks.mark import SkipNotImplemented

    record = next(r for r in load_records(FIXTURE_RUN) if r.ok and len(r.samples_ns) >= 100)
    short = dataclasses.replace(record, samples_ns=record.samples_ns[:99])
    enough = dataclasses.replace(record, samples_ns=record.samples_ns[:100])
    cache = {"short": bench_families._figures_of(short), "enough": bench_families._figures_of(enough)}
    with pytest.raises(SkipNotImplemented, match="p99_us: n too small \\(99 samples\\)"):
        bench_families._read(cache, "short", "p99_us")
    assert bench_families._read(cache, "short", "p50_us") > 0
    assert bench_families._read(cache, "enough", "p99_us") > 0


def test_a_headline_figure_that_names_a_percentile_obeys_the_rule_too():
    from asv_runner.benchmarks.mark import SkipNotImplemented

    record = next(r for r in load_records(FIXTURE_RUN) if r.ok and len(r.samples_ns) >= 100)
    short = dataclasses.replace(record, samples_ns=record.samples_ns[:99],
                                metrics={**record.metrics, "rtt_p99_us": 1.0, "msgs_per_s": 5.0})
    cache = {"short": bench_families._figures_of(short)}
    with pytest.raises(SkipNotImplemented, match="rtt_p99_us: n too small"):
        bench_families._read(cache, "short", "rtt_p99_us")
    assert bench_families._read(cache, "short", "msgs_per_s") == 5.0


# -- refused before anything is measured ----------------------------------------------------------

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
HOLD = """
import sys
from harness.core.claim import claim_dir
claim_dir(sys.argv[1], "run")
print("held", flush=True)
sys.stdin.read()  # until the test closes it
"""


def _asv_repo(tmp_path, n: int = 2) -> tuple:
    repo, shas = _repo(tmp_path / "repo", n)
    (repo / "asv.conf.json").write_text('{"version": 1}\n')
    return repo, shas


@pytest.fixture
def own_home(tmp_path, monkeypatch):
    """A HOME of the test's own, empty: what a history writes there is seen, and the user's is safe."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.mark.parametrize("find, range_, said", [
    ("bogus_fig", "{0}..{1}", "--find bogus_fig: asv tracks no such figure of a selftest case; give one of p50_us, "
                              "p99_us, loop_overhead_ns"),
    ("p50_us", "{1}", "--find: range '{1}' holds 1 commit; a step lies between two: give A..B, whose start A is "
                      "measured too"),
])
def test_find_of_a_figure_the_suite_lacks_or_of_one_commit_is_refused_before_measuring(tmp_path, capsys, own_home,
                                                                                        find, range_, said):
    """`--find bogus_fig` was refused only after a commit was measured (15 s); `--find` of one
    commit measured nothing and printed `critpath history: error: 0`."""
    repo, shas = _asv_repo(tmp_path)
    out = tmp_path / "h"
    assert main(["history", range_.format(*shas), "--repo", str(repo), "--case", NOOP, "--find", find,
                 "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"critpath history: error: {said.format(*shas)}\n"
    assert not out.exists() and list(own_home.iterdir()) == []


def test_a_keyerror_of_a_bug_is_not_printed_as_a_usage_error_and_an_unknown_name_still_is(monkeypatch, capsys):
    """A bug's KeyError (``values[0]``) was caught as a usage error: `critpath history: error: 0`."""
    from harness.history import campaign

    def bug(args):
        return {}[0]

    monkeypatch.setattr(campaign, "cmd_history", bug)
    with pytest.raises(KeyError):
        main(["history", "HEAD"])
    assert main(["list", "--families", "nosuch"]) == 2
    assert capsys.readouterr().err.startswith("critpath list: error: unknown family 'nosuch'; known: ")


@pytest.mark.parametrize("where", ["below", "same"])
def test_history_results_in_a_directory_another_process_holds_is_refused(tmp_path, capsys, own_home, live_script,
                                                                         where):
    """`history --results G3/res` while `run --out G3` ran: asv wrote res/benchmarks.json beside the
    run's records; and two histories of different --out into one --results ran at once."""
    repo, _ = _asv_repo(tmp_path)
    held = tmp_path / "G3"
    holder = live_script(HOLD, held, ready="held")
    results = held / "res" if where == "below" else held
    out = tmp_path / "h"
    assert main(["history", "HEAD", "--repo", str(repo), "--case", NOOP, "--out", str(out),
                 "--results", str(results)]) == 2
    err = capsys.readouterr().err
    what = f"{results} lies below another process's output: " if where == "below" else ""
    assert err.startswith(f"critpath history: error: {what}{held} is in use: another process holds the lock on "
                          f"{held / CLAIM_FILE}; the file names critpath run (pid {holder.pid} on "), err
    assert err.rstrip().endswith("which is running; wait for it, or choose another --results"), err
    assert [p.name for p in held.iterdir()] == [CLAIM_FILE]  # nothing of asv's beside the holder's
    assert sorted(p.name for p in out.iterdir()) == [CLAIM_FILE]  # refused before it wrote its config
    assert list(own_home.iterdir()) == []


@pytest.mark.slow  # asv's own `asv machine` and a worktree, a few seconds
def test_asvs_machine_file_is_the_historys_own_and_nothing_is_written_in_home(tmp_path, capsys, own_home):
    """Every history ran `asv machine --yes`, which rewrites ~/.asv-machine.json without a lock: two
    at once, one failed with `Error parsing JSON in file '/root/.asv-machine.json'`."""
    repo, _ = _asv_repo(tmp_path)
    out, results = tmp_path / "h", tmp_path / "res"
    main(["history", "HEAD", "--repo", str(repo), "--case", NOOP, "--out", str(out), "--results", str(results),
          "--machine", "ci-box"])  # the commit is no critpath tree: it fails, after asv recorded the machine
    assert list(own_home.iterdir()) == []
    assert "ci-box" in json.loads((out / "asv-home" / ".asv-machine.json").read_text())


def test_asvs_home_is_never_a_link_out_of_out(tmp_path, capsys, own_home):
    """asv writes its machine file into --out/asv-home: a link planted there would take it elsewhere."""
    repo, _ = _asv_repo(tmp_path)
    out, elsewhere = tmp_path / "h", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "asv-home").symlink_to(elsewhere)
    assert main(["history", "HEAD", "--repo", str(repo), "--case", NOOP, "--out", str(out)]) == 2
    assert f"{out / 'asv-home'} is a symbolic link" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == [] and list(own_home.iterdir()) == []


@pytest.mark.parametrize("results, said", [
    ("repo/tracked", "is inside the repository {repo} being measured|holds 1 file(s) of the repository being measured"),
    ("o/h", "is --out {out}"),
    ("o/h/runs", "lies inside --out {out}"),
    ("o/h/asv-home", "lies inside --out {out}"),
    ("o", "holds --out {out}"),
])
def test_results_over_the_repository_or_overlapping_out_is_refused_before_anything_runs(tmp_path, capsys, own_home,
                                                                                        results, said):
    """--results in the repository rewrote files git tracks; --results equal to --out failed with a
    traceback after measuring; --results inside --out (or holding it) mixed asv's files with runs."""
    repo, _ = _asv_repo(tmp_path)
    tracked = repo / "tracked"
    tracked.mkdir()
    (tracked / "x.json").write_text("{}")
    subprocess.run(["git", "-C", str(repo), "add", "tracked"], check=True)
    out = tmp_path / "o" / "h"
    assert main(["history", "HEAD", "--repo", str(repo), "--case", NOOP, "--out", str(out),
                 "--results", str(tmp_path / results)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"critpath history: error: --results {(tmp_path / results).resolve()} "), err
    assert any(s.format(repo=repo, out=out) in err for s in said.split("|")), err
    assert not out.exists() and list(own_home.iterdir()) == []


@pytest.mark.parametrize("results, said", [("run", "is the run directory"), ("run/asv", "lies inside the run directory")])
def test_results_in_a_run_directory_is_refused_before_anything_runs(tmp_path, capsys, own_home, results, said):
    """--results naming a finished run's directory added asv's machine and result files beside its records."""
    repo, _ = _asv_repo(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("")
    out = tmp_path / "h"
    assert main(["history", "HEAD", "--repo", str(repo), "--case", NOOP, "--out", str(out),
                 "--results", str(tmp_path / results)]) == 2
    err = capsys.readouterr().err
    assert f"{said} {run.resolve()} (it holds results.jsonl)" in err, err
    assert sorted(p.name for p in run.iterdir()) == ["results.jsonl"] and not out.exists()


@pytest.mark.parametrize("link", ["asv-home/.asv-machine.json", "asv-machine.log"])
def test_a_file_history_writes_below_out_is_never_a_link_out_of_out(tmp_path, capsys, own_home, link):
    """A link at OUT/asv-home/.asv-machine.json or OUT/asv-machine.log had asv and the log write to its target."""
    repo, _ = _asv_repo(tmp_path)
    out, target = tmp_path / "h", tmp_path / "elsewhere.json"
    (out / "asv-home").mkdir(parents=True)
    (out / link).symlink_to(target)
    assert main(["history", "HEAD", "--repo", str(repo), "--case", NOOP, "--out", str(out)]) == 2
    assert f"{out / link} is a symbolic link" in capsys.readouterr().err
    assert not target.exists() and list(own_home.iterdir()) == []


def test_a_log_planted_as_a_link_mid_run_is_refused_not_written_through(tmp_path):
    """OUT/logs/<sha>.log planted as a link: the commit's asv output went to the link's target."""
    from harness.core.options import UsageError
    from harness.history.campaign import open_log

    out, target = tmp_path / "h", tmp_path / "elsewhere.log"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "abc.log").symlink_to(target)
    with pytest.raises(UsageError, match=re.escape(f"{out / 'logs' / 'abc.log'} is a symbolic link")):
        open_log(out, out / "logs" / "abc.log")
    assert not target.exists()
    with open_log(out, out / "logs" / "def.log") as log:
        log.write("kept\n")
    assert (out / "logs" / "def.log").read_text() == "kept\n"


def test_the_env_history_gives_asv_names_a_tmpdir_that_goes_with_the_tree(tmp_path):
    """asv ran with the user's TMPDIR: a SIGTERM of history left its result.json and forkserver
    socket there, where no clean-up of the tree reaches."""
    from harness.gate.trees import checkout
    from harness.history.campaign import asv_run_env

    repo, shas = _repo(tmp_path / "repo", 1)
    with checkout(repo, shas[0], "history", "critpath history") as tree:
        env = asv_run_env(tree, tmp_path / "run")
        assert Path(env["TMPDIR"]) == tree.temp_dir and tree.temp_dir.is_dir()
        assert tree.temp_dir.parent == tree.path.parent  # removed with the tree
    assert not tree.temp_dir.exists()


def test_a_finished_run_of_another_commit_is_set_aside_by_its_state_and_the_commit_measured(tmp_path):
    """`cp -r R OUT/runs/<sha>` of a run made from another commit was filed as <sha>'s measurement
    without measuring; and a finished run set aside by --rerun was named `.interrupted-N`."""
    from harness.history.campaign import _set_aside, earlier_run

    made_from = json.loads((FIXTURE_RUN / "fingerprint.json").read_text())["git"]["commit"]
    other = "f" * 40
    run_dir = tmp_path / "runs" / other
    shutil.copytree(FIXTURE_RUN, run_dir)
    foreign = earlier_run(run_dir, other)
    assert foreign.records is None and foreign.state == "other-commit"
    assert foreign.why == f"its fingerprint.json names git commit {made_from}, not {other}"
    own = earlier_run(run_dir, made_from)
    assert own.records and own.state == "finished"
    assert _set_aside(run_dir, own.state).name == f"{other}.finished-1"
    assert earlier_run(run_dir, other).state == "interrupted"  # nothing there now
