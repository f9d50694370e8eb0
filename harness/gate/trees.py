"""Source trees for the two sides of an A/B: the working tree, or a ref checked out with
``git worktree add`` in a temporary directory (removed afterwards, even on failure; one that a
killed gate or history left is removed by the next, ``harness.gate.owned``).

The project is pure Python, so a side runs as ``python -m harness`` with its tree first on
PYTHONPATH; nothing is reinstalled. Every process of a tree starts with ``OWN_TREE`` ahead of
it on PYTHONPATH, whose ``sitecustomize`` takes an editable install's finder away: a tree then
imports only its own ``harness``, never a module it lacks from the installed checkout. The probe
below confirms it: every ``harness`` module the probe loaded must come from the side's tree.

A ref is the user's text: it is refused when it starts with ``-`` and checked as a commit
(``rev-parse --verify --end-of-options REF^{commit}``) before git sees it anywhere else, so no
ref is ever read as an option.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

from harness.gate.owned import Owner, owner_of

WORKTREE = "worktree"  # --candidate worktree: the checkout the command runs from, edits included
BASE, CANDIDATE = "base", "candidate"  # the two sides' labels, in records' paths and results
GIT_TIMEOUT_S = 120
# Leads the PYTHONPATH of every process of a tree; holds only sitecustomize.py (see its docstring).
OWN_TREE = Path(__file__).resolve().with_name("own_tree")


def python_path(tree: Path, old: Optional[str] = None) -> str:
    """PYTHONPATH for a process of the tree at ``tree``: the bootstrap that drops an editable
    install's finder, then the tree, then ``old``."""
    return os.pathsep.join([str(OWN_TREE), str(tree)] + ([old] if old else []))


class TreeError(RuntimeError):
    """A side that cannot be set up: unknown ref, not a git checkout, a probe that fails."""


@dataclass(frozen=True)
class Tree:
    label: str  # "base" or "candidate"
    ref: str  # as the user gave it
    path: Path  # first on PYTHONPATH, after OWN_TREE
    commit: Optional[str]  # resolved SHA; None for an uncommitted working tree
    dirty: bool = False

    def python_path(self, old: Optional[str] = None) -> str:
        return python_path(self.path, old)

    def env(self, base_env: Optional[dict] = None) -> dict:
        """The environment of every process started from this tree (asv's, which replaces
        PYTHONPATH by ASV_PYTHONPATH, gets ``python_path()`` there)."""
        env = dict(os.environ if base_env is None else base_env)
        env["PYTHONPATH"] = self.python_path(env.get("PYTHONPATH"))
        return env

    def to_dict(self) -> dict:
        return {"label": self.label, "ref": self.ref, "path": str(self.path), "commit": self.commit, "dirty": self.dirty}


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=check)
    except FileNotFoundError:
        raise TreeError("git is not installed; the gate needs it to check out the base") from None
    except subprocess.CalledProcessError as exc:
        raise TreeError(f"git {' '.join(args)}: {exc.stderr.strip() or exc}") from None


def repo_root(start: Path) -> Path:
    result = _git(start, "rev-parse", "--show-toplevel", check=False)
    if result.returncode != 0:
        raise TreeError(f"{start} is not inside a git checkout: {result.stderr.strip()}")
    return Path(result.stdout.strip())


def resolve(repo: Path, ref: str) -> str:
    """The commit ``ref`` names, as a full SHA; TreeError naming the ref when it names none."""
    if not ref or ref.startswith("-"):
        raise TreeError(f"ref {ref!r} is not a ref: a ref cannot be empty or start with '-'")
    result = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
    if result.returncode != 0 or not result.stdout.strip():
        raise TreeError(f"ref {ref!r} does not name a commit in {repo}")
    return result.stdout.strip()


def working_tree(repo: Path, label: str) -> Tree:
    head = _git(repo, "rev-parse", "HEAD", check=False).stdout.strip() or None
    dirty = bool(_git(repo, "status", "--porcelain", "--untracked-files=no", check=False).stdout.strip())
    return Tree(label, WORKTREE, repo, head, dirty)


def _remove(repo: Path, path: Path) -> None:
    if path.exists():
        _git(repo, "worktree", "remove", "--force", "--", str(path), check=False)
    shutil.rmtree(path.parent, ignore_errors=True)


