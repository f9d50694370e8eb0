"""Source trees for the two sides of an A/B: the working tree, or a ref checked out with
``git worktree add`` in a temporary directory (removed afterwards, even on failure).

The project is pure Python, so a side runs as ``python -m harness`` with its tree first on
PYTHONPATH; nothing is reinstalled. The probe below confirms that the side really imports its
own ``harness`` (an editable install of the other tree would otherwise shadow it silently).

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

WORKTREE = "worktree"  # --candidate worktree: the checkout the command runs from, edits included
BASE, CANDIDATE = "base", "candidate"  # the two sides' labels, in records' paths and results
GIT_TIMEOUT_S = 120


class TreeError(RuntimeError):
    """A side that cannot be set up: unknown ref, not a git checkout, a probe that fails."""


@dataclass(frozen=True)
class Tree:
    label: str  # "base" or "candidate"
    ref: str  # as the user gave it
    path: Path  # goes first on PYTHONPATH
    commit: Optional[str]  # resolved SHA; None for an uncommitted working tree
    dirty: bool = False

    def env(self, base_env: Optional[dict] = None) -> dict:
        env = dict(os.environ if base_env is None else base_env)
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(self.path) + (os.pathsep + old if old else "")
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


@contextlib.contextmanager
def checkout(repo: Path, ref: str, label: str) -> Iterator[Tree]:
    """``git worktree add --detach`` of ``ref`` into a temp dir; always removed afterwards."""
    if ref == WORKTREE:
        yield working_tree(repo, label)
        return
    sha = resolve(repo, ref)
    parent = Path(tempfile.mkdtemp(prefix=f"critpath-gate-{label}-"))
    path = parent / "tree"
    try:
        _git(repo, "worktree", "add", "--detach", "--quiet", "--", str(path), sha)
        yield Tree(label, ref, path, sha)
    finally:
        if path.exists():
            _git(repo, "worktree", "remove", "--force", "--", str(path), check=False)
        shutil.rmtree(parent, ignore_errors=True)
        _git(repo, "worktree", "prune", check=False)


_PROBE = r"""
import json, sys
import harness
from harness.core import registry
unknown = {}
for case_id in sys.argv[1:]:
    try:
        registry.parse(case_id)
    except Exception as exc:
        unknown[case_id] = str(exc)
try:
    from harness.run.rounds import PROTOCOL as protocol
except ImportError:  # a tree from before the worker: each round is a fresh `critpath run`
    protocol = None
print(json.dumps({"harness_file": harness.__file__, "unknown": unknown, "worker_protocol": protocol}))
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
    if tree.path.resolve() not in found.parents:
        raise TreeError(f"{tree.label} ({tree.ref}): imports harness from {found}, not from {tree.path}; "
                        "is another copy shadowing it on sys.path?")
    return Probe(str(found), dict(data["unknown"]), data.get("worker_protocol"))


def list_cases(tree: Tree, families: Sequence[str], profile: str, python: str = sys.executable) -> list[str]:
    """The case IDs of ``families`` as this tree's ``critpath list`` gives them."""
    args = [python, "-m", "harness", "list", "--families", ",".join(families), f"--{profile}"]
    result = subprocess.run(args, cwd=tree.path, env=tree.env(), capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TreeError(f"{tree.label} ({tree.ref}): critpath list --families {','.join(families)}: {tail}")
    return [line.strip() for line in result.stdout.splitlines() if line.startswith("  ") and "/" in line]

