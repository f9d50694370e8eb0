"""What `critpath gate` and `critpath compare` refuse before they measure: an option of the other
mode, a --markdown that could not be written, a run on both sides; and how gate.md names its
sides and the statistic a compare of single runs compared. In process, on synthetic runs."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import RUN_FINGERPRINT, derived_record, finished_gate

import harness.gate.cli as gate_cli
from harness.cli import main
from harness.core.options import given_flags
from harness.core.store import RunDir
from harness.gate.outputs import EXIT_COULD_NOT_RUN, GateResult, markdown
from harness.gate import request
from harness.gate.owned import Owner
from harness.gate.stats import Policy
from test_tree_isolation import _dead_pid, _marked_worktree, _one_commit_repo, _ours, _worktrees

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


def _run(root: Path, run_id: str, seed: int = 0) -> Path:
    samples = np.random.default_rng(seed).normal(1000.0, 10.0, 200).clip(1)
    run = RunDir(root, run_id)
    run.append(derived_record(NOOP, samples, run_id=run_id, plan={"warmup": 1, "iters": len(samples)}))
    run.write_fingerprint(RUN_FINGERPRINT)
    run.write_meta({"schema": "critpath.run/1", "state": "finished", "cases_total": 1})
    return root


@pytest.fixture
def no_measuring(monkeypatch):
    """A gate that gets as far as measuring fails the test: what is refused, is refused before."""
    def measured(request):
        raise AssertionError("the gate was started")
    monkeypatch.setattr(gate_cli, "gate", measured)


@pytest.fixture
def table(tmp_path) -> Path:
    path = tmp_path / "T.yaml"
    path.write_text(f'baselines:\n  - case_id: "{NOOP}"\n    statistic: p50_ns\n    value: 110\n')
    return path


# -- 1: an option of the other mode is refused, naming it, even at its default value ------------

AGAINST_IGNORED = ["--full", "--max-pairs", "1", "--window", "0.01", "--rounds", "4", "--allow-inconclusive"]


@pytest.mark.parametrize("extra, named", [
    (AGAINST_IGNORED, "--full, --rounds, --window, --max-pairs, --allow-inconclusive do not apply with --against"),
    (["--rounds", "1"], "--rounds does not apply with --against FILE"),  # the default value, given
    (["--case", NOOP], "--case does not apply with --against FILE: the cases are the table's entries"),
])
def test_an_a_b_option_given_with_a_table_is_refused_naming_it(tmp_path, capsys, table, extra, named):
    out = tmp_path / "G"
    code = main(["gate", "--repo", str(tmp_path), "--against", str(table), *extra, "--repeats", "2",
                 "--budget", "30", "--out", str(out)])
    assert code == EXIT_COULD_NOT_RUN
    assert named in capsys.readouterr().err
    assert named in json.loads((out / "gate.json").read_text())["error"]


@pytest.mark.parametrize("case_id, said", [
    ("selftest/mode=nosuch", "mode"),
    ("nosuchfamily/size_bytes=8", "nosuchfamily"),
])
def test_a_table_entry_naming_no_case_is_refused_at_load_before_any_worktree(tmp_path, capsys, no_measuring,
                                                                            case_id, said):
    """An unknown case ID in a --against table became could_not_run only after the candidate's
    worktree was made and probed; min_effect.cases was already refused when the config loaded."""
    table = tmp_path / "T.yaml"
    table.write_text(f'baselines:\n  - case_id: "{NOOP}"\n    value: 110\n  - case_id: "{case_id}"\n    value: 5\n')
    out = tmp_path / "G"
    assert main(["gate", "--repo", str(tmp_path), "--against", str(table), "--out", str(out)]) == EXIT_COULD_NOT_RUN
    err = capsys.readouterr().err
    assert f"{table}:4: field baselines[1].case_id: " in err and said in err, err


@pytest.mark.parametrize("repeats", ["2", "10"])  # 10: the default, given
def test_repeats_given_to_an_a_b_gate_is_refused_naming_it(tmp_path, capsys, repeats):
    code = main(["gate", "--repo", str(tmp_path), "--base", "HEAD", "--case", NOOP, "--repeats", repeats,
                 "--out", str(tmp_path / "G")])
    assert code == EXIT_COULD_NOT_RUN
    assert "--repeats does not apply to an A/B gate (--base REF)" in capsys.readouterr().err


def test_full_without_families_is_refused(tmp_path, capsys):
    code = main(["gate", "--repo", str(tmp_path), "--base", "HEAD", "--case", NOOP, "--full",
                 "--out", str(tmp_path / "G")])
    assert code == EXIT_COULD_NOT_RUN
    assert "--full selects the full grid of --families" in capsys.readouterr().err


def test_the_gate_tells_its_mode_options_by_the_one_given_flags_rule(tmp_path, capsys, table, monkeypatch):
    # One rule for "given" across commands (options.given_flags), fed the parser's own defaults:
    # a store_true option left out is False, not None, and is not counted as given.
    seen = []

    def spy(args, flags, defaults=None):
        seen.append((dict(flags), dict(defaults or {})))
        return given_flags(args, flags, defaults)

    monkeypatch.setattr(gate_cli, "given_flags", spy)
    code = main(["gate", "--repo", str(tmp_path), "--against", str(table), "--allow-inconclusive",
                 "--out", str(tmp_path / "G")])
    assert code == EXIT_COULD_NOT_RUN
    assert "--allow-inconclusive does not apply with --against FILE" in capsys.readouterr().err
    [(flags, defaults)] = seen
    assert sorted(flags.values()) == sorted(request.MODE_ONLY)
    assert defaults["full"] is False and defaults["allow_inconclusive"] is False and defaults["rounds"] is None


def test_between_gates_given_with_against_is_refused_naming_it(tmp_path, capsys, table):
    # The term widens an A/B gate's interval of pairs; a table's fixed-size test has none.
    code = main(["gate", "--repo", str(tmp_path), "--against", str(table), "--between-gates", str(tmp_path),
                 "--out", str(tmp_path / "G")])
    assert code == EXIT_COULD_NOT_RUN
    assert "--between-gates does not apply with --against FILE" in capsys.readouterr().err


def test_every_option_of_one_mode_is_an_option_of_the_gate(capsys):
    with pytest.raises(SystemExit):
        main(["gate", "--help"])
    usage = capsys.readouterr().out
    assert [option for option in request.MODE_ONLY if option not in usage] == []


# -- 2: --markdown checked before anything is measured, in words --------------------------------

def test_a_gate_whose_markdown_directory_is_missing_is_refused_before_it_measures(tmp_path, capsys, no_measuring):
    out, target = tmp_path / "G", tmp_path / "nodir" / "x.md"
    code = main(["gate", "--repo", str(tmp_path), "--base", "HEAD", "--case", NOOP, "--budget", "8",
                 "--markdown", str(target), "--out", str(out)])
    assert code == EXIT_COULD_NOT_RUN
    err = capsys.readouterr().err
    assert f"--markdown {target}: its directory {target.parent} does not exist" in err and "Errno" not in err
    assert not out.exists()


def test_a_gate_whose_markdown_is_its_table_is_refused_before_it_measures(tmp_path, capsys, table, no_measuring):
    code = main(["gate", "--repo", str(tmp_path), "--against", str(table), "--markdown", str(table),
                 "--out", str(tmp_path / "G")])
    assert code == EXIT_COULD_NOT_RUN
    assert f"--markdown {table} is an input of this command" in capsys.readouterr().err


def test_a_markdown_below_a_file_is_refused(tmp_path, capsys, no_measuring):
    (tmp_path / "afile").write_text("x")
    target = tmp_path / "afile" / "x.md"
    assert main(["gate", "--repo", str(tmp_path), "--base", "HEAD", "--case", NOOP, "--markdown", str(target),
                 "--out", str(tmp_path / "G")]) == EXIT_COULD_NOT_RUN
    assert f"its directory {target.parent} is a file, not a directory" in capsys.readouterr().err


def test_a_markdown_in_a_closed_directory_is_refused(tmp_path, capsys, no_measuring, monkeypatch):
    closed = tmp_path / "closed"
    closed.mkdir()
    real_access = os.access  # a root user may write anywhere: the closed directory is one os.access refuses
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == closed else real_access(path, mode))
    assert main(["gate", "--repo", str(tmp_path), "--base", "HEAD", "--case", NOOP, "--markdown",
                 str(closed / "x.md"), "--out", str(tmp_path / "G")]) == EXIT_COULD_NOT_RUN
    assert f"its directory {closed} is not writable by this user" in capsys.readouterr().err


# Holds argv[1] as a live `critpath run --out` does, until the test closes its stdin.
HOLD = """
import sys
from harness.core.claim import claim_dir