@contextlib.contextmanager
def checkout(repo: Path, ref: str, label: str, command: str = "critpath gate") -> Iterator[Tree]:
    """``git worktree add --detach`` of ``ref`` into a temp dir, marked as ``command``'s; always
    removed afterwards."""
    if ref == WORKTREE:
        yield working_tree(repo, label)
        return
    sha = resolve(repo, ref)
    parent = Path(tempfile.mkdtemp(prefix=f"critpath-gate-{label}-"))
    path = parent / "tree"
    try:
        Owner.me(command).write(parent)  # before the worktree exists: no moment leaves it unmarked
        _git(repo, "worktree", "add", "--detach", "--quiet", "--", str(path), sha)
        yield Tree(label, ref, path, sha)
    finally:
        _remove(repo, path)
        _git(repo, "worktree", "prune", check=False)


def sweep_orphans(repo: Path) -> list[str]:
    """Remove the worktrees of ``repo`` that a critpath process made and that outlived it (it was
    killed outright); what was removed, as sentences. Worktrees it did not make, and those whose
    owner lives, are left alone."""
    listed = _git(repo, "worktree", "list", "--porcelain", check=False).stdout
    removed = []
    for line in listed.splitlines():
        if not line.startswith("worktree "):
            continue
        path = Path(line[len("worktree "):])
        owner = owner_of(path)
        if owner is not None and not owner.alive():
            _remove(repo, path)
            removed.append(f"removed the worktree {path}, left by {owner.describe()}, which is no longer running")
    if removed:
        _git(repo, "worktree", "prune", check=False)
    return removed


_PROBE = r"""
import importlib, json, sys
import harness
try:
    from harness.core import registry
except ImportError:  # a tree of 0.1: harness/registry.py
    from harness import registry
unknown = {}
for case_id in sys.argv[1:]:
    try:
        registry.parse(case_id)
    except Exception as exc:
        unknown[case_id] = str(exc)
protocol = None  # a tree from before the worker: each round is a fresh `critpath run`
for where in ("harness.run.rounds", "harness.rounds"):  # the worker's module, then its place before 0.2
    try:
        protocol = importlib.import_module(where).PROTOCOL
        break
    except ImportError:
        pass
loaded = {name: module.__file__ for name, module in list(sys.modules.items())
          if (name == "harness" or name.startswith("harness.")) and getattr(module, "__file__", None)}
print(json.dumps({"harness_file": harness.__file__, "unknown": unknown, "worker_protocol": protocol,
                  "loaded": loaded}))
"""


@dataclass(frozen=True)
class Probe:
    harness_file: str
    unknown: dict  # case ID -> why this tree does not know it
    worker_protocol: Optional[int] = None  # None: the tree has no `critpath worker`


def probe(tree: Tree, case_ids: Sequence[str], python: str = sys.executable) -> Probe:
    """Import the side's ``harness`` from its tree and parse every case ID there."""
    try:
        result = subprocess.run([python, "-c", _PROBE, *case_ids], cwd=tree.path, env=tree.env(),
                                capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TreeError(f"{tree.label} ({tree.ref}): probing the tree took over {GIT_TIMEOUT_S} s") from None
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TreeError(f"{tree.label} ({tree.ref}): cannot import harness from {tree.path}: {tail}")
    data = json.loads(result.stdout.strip().splitlines()[-1])
    found = Path(data["harness_file"]).resolve()
    root = tree.path.resolve()
    foreign = sorted(name for name, path in data["loaded"].items() if root not in Path(path).resolve().parents)
    if root not in found.parents or foreign:
        where = data["loaded"].get(foreign[0]) if foreign else found
        raise TreeError(f"{tree.label} ({tree.ref}): imports {foreign[0] if foreign else 'harness'} from {where}, "
                        f"not from {tree.path}; is another copy shadowing it on sys.path?")
    return Probe(str(found), dict(data["unknown"]), data.get("worker_protocol"))


def list_cases(tree: Tree, families: Sequence[str], profile: str, python: str = sys.executable) -> list[str]:
    """The case IDs of ``families`` as this tree's ``critpath list`` gives them."""
    args = [python, "-m", "harness", "list", "--families", ",".join(families), f"--{profile}"]
    result = subprocess.run(args, cwd=tree.path, env=tree.env(), capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TreeError(f"{tree.label} ({tree.ref}): critpath list --families {','.join(families)}: {tail}")
    return [line.strip() for line in result.stdout.splitlines() if line.startswith("  ") and "/" in line]

