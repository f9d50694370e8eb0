"""A directory tree walked within a declared depth and a declared count of directories.

``os.walk`` and ``Path.rglob`` recurse once per level: a tree nested 1,100 deep raised
RecursionError, a traceback naming no directory, and a tree of a million directories is walked
whole before anything is refused. Each reader of a tree knows how deep its files lie (asv's
results two levels down, a compare side's runs a few) and how many directories it can use; this
walk goes no deeper and no wider, and refuses past either limit naming the directory and the limit.
"""
from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from typing import Iterator


class WalkError(ValueError):
    """A tree deeper or larger than its reader declares; the message starts with the directory."""


def walk_bounded(root: Path, what: str, max_depth: int, max_dirs: int,
                 prune: bool = False, refuse_links: bool = False) -> Iterator[tuple[Path, list[str]]]:
    """(directory, the names of its non-directories, sorted) for ``root`` and every directory
    below it, ``root`` first, breadth-first and without recursion. ``max_depth`` counts the levels
    of directories below ``root`` (0: ``root`` alone); a directory below the last level, or more
    than ``max_dirs`` directories in all, is refused with WalkError. Links to directories are not
    followed (as ``os.walk`` and ``rglob`` do not): a link cannot make a tree endless. ``prune``:
    a directory below the last level is left unread instead of refused (a reader that looks only
    so deep, and has nothing to refuse deeper). ``refuse_links``: a link to a directory below
    ``root`` is refused with WalkError naming it, for a reader that would otherwise miss what lies
    there without a word (a compare side's run linked in among its repeats, a machine's
    directory linked into asv's results)."""
    root = Path(root)
    queue = deque([(root, 0)])
    seen = 0
    while queue:
        directory, depth = queue.popleft()
        seen += 1
        if seen > max_dirs:
            raise WalkError(f"{root}: more than {max_dirs} directories; {what} reads at most {max_dirs}")
        try:
            with os.scandir(directory) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError:
            continue  # as os.walk: a directory that cannot be listed holds nothing to read
        names = []
        for entry in listed:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if not is_dir:
                if refuse_links and entry.is_symlink() and os.path.isdir(entry.path):
                    raise WalkError(f"{Path(entry.path)} is a symbolic link to a directory "
                                    f"({os.readlink(entry.path)}); {what} does not follow links below {root} "
                                    "(a link could name one directory twice or make the tree endless): copy what it "
                                    "links to in instead")
                names.append(entry.name)
                continue
            if depth >= max_depth:
                if prune:
                    continue
                raise WalkError(f"{Path(entry.path)}: more than {max_depth} directories below {root}; "
                                f"{what} reads at most {max_depth} levels")
            queue.append((Path(entry.path), depth + 1))
        yield directory, names
