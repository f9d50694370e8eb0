"""Each tree runs its own code, refs are checked as refs, and a tree that cannot start, or a gate
killed outright, never reads as a regression or leaves a worktree behind.

The editable install that shadows a tree is made here, not taken from the machine: a site
directory with setuptools' own editable finder for ``harness``, pointing at this checkout (the
"candidate"), loaded through a ``.pth`` as pip's editable install loads it. So the tests hold
whether or not the venv running them has critpath installed editable.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ROOT, git as _git, processes_mentioning

from harness.cli import main
from harness.core.git import git_env
from harness.run import fingerprint
from harness.gate.outputs import EXIT_COULD_NOT_RUN
from harness.gate.owned import OWNER_FILE, Owner, owner_of
from harness.gate import trees
from harness.gate.schedule import side_kind
from harness.gate.trees import Tree, TreeError, checkout, probe, registered_worktrees, resolve, sweep_orphans

# Real gates and histories over checkouts (about 40 s): the slow tier, with the other real gates.
pytestmark = pytest.mark.slow

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
HANG = "selftest/fault_rank=0,mode=hang,world=1"
OLD_COMMIT = "023b459"  # 0.1's flat layout: no harness/core, no harness/run, no critpath worker


def _worktrees(repo: Path) -> list[str]:
    return [line.split()[1] for line in _git(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]


def _one_commit_repo(repo: Path, text: str = "x\n") -> Path:
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "README").write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    return repo


@pytest.fixture
def tiny_repo(tmp_path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    return _one_commit_repo(tmp_path / "tiny")


# -- refs are refs ------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["--output={out}", "--output={out}..HEAD", "HEAD..--output={out}"])
def test_a_history_range_that_is_an_option_is_refused_and_git_writes_nothing(tiny_repo, tmp_path, capsys, spec):
    written = tmp_path / "written-by-git"
    spec = spec.format(out=written)
    code = main(["history", "--repo", str(tiny_repo), "--out", str(tmp_path / "h"), "--", spec])
    err = capsys.readouterr().err
    assert code == 2
    assert not written.exists()  # git log --output=FILE wrote here before
    assert "is not a ref" in err and "--output=" in err


def test_an_unknown_ref_in_a_history_range_is_one_line_naming_it(tiny_repo, tmp_path, capsys):
    code = main(["history", "--repo", str(tiny_repo), "--out", str(tmp_path / "h"), "nosuch..HEAD"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0, err  # git's advice ("Use '--' to separate paths") was printed under it
    assert "'nosuch' does not name a commit" in err


@pytest.mark.parametrize("ref", ["--output=FILE", "-q", "", "HEAD --output=FILE"])
def test_a_ref_that_git_could_read_as_an_option_names_no_commit(tiny_repo, ref):
    with pytest.raises(TreeError, match="not a ref|does not name a commit"):
        resolve(tiny_repo, ref.replace("FILE", str(tiny_repo / "written")))
    assert not (tiny_repo / "written").exists()
    assert len(resolve(tiny_repo, "HEAD")) == 40


# -- each tree imports only its own harness ---------------------------------------------------


@pytest.fixture
def editable_install(tmp_path, monkeypatch) -> Path:
    """A site directory whose .pth installs setuptools' editable finder mapping ``harness`` to this
    checkout, as ``pip install -e`` does; on PYTHONPATH, a ``sitecustomize`` adds it as a site dir."""
    editable_wheel = pytest.importorskip("setuptools.command.editable_wheel")
    site = tmp_path / "editable-site"
    site.mkdir()
    name = "__editable___critpath_test_finder"
    (site / f"{name}.py").write_text(editable_wheel._finder_template(name, {"harness": str(ROOT / "harness")}, {}))
    (site / "__editable__.critpath-test.pth").write_text(f"import {name}; {name}.install()\n")
    (site / "sitecustomize.py").write_text("import os, site, sys\n"
                                           "site.addsitedir(os.path.dirname(os.path.abspath(__file__)))\n"
                                           "sys.critpath_test_site = True\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site


@pytest.fixture
def old_tree(tmp_path) -> Path:
    """A tree of the 0.1 layout: harness/registry.py, and no harness/core, harness/run or worker."""
    root = tmp_path / "old"
    (root / "harness").mkdir(parents=True)
    (root / "harness" / "__init__.py").write_text("")
    (root / "harness" / "registry.py").write_text("def parse(case_id):\n    return case_id\n")
    return root


def test_the_fake_editable_install_does_shadow_a_tree_without_the_bootstrap(editable_install, old_tree):
    # The premise of the tests below: a tree first on a plain PYTHONPATH imports the modules it
    # lacks from the editable checkout (the gate's trees did exactly this).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(old_tree), os.environ["PYTHONPATH"]])}
    out = subprocess.run([sys.executable, "-c", "import harness.run; print(harness.run.__file__)"], cwd=old_tree,
                         env=env, capture_output=True, text=True, check=True)
    assert not Path(out.stdout.strip()).is_relative_to(old_tree)  # the checkout's (or the venv's own editable one)


def test_a_process_of_a_tree_cannot_import_what_the_tree_lacks(editable_install, old_tree):
    tree = Tree("base", "old", old_tree, None)
    code = ("import sys, harness\n"
            "assert sys.critpath_test_site  # the interpreter's own sitecustomize still ran\n"
            "try:\n    import harness.run\nexcept ImportError:\n    print('absent')\n"
            "else:\n    print(harness.run.__file__)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=old_tree, env=tree.env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "absent"


def test_an_old_base_probes_as_old_and_both_sides_fall_back_to_a_run_per_round(editable_install, old_tree):
    found = probe(Tree("base", "old", old_tree, None), ["selftest/mode=noop"])
    assert found.worker_protocol is None  # was 1: the candidate's harness.run.rounds, through the finder
    assert Path(found.harness_file).is_relative_to(old_tree)
    assert side_kind({"base": found.worker_protocol, "candidate": 1}) == "run"


def test_the_probe_refuses_a_tree_that_loads_harness_code_from_elsewhere(tmp_path, old_tree):
    # A tree whose package reaches out of itself (here on purpose) is caught by the probe.
    (old_tree / "harness" / "registry.py").write_text(
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('harness.elsewhere', {str(ROOT / 'harness/core/escape.py')!r})\n"
        "sys.modules[spec.name] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(sys.modules[spec.name])\n"
        "def parse(case_id):\n    return case_id\n")
    with pytest.raises(TreeError, match="imports harness.elsewhere from "):
        probe(Tree("base", "old", old_tree, None), [])


_REACH_OUT = f"__path__.append({str(ROOT / 'harness')!r})  # a tree that reaches into the installed checkout\n"


def test_a_tree_that_appends_another_checkout_to_its_path_cannot_import_from_it(old_tree):
    # The probe imports a few modules; a module imported later (here harness.core.escape, which
    # this tree lacks) came through the appended __path__ from the other checkout, unseen.
    (old_tree / "harness" / "__init__.py").write_text(_REACH_OUT)
    code = ("import harness.registry\n"  # the tree's own module still imports
            "try:\n    import harness.core.escape as m\nexcept ImportError as exc:\n    print(exc)\n"
            "else:\n    print('imported', m.__file__)\n")
    plain = {**os.environ, "PYTHONPATH": str(old_tree)}
    for env, said in [(plain, f"imported {ROOT / 'harness' / 'core' / 'escape.py'}"),  # the premise
                      (Tree("base", "old", old_tree, None).env(),
                       f"harness.core would be imported from {ROOT / 'harness' / 'core'}")]:
        out = subprocess.run([sys.executable, "-c", code], cwd=old_tree, env=env, capture_output=True, text=True)
        assert out.returncode == 0 and said in out.stdout, out.stdout + out.stderr
    assert "outside the tree under test" in out.stdout and str(old_tree) in out.stdout


@pytest.mark.integration
def test_a_candidate_that_appends_the_checkout_to_its_path_could_not_run_naming_the_module(tmp_repo, tmp_path):
    # The candidate lacks harness/cli.py, which the probe never imports, and reaches into this
    # checkout for it: its workers ran this checkout's cli, and the gate measured it as the candidate.
    init = tmp_repo / "harness" / "__init__.py"
    init.write_text(init.read_text() + _REACH_OUT)
    (tmp_repo / "harness" / "cli.py").unlink()
    _git(tmp_repo, "commit", "-q", "-am", "a candidate that reaches out of its tree")
    out = tmp_path / "gate"
    code = main(["gate", "--repo", str(tmp_repo), "--base", "HEAD~1", "--candidate", "HEAD", "--case", NOOP,
                 "--max-pairs", "2", "--iters", "100", "--out", str(out)])
    data = json.loads((out / "gate.json").read_text())
    reasons = [data["error"] or ""] + [c["reason"] for c in data["cases"]]
    assert code == EXIT_COULD_NOT_RUN
    assert any("candidate" in r and "harness.cli would be imported from" in r and str(ROOT) in r for r in reasons), reasons


@pytest.mark.slow
@pytest.mark.integration
def test_a_gate_against_a_base_from_before_the_worker_falls_back_and_runs_its_own_code(editable_install, tmp_path):
    """``critpath gate --base 023b459``: that tree has no harness/core, harness/run or worker; its
    probe used the candidate's registry ("'Param' object has no attribute 'check'")."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{OLD_COMMIT}^{{commit}}"], capture_output=True)
    if known.returncode != 0:
        pytest.skip(f"{OLD_COMMIT} is not in this clone's history")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--", str(ROOT), str(clone)], check=True, capture_output=True)
    out = tmp_path / "gate"
    code = main(["gate", "--repo", str(clone), "--base", OLD_COMMIT, "--candidate", "HEAD", "--case", NOOP,
                 "--max-pairs", "1", "--iters", "200", "--out", str(out)])
    data = json.loads((out / "gate.json").read_text())
    assert data["extra"]["side_kind"] == "run", data
    (case,) = data["cases"]
    assert "unknown in base" not in case["reason"] and "worker" not in case["reason"], case
    fingerprints = sorted((out / "base").glob("gen-*/round-*/fingerprint.json"))
    assert fingerprints, "the base ran no round"
    commit = json.loads(fingerprints[0].read_text())["git"]["commit"]
    assert commit.startswith(OLD_COMMIT)  # the base's own fingerprint module, reading its own tree
    assert code == EXIT_COULD_NOT_RUN  # one pair cannot decide anything: could not run, not a regression