claim_dir(sys.argv[1], "run")
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("command", ["gate", "compare"])
def test_a_markdown_in_a_directory_another_live_process_holds_is_refused_before_anything(
        tmp_path, capsys, live_script, no_measuring, command):
    live = tmp_path / "live"
    holder = live_script(HOLD, live, ready="held")
    out, target = tmp_path / "gmA", live / "x.md"
    if command == "gate":
        argv = ["gate", "--repo", str(tmp_path), "--base", "HEAD", "--case", NOOP, "--budget", "3"]
    else:
        argv = ["compare", str(_run(tmp_path / "r1", "r-1")), str(_run(tmp_path / "r2", "r-2", seed=1))]
    assert main([*argv, "--markdown", str(target), "--out", str(out)]) == EXIT_COULD_NOT_RUN
    err = capsys.readouterr().err
    assert f"--markdown {target} lies below another process's output: {live} is in use: " in err
    assert f"the file names critpath run (pid {holder.pid} on " in err and "Traceback" not in err
    assert not out.exists() and not target.exists()  # --out as it was: a retry is not refused as not empty


def test_a_compare_whose_markdown_directory_is_missing_is_refused_and_leaves_nothing(tmp_path, capsys):
    base, cand = _run(tmp_path / "r1", "r-1"), _run(tmp_path / "r2", "r-2", seed=1)
    out, target = tmp_path / "cm5", tmp_path / "nodir" / "x.md"
    assert main(["compare", str(base), str(cand), "--markdown", str(target), "--out", str(out)]) == EXIT_COULD_NOT_RUN
    err = capsys.readouterr().err
    assert f"--markdown {target}: its directory {target.parent} does not exist" in err and "Errno" not in err
    assert not out.exists()


