"""The one environment every git call of the project runs under.

A git hook, ``git rebase --exec`` and ``git bisect run`` export ``GIT_DIR``, ``GIT_INDEX_FILE``
and their kin to whatever they start. Inherited by the gate's ``git -C REPO worktree add``, they
win over ``-C``: ``GIT_DIR`` checks out and measures another repository's ref, ``GIT_INDEX_FILE``
writes the base tree into the user's own index. A call here names its repository with ``-C`` and
means only that one, so these variables (git's own list, ``git rev-parse --local-env-vars``, and
the ones that also choose a repository) never reach git from this project.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Mapping, Optional

# `git rev-parse --local-env-vars` (git 2.43) but its configuration variables, and GIT_NAMESPACE and
# GIT_CEILING_DIRECTORIES, which also change which repository or refs a command sees. The
# configuration ones (GIT_CONFIG_PARAMETERS, GIT_CONFIG_COUNT, ...: a `git -c` or a CI's identity)
# choose no repository, and stay.
REPOSITORY_ENV = (
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE", "GIT_INDEX_FILE", "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE", "GIT_PREFIX", "GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE", "GIT_COMMON_DIR",
    "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES",
)


def git_env(base: Optional[Mapping[str, str]] = None) -> dict:
    """``base`` (default: this process's environment) without the variables that choose a
    repository, an index or a work tree other than the one ``-C`` names."""
    env = dict(os.environ if base is None else base)
    for name in REPOSITORY_ENV:
        env.pop(name, None)
    return env


def run_git(repo: Path, *args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
    """``git -C repo ARGS`` under ``git_env()``, output captured as text."""
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=timeout,
                          check=check, env=git_env())


def over_repository(repo: Path, path: Path) -> str:
    """Why writing ``path`` would write over the git repository ``repo`` (its top): it is the
    repository, holds it, or is or holds a file git tracks there, whose bytes are what a gate or a
    history measures; "" when it does none of these (outside it, or inside where git tracks
    nothing: REPO/reports, REPO/.asv). Said as a predicate of ``path``: "is the repository ...".
    Every command that measures a repository and writes an output checks each output here."""
    repo, path = Path(repo).resolve(), Path(path).resolve()
    if repo == path:
        return "is the repository being measured"
    if repo.is_relative_to(path):
        return f"is a directory that holds the repository {repo} being measured"
    if not path.is_relative_to(repo):
        return ""
    inside = path.relative_to(repo)
    listed = run_git(repo, "ls-files", "-z", "--", f":(literal){inside}")
    if listed.returncode != 0:
        return f"is inside the repository {repo} being measured, and git ls-files failed there: {listed.stderr.strip()}"
    tracked = [name for name in listed.stdout.split("\0") if name]
    if tracked == [inside.as_posix()]:
        return "is a file git tracks in the repository being measured"
    if tracked:
        return f"holds {len(tracked)} file(s) of the repository being measured (first {repo / tracked[0]})"
    return ""