# -- a tree that cannot start is could_not_run --------------------------------------------------


def _break(repo: Path, path: str) -> None:
    target = repo / path
    if path.endswith("__main__.py"):
        target.unlink()
    else:
        target.write_text(target.read_text() + "\ndef broken(:\n")


def test_a_gate_run_from_a_checkout_whose_cli_does_not_import_could_not_run(tmp_repo, tmp_path):
    # CI runs the gate from the candidate's own checkout: when that cli.py is broken the gate
    # itself cannot start, and exited 1 (a regression) with a traceback.
    _break(tmp_repo, "harness/cli.py")
    env = {**os.environ, "PYTHONPATH": str(tmp_repo)}
    out = subprocess.run([sys.executable, "-m", "harness", "gate", "--base", "HEAD", "--case", NOOP,
                          "--out", str(tmp_path / "gate")], cwd=tmp_repo, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == EXIT_COULD_NOT_RUN, out.stderr
    assert "cannot start" in out.stderr and "cli.py" in out.stderr and "SyntaxError" in out.stderr


@pytest.mark.integration
@pytest.mark.parametrize("path, said", [("harness/cli.py", "SyntaxError"), ("harness/__init__.py", "SyntaxError"),
                                        ("harness/__main__.py", "harness.__main__")])
def test_a_candidate_that_cannot_start_could_not_run_with_its_stderr(tmp_repo, tmp_path, path, said):
    _break(tmp_repo, path)
    _git(tmp_repo, "commit", "-q", "-am", f"broken {path}")
    out = tmp_path / "gate"
    code = main(["gate", "--repo", str(tmp_repo), "--base", "HEAD~1", "--candidate", "HEAD", "--case", NOOP,
                 "--max-pairs", "2", "--iters", "100", "--out", str(out)])
    data = json.loads((out / "gate.json").read_text())
    assert code == EXIT_COULD_NOT_RUN
    reasons = [data["error"] or ""] + [c["reason"] for c in data["cases"]]
    assert any("candidate" in r and said in r for r in reasons), reasons


# -- worktrees a killed gate or history left ----------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def temp_dir(tmp_path, monkeypatch) -> Path:
    """The temp dir the gate makes its worktrees in, and the sweep looks in: this test's own."""
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def _marked_worktree(repo: Path, where: Path, owner: Owner) -> Path:
    where.mkdir()
    owner.write(where)
    _git(repo, "worktree", "add", "--detach", "--quiet", "--", str(where / "tree"), "HEAD")
    return where / "tree"


def _ours(temp_dir: Path, name: str) -> Path:
    return temp_dir / f"critpath-gate-{name}-x1y2"  # where checkout's tempfile.mkdtemp puts one


def test_the_sweep_removes_only_worktrees_of_critpath_processes_that_are_gone(tiny_repo, temp_dir):
    tmp_path = temp_dir.parent
    me = Owner.me("critpath gate")
    dead = _marked_worktree(tiny_repo, _ours(temp_dir, "dead"), Owner("critpath gate", _dead_pid(), me.host, "0"))
    reused = _marked_worktree(tiny_repo, _ours(temp_dir, "reused"), Owner("critpath history", me.pid, me.host, "1"))
    alive = _marked_worktree(tiny_repo, _ours(temp_dir, "alive"), me)
    elsewhere = _marked_worktree(tiny_repo, _ours(temp_dir, "elsewhere"), Owner("critpath gate", 1, "another-host", None))
    by_hand = tmp_path / "by-hand"
    _git(tiny_repo, "worktree", "add", "--detach", "--quiet", str(by_hand), "HEAD")
    assert me.started is None or owner_of(alive).alive()

    removed = sweep_orphans(tiny_repo)

    left = set(_worktrees(tiny_repo))
    assert {str(alive), str(elsewhere), str(by_hand)} <= left
    assert str(dead) not in left and not dead.parent.exists()
    assert len(removed) == 1 + (me.started is not None)  # a reused pid is told apart by its start time
    if me.started is not None:
        assert str(reused) not in left
    assert (alive.parent / OWNER_FILE).exists()


def _wait_for(condition, what: str, timeout_s: float = 120.0, state=lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s:.0f} s{state()}"
        time.sleep(0.1)


def _left_in(where: Path) -> str:
    """What a cleanup left behind, and which critpath processes still run: a failure says why."""
    left = sorted(str(p.relative_to(where)) for p in where.rglob("*"))[:40]
    alive = subprocess.run(["ps", "-eo", "pid,ppid,stat,etime,args"], capture_output=True, text=True).stdout
    states = {str(p): p.read_text()[-2000:] for p in where.parent.glob("*/runs/*/run.json")}
    return f"; left in {where}: {left}; run.json: {states}; processes:\n" + "\n".join(
        line for line in alive.splitlines() if "harness" in line or "critpath" in line or "defunct" in line)


@pytest.mark.integration
def test_a_worktree_of_a_sigkilled_gate_is_swept_by_the_next_gate(tmp_repo, tmp_path, capsys):
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "gate", "--repo", str(tmp_repo), "--base", "HEAD",
                             "--case", HANG, "--timeout", "120", "--budget", "300", "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: list(out.glob("base/gen-000/worker.log")), "the base worker's start")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    (left,) = [Path(p) for p in _worktrees(tmp_repo) if Path(p) != tmp_repo]
    assert left.is_dir() and owner_of(left).pid == proc.pid

    code = main(["gate", "--repo", str(tmp_repo), "--base", "no-such-ref", "--case", NOOP,
                 "--out", str(tmp_path / "next")])
    assert code == EXIT_COULD_NOT_RUN
    assert _worktrees(tmp_repo) == [str(tmp_repo)]
    assert not left.parent.exists()
    assert f"removed the worktree {left}" in capsys.readouterr().err


@pytest.mark.integration
def test_a_worktree_of_a_sigkilled_history_is_swept_by_the_next_history(tmp_repo, tmp_path, capsys):
    out = tmp_path / "history"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "history", "--repo", str(tmp_repo), "--case", HANG,
                             "--timeout", "120", "--out", str(out), "HEAD"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: len(_worktrees(tmp_repo)) == 2 and list(out.glob("runs/*")), "the commit's run")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    (left,) = [Path(p) for p in _worktrees(tmp_repo) if Path(p) != tmp_repo]
    assert owner_of(left).command == "critpath history"

    code = main(["history", "--repo", str(tmp_repo), "--out", str(out), "nosuch..HEAD"])
    assert code == 2
    assert _worktrees(tmp_repo) == [str(tmp_repo)]
    assert f"removed the worktree {left}" in capsys.readouterr().err