def test_a_compare_whose_markdown_is_one_of_its_runs_is_refused(tmp_path, capsys):
    base, cand = _run(tmp_path / "r1", "r-1"), _run(tmp_path / "r2", "r-2", seed=1)
    target = base / "results.jsonl"
    before = target.read_bytes()
    assert main(["compare", str(base), str(cand), "--markdown", str(target), "--out", str(tmp_path / "o")]) == 2
    assert f"--markdown {target} is an input of this command" in capsys.readouterr().err
    assert target.read_bytes() == before


def test_a_write_into_a_missing_directory_says_so_in_words(tmp_path, capsys):
    run = _run(tmp_path / "r1", "r-1")
    target = tmp_path / "nodir" / "x.csv"
    assert main(["export", "--format", "csv", "--out", str(target), str(run)]) == 2
    err = capsys.readouterr().err
    assert f"could not write {target}: its directory {target.parent} does not exist" in err and "Errno" not in err


# -- 3: a run on both sides of a compare ----------------------------------------------------------

def test_a_run_compared_with_itself_is_refused_naming_it(tmp_path, capsys):
    run = _run(tmp_path / "r1", "r-1")
    assert main(["compare", str(run), str(run), "--out", str(tmp_path / "cm9")]) == EXIT_COULD_NOT_RUN
    assert f"base and candidate share a run: {run} is given twice (as {run} and {run}); a run compared " \
           "with itself" in capsys.readouterr().err


def test_a_run_compared_with_its_copy_is_refused_naming_both(tmp_path, capsys):
    run = _run(tmp_path / "r1", "r-1")
    copy = tmp_path / "C4"
    shutil.copytree(run, copy)
    assert main(["compare", str(run), str(copy), "--out", str(tmp_path / "cm")]) == EXIT_COULD_NOT_RUN
    assert f"base and candidate share a run: run r-1 is in {run} and in {copy}" in capsys.readouterr().err


def test_a_run_on_both_sides_of_repeats_is_refused(tmp_path, capsys):
    base, cand = tmp_path / "a", tmp_path / "b"
    for i in range(2):
        _run(base / f"r{i}", f"a-{i}", seed=i)
    _run(cand / "r0", "b-0", seed=5)
    shutil.copytree(base / "r1", cand / "r1")
    assert main(["compare", str(base), str(cand), "--out", str(tmp_path / "cm")]) == EXIT_COULD_NOT_RUN
    assert f"share a run: run a-1 is in {base / 'r1'} and in {cand / 'r1'}" in capsys.readouterr().err


def _gate_side(root: Path, run_id: str, seed: int) -> Path:
    for r in range(2):
        _run(root / "gen-000" / f"round-{r:03d}", run_id, seed=seed + r)
    finished_gate(root.parent)
    return root


def test_a_gate_side_compared_with_its_copy_is_refused(tmp_path, capsys):
    # Within one gate's directory (sides of two gates are refused as such before their runs are read).
    base = _gate_side(tmp_path / "G" / "base", "w-base", 0)
    copy = tmp_path / "G" / "candidate"
    shutil.copytree(base, copy)
    finished_gate(copy.parent)
    assert main(["compare", str(base), str(copy), "--out", str(tmp_path / "cm")]) == EXIT_COULD_NOT_RUN
    assert f"share a run: run w-base is in {base / 'gen-000'} and in {copy / 'gen-000'}" in capsys.readouterr().err


def test_two_gate_sides_still_recheck(tmp_path):
    base = _gate_side(tmp_path / "G" / "base", "w-base", 0)
    cand = _gate_side(tmp_path / "G" / "candidate", "w-cand", 10)
    out = tmp_path / "cm"
    main(["compare", str(base), str(cand), "--out", str(out)])
    assert json.loads((out / "gate.json").read_text())["unit"] == "pair"


# -- 4: gate.md names each side whole, a commit short ----------------------------------------------

def test_gate_md_names_two_runs_whose_paths_share_a_long_prefix_apart():
    base, cand = "/tmp/probe-one/runs/base", "/tmp/probe-one/runs/cand"
    text = markdown(GateResult("compare", "p50_ns", "process", Policy(), base={"ref": base}, candidate={"ref": cand}))
    assert f"base `{base}` vs candidate `{cand}`" in text


def test_gate_md_names_a_commit_by_its_short_form():
    commit = "0123456789abcdef" * 2 + "01234567"
    text = markdown(GateResult("ab", "mean_ns", "process", Policy(), base={"ref": "HEAD", "commit": commit},
                               candidate={"ref": "worktree", "commit": commit}))
    assert f"base `{commit[:12]}` vs candidate `{commit[:12]}`" in text


# -- 5: a compare of single runs says which statistic it compared ------------------------------------

@pytest.mark.parametrize("asked", ["p99_ns", "max_ns", "min_ns", "mean_ns"])
def test_a_compare_of_single_runs_names_the_median_it_compared(tmp_path, capsys, asked):
    base, cand = _run(tmp_path / "r1", "r-1"), _run(tmp_path / "r2", "r-2", seed=1)
    out = tmp_path / "cm"
    main(["compare", str(base), str(cand), "--statistic", asked, "--out", str(out)])
    data = json.loads((out / "gate.json").read_text())
    assert data["statistic"] == "p50_ns" and data["extra"]["statistic_asked"] == asked
    assert f"statistic `p50_ns` (`{asked}` was asked" in (out / "gate.md").read_text()
    assert f"warning: compared p50_ns, not {asked}: one run per side has one {asked} each" in capsys.readouterr().err


def test_a_compare_of_repeats_compares_the_statistic_asked(tmp_path):
    base, cand = tmp_path / "a", tmp_path / "b"
    for i in range(3):
        _run(base / f"r{i}", f"a-{i}", seed=i)
        _run(cand / f"r{i}", f"b-{i}", seed=10 + i)
    out = tmp_path / "cm"
    main(["compare", str(base), str(cand), "--statistic", "p99_ns", "--out", str(out)])
    data = json.loads((out / "gate.json").read_text())
    assert data["statistic"] == "p99_ns" and "statistic_asked" not in data["extra"]


def test_a_compare_whose_samples_support_no_statistic_asked_names_that_statistic_only(tmp_path, capsys):
    # 200 samples hold no p999: no case is compared, so nothing says p50_ns was.
    base, cand = _run(tmp_path / "r1", "r-1"), _run(tmp_path / "r2", "r-2", seed=1)
    out = tmp_path / "cm"
    assert main(["compare", str(base), str(cand), "--statistic", "p999_ns", "--out", str(out)]) == EXIT_COULD_NOT_RUN
    data = json.loads((out / "gate.json").read_text())
    assert data["statistic"] == "p999_ns" and "statistic_asked" not in data["extra"]
    note = data["cases"][0]["reason"]
    assert "p999_ns asked: n too small: p999 needs at least 1000 samples, this record has 200" in note
    gate_md = (out / "gate.md").read_text()
    assert "statistic `p999_ns`, unit" in gate_md
    assert "p50_ns" not in gate_md and "p50_ns" not in capsys.readouterr().err


# -- 6: a compare of uneven sides says which side has one run -------------------------------------