def _other_temp_dir(tmp_path: Path, name: str) -> Path:
    where = tmp_path / name
    where.mkdir()
    return where


@pytest.mark.integration
@pytest.mark.parametrize("command", ["gate", "history"])
def test_a_worktree_left_under_another_temp_dir_is_swept_by_the_next_run(tmp_repo, tmp_path, temp_dir, capsys,
                                                                          command):
    # The killed run had TMPDIR=A, the next one B: the sweep looked only directly under its own
    # temp dir, so the worktree stayed registered, and its directory in A, for ever.
    killed_tmp = _other_temp_dir(tmp_path, "tmp-of-the-killed-run")
    out = tmp_path / "killed"
    argv = (["gate", "--repo", str(tmp_repo), "--base", "HEAD", "--case", HANG, "--budget", "300"]
            if command == "gate" else ["history", "--repo", str(tmp_repo), "--case", HANG])
    proc = subprocess.Popen([sys.executable, "-m", "harness", *argv, "--timeout", "120", "--out", str(out)]
                            + (["HEAD"] if command == "history" else []), cwd=ROOT,
                            env={**os.environ, "TMPDIR": str(killed_tmp)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: list(out.glob("base/gen-000/worker.log") if command == "gate" else out.glob("runs/*")),
                  "the measurement's start")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    (left,) = [Path(p) for p in _worktrees(tmp_repo) if Path(p) != tmp_repo]
    assert left.is_relative_to(killed_tmp) and owner_of(left).pid == proc.pid
    (killed_tmp / "a-file-of-the-users").write_text("keep\n")

    if command == "gate":
        code = main(["gate", "--repo", str(tmp_repo), "--base", "no-such-ref", "--case", NOOP,
                     "--out", str(tmp_path / "next")])
    else:
        code = main(["history", "--repo", str(tmp_repo), "--out", str(out), "nosuch..HEAD"])
    assert code == (EXIT_COULD_NOT_RUN if command == "gate" else 2)
    assert _worktrees(tmp_repo) == [str(tmp_repo)]
    assert not left.parent.exists() and (killed_tmp / "a-file-of-the-users").exists()
    assert f"removed the worktree {left}" in capsys.readouterr().err
    # The killed run's own children (history's `critpath run`, told by SIGTERM) stop and clean up too.
    _wait_for(lambda: os.listdir(killed_tmp) == ["a-file-of-the-users"], "the killed run's children's cleanup", 60,
              lambda: _left_in(killed_tmp))
    assert list((tmp_repo / ".git" / trees.RECORDS_DIR).iterdir()) == []  # nothing of the run is left in the repo


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("killed", ["gate-power", "its process group"])
def test_the_worktrees_of_a_sigkilled_gate_power_are_removed_by_the_rerun(tmp_repo, tmp_path, killed):
    # gate-power's base tree (and each gate's checkouts) are worktrees of its clone in --out, which
    # no sweep looked at: after a SIGKILL they stayed registered, the gate it ran went on alone,
    # and a rerun into the same --out was refused "not empty" with them still there.
    users = tmp_path / "users-own-worktree"
    _git(tmp_repo, "worktree", "add", "--detach", "--quiet", "--", str(users), "HEAD")
    out, killed_tmp, next_tmp = tmp_path / "power", _other_temp_dir(tmp_path, "tmp-a"), _other_temp_dir(tmp_path, "tmp-b")
    clone = out / "clone"
    argv = [sys.executable, "-m", "harness", "gate-power", "--case", NOOP, "--slowdowns", "none", "--trials", "1",
            "--budget", "20", "--out", str(out)]
    proc = subprocess.Popen(argv, cwd=tmp_repo, env={**os.environ, "TMPDIR": str(killed_tmp)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(lambda: list(out.glob("gates/cell-00/trial-00/base/gen-000/worker.log")), "the first trial's start")
    finally:
        (os.killpg if killed != "gate-power" else os.kill)(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    if killed == "gate-power":  # its gate is told, and stops well before its 20 s budget
        _wait_for(lambda: not processes_mentioning(f"harness gate --repo {clone}"), "the orphaned gate's end", 10)
    assert len(_worktrees(clone)) > 1  # its base tree; and the gate's two sides, when the gate was killed too

    env = {**os.environ, "TMPDIR": str(next_tmp)}
    again = subprocess.run(argv, cwd=tmp_repo, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and f"{out} is not empty" in again.stderr, again.stderr
    assert f"left by critpath gate-power (pid {proc.pid} " in again.stderr, again.stderr
    assert _worktrees(clone) == [str(clone)] and os.listdir(killed_tmp) == []

    resumed = subprocess.run(argv + ["--resume"], cwd=tmp_repo, env=env, capture_output=True, text=True, timeout=400)
    assert resumed.returncode in (0, 1), resumed.stderr
    assert len(json.loads((out / "power.json").read_text())["trials"]) == 1
    assert _worktrees(clone) == [str(clone)]  # the finished run's own trees are gone too
    assert os.listdir(next_tmp) == [] and not processes_mentioning(str(out))
    assert _worktrees(tmp_repo) == [str(tmp_repo), str(users)]  # the user's repo kept what it had


# -- a sweep removes only what the project made ---------------------------------------------------


def test_an_owner_file_beside_a_checkout_the_project_did_not_make_deletes_nothing(tiny_repo, temp_dir):
    # An owner file with a dead pid beside the main checkout, and beside a worktree made by hand:
    # the sweep removed the parent of each, the clone's .git and the user's files with it.
    dead = Owner("critpath gate", _dead_pid(), Owner.me("x").host, "0")
    dead.write(tiny_repo.parent)
    (tiny_repo.parent / "important.txt").write_text("keep\n")
    by_hand = temp_dir / "mine"  # under the temp dir, but not a directory the gate makes
    by_hand_tree = _marked_worktree(tiny_repo, by_hand, dead)
    named_like_ours = tiny_repo.parent / "critpath-gate-base-abc"  # the prefix, but not under the temp dir
    like_ours_tree = _marked_worktree(tiny_repo, named_like_ours, dead)

    assert sweep_orphans(tiny_repo) == []

    assert (tiny_repo / ".git").is_dir() and (tiny_repo.parent / "important.txt").exists()
    assert set(_worktrees(tiny_repo)) == {str(tiny_repo), str(by_hand_tree), str(like_ours_tree)}
    assert by_hand_tree.is_dir() and like_ours_tree.is_dir()


@pytest.mark.parametrize("text, field", [('{"command": "critpath gate", "pid": 1099511627776, "host": "%s", '
                                          '"started": "0"}', "pid"),
                                         ('{"command": "rm -rf", "pid": 1, "host": "%s", "started": null}', "command"),
                                         ('{"command": "critpath gate", "pid": "7", "host": "%s", "started": null}',
                                          "pid"),
                                         ("[1, 2]", "fields"), ("{", "JSON")])
def test_a_malformed_owner_file_is_left_alone_with_a_warning(tiny_repo, temp_dir, text, field):
    # A pid of 2**40 raised OverflowError in os.kill: every later gate and history crashed.
    where = _ours(temp_dir, "odd")
    tree = _marked_worktree(tiny_repo, where, Owner.me("critpath gate"))
    (where / OWNER_FILE).write_text(text % Owner.me("x").host if "%s" in text else text)

    said = sweep_orphans(tiny_repo)

    assert len(said) == 1 and "left the worktree" in said[0] and field in said[0], said
    assert str(tree) in _worktrees(tiny_repo) and (where / OWNER_FILE).exists()


def test_a_worktree_locked_while_git_added_it_is_removed_and_only_what_went_is_reported(tiny_repo, temp_dir):
    # A gate killed during `git worktree add` leaves the worktree locked ("initializing"): a single
    # --force and prune skip it; the sweep said "removed" anyway, deleted the owner file, and the
    # worktree stayed registered for ever.
    dead = Owner("critpath gate", _dead_pid(), Owner.me("x").host, "0")
    tree = _marked_worktree(tiny_repo, _ours(temp_dir, "locked"), dead)
    _git(tiny_repo, "worktree", "lock", "--reason", "initializing", "--", str(tree))

    said = sweep_orphans(tiny_repo)

    assert said == [f"removed the worktree {tree}, left by {dead.describe()}, which is no longer running"]
    assert _worktrees(tiny_repo) == [str(tiny_repo)] and not tree.parent.exists()


def test_a_worktree_whose_path_holds_a_newline_is_swept(tiny_repo, tmp_path, monkeypatch):
    newline_tmp = tmp_path / "tmp\nwith a newline"
    newline_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(newline_tmp))
    dead = Owner("critpath gate", _dead_pid(), Owner.me("x").host, "0")
    tree = _marked_worktree(tiny_repo, _ours(newline_tmp, "nl"), dead)

    assert len(sweep_orphans(tiny_repo)) == 1
    assert not tree.parent.exists()
    assert "with a newline" not in _git(tiny_repo, "worktree", "list", "--porcelain")


# -- git runs on the repository it is told, whatever the environment says -----------------------


def test_git_index_file_in_the_environment_does_not_reach_the_users_index(tiny_repo, monkeypatch):
    # A git hook exports GIT_INDEX_FILE: `git worktree add` then wrote the base tree into the
    # user's index (git status: "D n" and "?? n").
    (tiny_repo / "n").write_text("n\n")
    _git(tiny_repo, "add", "n")
    _git(tiny_repo, "commit", "-q", "-m", "two")
    monkeypatch.setenv("GIT_INDEX_FILE", str(tiny_repo / ".git" / "index"))
    with checkout(tiny_repo, "HEAD~1", "base") as tree:
        assert not (tree.path / "n").exists()
    monkeypatch.delenv("GIT_INDEX_FILE")
    assert _git(tiny_repo, "status", "--porcelain") == ""


def test_git_dir_in_the_environment_does_not_override_the_repo(tiny_repo, tmp_path, monkeypatch):
    other = _one_commit_repo(tmp_path / "other", "other\n")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    with checkout(tiny_repo, "HEAD", "base") as tree:
        assert (tree.path / "README").read_text() == "x\n"
        assert tree.commit == _git(tiny_repo, "--git-dir", str(tiny_repo / ".git"), "rev-parse", "HEAD")
    assert fingerprint.git_commit(tiny_repo)["commit"] == tree.commit
    assert [p.name for p in registered_worktrees(tiny_repo)] == [tiny_repo.name]


def test_every_git_variable_git_lists_as_local_is_dropped_but_configuration():
    local = subprocess.run(["git", "rev-parse", "--local-env-vars"], capture_output=True, text=True,
                           check=True).stdout.split()
    env = git_env({name: "x" for name in local + ["GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES", "PATH"]})
    assert env == {"PATH": "x", **{name: "x" for name in local if name.startswith("GIT_CONFIG")}}


# -- output a tree gives that the gate cannot read is could_not_run -----------------------------

GATE_FAST = ["--case", NOOP, "--budget", "4", "--max-pairs", "3"]  # ends "too few pairs ... --max-pairs" when it ran


def _commit_change(repo: Path, path: str, text: str, message: str) -> None:
    target = repo / path
    target.write_text(target.read_text() + text)
    _git(repo, "commit", "-q", "-am", message)


@pytest.mark.parametrize("text", ['\nimport sys\nif sys.argv[0] == "-c":\n    sys.exit(0)\n',
                                  '\nimport atexit\natexit.register(print, "critpath-probe-result: {")\n'])
def test_a_candidate_whose_probe_output_cannot_be_read_could_not_run(tmp_repo, tmp_path, text):
    # json.loads of the last line raised IndexError (no output): exit 1, which CI reads as a regression.
    _commit_change(tmp_repo, "harness/__init__.py", text, "odd output")
    out = tmp_path / "gate"
    code = main(["gate", "--repo", str(tmp_repo), "--base", "HEAD~1", "--candidate", "HEAD", *GATE_FAST,
                 "--out", str(out)])
    data = json.loads((out / "gate.json").read_text())
    assert code == EXIT_COULD_NOT_RUN
    assert "candidate" in data["error"] and "no result the gate can read" in data["error"], data["error"]


@pytest.mark.integration
def test_a_candidate_that_prints_at_exit_is_probed_and_measured(tmp_repo, tmp_path):
    # The probe read the last line of output as its JSON: an atexit print made it JSONDecodeError,
    # exit 1. Its result is now marked, so what else a tree prints does not matter.
    _commit_change(tmp_repo, "harness/__init__.py", '\nimport atexit\natexit.register(print, "x")\n', "prints")
    out = tmp_path / "gate"
    code = main(["gate", "--repo", str(tmp_repo), "--base", "HEAD~1", "--candidate", "HEAD", *GATE_FAST,
                 "--out", str(out)])
    data = json.loads((out / "gate.json").read_text())
    assert code == EXIT_COULD_NOT_RUN and not data["error"], data
    assert "too few pairs to decide" in data["cases"][0]["reason"]  # it ran


@pytest.mark.slow
@pytest.mark.integration
def test_a_commit_whose_probe_output_cannot_be_read_fails_alone_and_the_range_goes_on(tmp_repo, tmp_path, capsys):
    _git(tmp_repo, "branch", "-M", "main")  # the branch asv.conf.json names
    _commit_change(tmp_repo, "harness/__init__.py", '\nimport sys\nif sys.argv[0] == "-c":\n    sys.exit(0)\n', "bad")
    _git(tmp_repo, "checkout", "HEAD~1", "--", "harness/__init__.py")
    _git(tmp_repo, "commit", "-q", "-m", "good2")
    code = main(["history", "--repo", str(tmp_repo), "--case", NOOP, "--out", str(tmp_path / "h"), "HEAD~2..HEAD"])
    said = capsys.readouterr().out
    assert code == 1, said  # a commit that could not be recorded
    assert "1 filed, 0 skipped, 1 could not be recorded" in said, said
    assert "bad: failed" in said and "no result the gate can read" in said, said


def test_a_tree_that_hangs_in_critpath_list_could_not_run_naming_the_tree(tmp_repo, tmp_path, monkeypatch):
    # subprocess.TimeoutExpired escaped list_cases: exit 1 after 120 s.
    monkeypatch.setattr(trees, "GIT_TIMEOUT_S", 3)
    _commit_change(tmp_repo, "harness/__init__.py", "\nimport time\ntime.sleep(400)\n", "hangs")
    out = tmp_path / "gate"
    code = main(["gate", "--repo", str(tmp_repo), "--base", "HEAD~1", "--candidate", "HEAD", "--families", "selftest",
                 "--budget", "4", "--out", str(out)])
    error = json.loads((out / "gate.json").read_text())["error"]
    assert code == EXIT_COULD_NOT_RUN
    assert "candidate (HEAD)" in error and "took over 3 s" in error, error


# -- paths are the user's -----------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("given", [["--out", "rel/gate"], []])
def test_a_gate_with_a_relative_out_run_from_another_directory_keeps_the_bases_records(tmp_repo, tmp_path,
                                                                                        monkeypatch, given):
    # Workers ran in the temporary worktree with --out unresolved: they wrote there, and every
    # case was "base round 0 ... has no record" (the README's usage, without --out, never worked).
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    code = main(["gate", "--repo", str(tmp_repo), "--base", "HEAD", *GATE_FAST, *given])
    (out,) = [cwd / "rel" / "gate"] if given else list((cwd / "reports").glob("gate-*"))
    data = json.loads((out / "gate.json").read_text())
    reasons = " ".join(c["reason"] for c in data["cases"])
    assert code == EXIT_COULD_NOT_RUN and not data["error"], data
    assert "has no record" not in reasons and "too few pairs to decide" in reasons, reasons
    assert list(out.glob("base/gen-000/*")), "the base's records are under --out"


# -- the command starts even when the package does not ---------------------------------------


def test_the_start_guards_exit_code_is_the_projects_exit_usage():
    from harness.__main__ import EXIT_USAGE as written_out
    from harness.core.options import EXIT_USAGE

    assert written_out == EXIT_USAGE == EXIT_COULD_NOT_RUN


def test_a_checkout_whose_options_module_does_not_import_exits_2(tmp_repo):
    _break(tmp_repo, "harness/core/options.py")
    out = subprocess.run([sys.executable, "-m", "harness", "--help"], cwd=tmp_repo,
                         env={**os.environ, "PYTHONPATH": str(tmp_repo)}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "cannot start" in out.stderr and "options.py" in out.stderr


# -- refs, and words that name more than one thing ------------------------------------------------


def test_a_text_search_ref_names_its_commit(tiny_repo):
    (tiny_repo / "README").write_text("y\n")
    _git(tiny_repo, "commit", "-q", "-am", "second one")
    head = _git(tiny_repo, "rev-parse", "HEAD")
    assert resolve(tiny_repo, ":/second") == head
    assert resolve(tiny_repo, ":/^one") == _git(tiny_repo, "rev-parse", "HEAD~1")
    tree = _git(tiny_repo, "rev-parse", "HEAD^{tree}")
    with pytest.raises(TreeError, match="does not name a commit"):
        resolve(tiny_repo, tree)


def test_worktree_is_refused_when_a_branch_is_named_worktree_too(tiny_repo, tmp_path, capsys):
    _git(tiny_repo, "branch", "worktree")
    code = main(["gate", "--repo", str(tiny_repo), "--base", "HEAD", "--candidate", "worktree", "--case", NOOP,
                 "--out", str(tmp_path / "gate")])
    err = capsys.readouterr().err
    assert code == EXIT_COULD_NOT_RUN
    assert "ambiguous" in err and "refs/heads/worktree" in err, err


@pytest.mark.parametrize("argv", [["history", "--machine=-x", "HEAD"], ["history", "--case=--help", "HEAD"],
                                  ["gate", "--base", "HEAD", "--families=-x"], ["gate", "--base", "HEAD", "--case=-h"]])
def test_user_text_that_a_child_would_read_as_an_option_is_refused_up_front(tiny_repo, tmp_path, capsys, argv):
    # It reached asv ("expected one argument"), the tree's critpath run and critpath list.
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--repo", str(tiny_repo), "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2
    assert "is not a" in capsys.readouterr().err


# -- asv's benchmark processes import only the measured commit's code ---------------------------

_WHERE_BENCH = '''import os
try:
    import harness.microbench as m
    where = m.__file__
except ImportError as exc:
    where = "ImportError"
with open(os.environ["WHERE_FILE"], "a") as f:
    f.write(os.path.basename(os.environ.get("CRITPATH_ASV_RUN", "")) + " " + where + "\\n")


def track_where():
    return 1
'''


@pytest.mark.slow
@pytest.mark.integration
def test_asvs_benchmark_processes_do_not_import_a_module_the_commit_lacks(editable_install, tmp_repo, tmp_path,
                                                                          monkeypatch):
    # asv adds ASV_PYTHONPATH to sys.path after the interpreter started, so the own_tree
    # sitecustomize never ran there: a commit without harness/microbench.py imported the
    # installed checkout's in the benchmark.
    _git(tmp_repo, "branch", "-M", "main")  # the branch asv.conf.json names
    (tmp_repo / "benchmarks" / "bench_a_where.py").write_text(_WHERE_BENCH)  # first: discovery stops at an error
    _git(tmp_repo, "add", "-A")
    _git(tmp_repo, "commit", "-q", "-m", "where")
    _git(tmp_repo, "rm", "-q", "harness/microbench.py")
    _git(tmp_repo, "commit", "-q", "-m", "no microbench")
    with_module, without = _git(tmp_repo, "rev-parse", "HEAD~1"), _git(tmp_repo, "rev-parse", "HEAD")
    where = tmp_path / "where.txt"
    monkeypatch.setenv("WHERE_FILE", str(where))
    main(["history", "--repo", str(tmp_repo), "--case", NOOP, "--out", str(tmp_path / "h"), "HEAD~2..HEAD"])
    seen = [line.split(" ", 1) for line in where.read_text().splitlines()]
    assert {sha for sha, _ in seen} == {with_module, without}, seen
    for sha, imported in seen:
        if sha == without:
            assert imported == "ImportError", seen
        else:
            assert "critpath-gate-history-" in imported and imported.endswith("/tree/harness/microbench.py"), seen


def test_the_tree_variable_is_declared_alike_on_both_sides_of_the_import_boundary():
    sys.path.insert(0, str(trees.OWN_TREE))
    try:
        import critpath_own_tree
    finally:
        sys.path.remove(str(trees.OWN_TREE))
    assert critpath_own_tree.TREE_ENV == trees.TREE_ENV


def test_gate_power_gets_its_out_as_an_absolute_path(tmp_path, monkeypatch):
    # A relative --out (the default reports/gate-power) was joined again inside the clone by
    # `git -C clone worktree add`: "No such file '../gp/base-tree'", made at gp/gp/base-tree.
    from harness.gatepower import power

    seen = []
    monkeypatch.setattr(power, "measure", lambda request: seen.append(request) or {})
    monkeypatch.setattr(power, "table", lambda doc: "")
    monkeypatch.chdir(tmp_path)
    main(["gate-power", "--case", NOOP, "--out", "gp"])
    assert seen and seen[0].out == tmp_path / "gp"


def test_asv_under_history_and_gate_power_does_not_see_a_hooks_git_dir(tmp_path, monkeypatch):
    """asv runs git itself: a GIT_DIR a hook exported made history's asv read another repository
    ("NoSuchNameError", the commit not filed) and gate-power's asv trial likewise."""
    from harness.gatepower import tools
    from harness.history import campaign

    monkeypatch.setenv("GIT_DIR", str(tmp_path / "other" / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "index"))
    seen = []

    class Popen:
        def __init__(self, args, env=None, **_):
            seen.append(env)

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(campaign.subprocess, "Popen", Popen)
    monkeypatch.setattr(campaign, "_wait", lambda proc: 0)
    with open(tmp_path / "log", "w") as log:
        campaign._asv(["machine", "--yes"], log, campaign.asv_home(tmp_path), env={"ASV_PYTHONPATH": "x"})
    monkeypatch.setattr(tools, "_run", lambda args, cwd, env: seen.append(env) or "")
    (tmp_path / "scratch" / "asv_benchmarks").mkdir(parents=True)  # what _asv_config makes
    monkeypatch.setattr(tools, "_asv_config", lambda scratch, repo: scratch / "asv.conf.json")
    monkeypatch.setattr(tools, "_asv_verdict", lambda out, factor: None)
    tools.asv_trial(tmp_path / "scratch", tmp_path, "selftest/x=1", {"base": ("a", tmp_path), "candidate": ("b", tmp_path)})
    assert len(seen) >= 4
    assert all("GIT_DIR" not in env and "GIT_INDEX_FILE" not in env for env in seen)
    assert seen[0]["ASV_PYTHONPATH"] == "x"