@pytest.mark.parametrize("single", ["base", "candidate"])
def test_a_compare_of_two_runs_against_one_names_the_side_of_one_run(tmp_path, capsys, single):
    two, one = tmp_path / "two", tmp_path / "one"
    _run(two / "r0", "t-0", seed=0)
    _run(two / "r1", "t-1", seed=1)
    _run(one, "o-0", seed=2)
    other = "candidate" if single == "base" else "base"
    sides = [one, two] if single == "base" else [two, one]
    out = tmp_path / "cm"
    main(["compare", *map(str, sides), "--statistic", "p99_ns", "--out", str(out)])
    err = capsys.readouterr().err
    assert "one run per side" not in err
    assert (f"warning: the {single} side has one run, the {other} 2: with one run on a side there is no spread "
            f"between processes to test against, so the unit is per-iteration samples, of the {single}'s run and "
            f"of the {other}'s first run only ({two / 'r0'})") in err
    assert f"compared p50_ns, not p99_ns: the {single} side's one run has one p99_ns, nothing to test" in err
    data = json.loads((out / "gate.json").read_text())
    assert data["unit"] == "iteration" and not any("one run per side" in w for w in data["warnings"])
    runs = {"base": 1, "candidate": 2} if single == "base" else {"base": 2, "candidate": 1}
    assert f"{runs['base']} runs of the base and {runs['candidate']} of the candidate" in (out / "gate.md").read_text()


# -- 7: a run directory linked into a side of repeats is refused, naming the link -------------------

def test_a_run_directory_linked_into_a_side_of_repeats_is_refused_naming_the_link(tmp_path, capsys):
    base, cand, elsewhere = tmp_path / "a", tmp_path / "b", tmp_path / "elsewhere"
    for i in range(2):
        _run(base / f"r{i}", f"a-{i}", seed=i)
    _run(cand / "r0", "b-0", seed=10)
    _run(elsewhere / "r1", "b-1", seed=11)
    (cand / "r1").symlink_to(elsewhere / "r1")
    out = tmp_path / "cm"
    assert main(["compare", str(base), str(cand), "--out", str(out)]) == EXIT_COULD_NOT_RUN
    named = f"{cand / 'r1'} is a symbolic link to a directory ({elsewhere / 'r1'}); a compare side does not follow links"
    assert named in capsys.readouterr().err
    assert named in json.loads((out / "gate.json").read_text())["error"]


# -- a gate refused for a non-empty --out sweeps what a killed gate left ------------------------

@pytest.mark.parametrize("against", [False, True])
def test_a_gate_refused_for_a_non_empty_out_still_sweeps_what_a_killed_gate_left(tmp_path, monkeypatch, capsys,
                                                                                  against):
    # A gate killed outright, then retried into the same --out: the retry was refused for a
    # non-empty --out before it swept, so the killed gate's worktree outlived it until some other
    # gate ran in the repository.
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    tiny_repo = _one_commit_repo(tmp_path / "tiny")
    temp_dir = tmp_path / "tmp"  # where the gate makes its worktrees, and the sweep looks: this test's own
    temp_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_dir))
    dead = Owner("critpath gate", _dead_pid(), Owner.me("x").host, "0")
    tree = _marked_worktree(tiny_repo, _ours(temp_dir, "base"), dead)
    out = tmp_path / "G"
    (out / "gen-000" / "base").mkdir(parents=True)
    (out / "gen-000" / "base" / "worker.log").write_text("what the killed gate's worker wrote\n")
    if against:
        table = tmp_path / "T.yaml"
        table.write_text(f'baselines:\n  - case_id: "{NOOP}"\n    statistic: p50_ns\n    value: 110\n')
        mode = ["--against", str(table), "--candidate", "HEAD"]
    else:
        mode = ["--base", "HEAD", "--case", NOOP]

    code = main(["gate", "--repo", str(tiny_repo), *mode, "--budget", "8", "--out", str(out)])

    assert code == EXIT_COULD_NOT_RUN
    err = capsys.readouterr().err
    assert f"{out} is not empty; choose another --out" in err
    assert f"removed the worktree {tree}, left by {dead.describe()}, which is no longer running" in err
    assert _worktrees(tiny_repo) == [str(tiny_repo)] and not tree.parent.exists()
    assert (out / "gen-000" / "base" / "worker.log").exists()  # what the killed gate measured is kept


def test_a_gate_refused_for_a_non_empty_out_outside_a_checkout_says_only_that(tmp_path, capsys):
    out = tmp_path / "G"
    out.mkdir()
    (out / "x").write_text("x\n")
    code = main(["gate", "--repo", str(tmp_path), "--base", "HEAD", "--case", NOOP, "--out", str(out)])
    assert code == EXIT_COULD_NOT_RUN
    assert capsys.readouterr().err.strip() == f"critpath gate: error: {out} is not empty; choose another --out"
