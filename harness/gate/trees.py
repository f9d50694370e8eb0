"""Source trees for the two sides of an A/B: the working tree, or a ref checked out with
``git worktree add`` in a temporary directory (removed afterwards, even on failure; one that a
killed gate, history or gate-power left is removed by the next, ``harness.gate.owned``). Each
such directory is also recorded in the repository's own git directory (``RECORDS_DIR``), so the
sweep finds it whatever ``TMPDIR`` the killed process and the next one ran with.

The project is pure Python, so a side runs as ``python -m harness`` with its tree first on
PYTHONPATH; nothing is reinstalled. Every process of a tree starts with ``OWN_TREE`` ahead of
it on PYTHONPATH, whose ``sitecustomize`` takes an editable install's finder away: a tree then
imports only its own ``harness``, never a module it lacks from the installed checkout. The probe
below confirms it: every ``harness`` module the probe loaded must come from the side's tree.

A ref is the user's text: it is refused when it starts with ``-`` and checked as a commit
(``rev-parse --verify --end-of-options REF``, then that object peeled to a commit) before git sees
it anywhere else, so no ref is ever read as an option. Every git call runs under
``harness.core.git``'s environment, so a hook's ``GIT_DIR`` or ``GIT_INDEX_FILE`` never wins over
the repository named.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

from harness.core.git import run_git
from harness.core.inputfile import read_bounded
from harness.core.runfiles import GATE_SIDES
from harness.core.jsonfile import JsonLimits, loads_strict
from harness.gate.owned import OWNER_FILE, Malformed, Owner, owner_of

WORKTREE = "worktree"  # --candidate worktree: the checkout the command runs from, edits included
BASE, CANDIDATE = GATE_SIDES  # the two sides' labels, in records' paths and results
GIT_TIMEOUT_S = 120
# Leads the PYTHONPATH of every process of a tree; holds only sitecustomize.py (see its docstring).
OWN_TREE = Path(__file__).resolve().with_name("own_tree")
TREE_ENV = "CRITPATH_OWN_TREE"  # = critpath_own_tree.TREE_ENV (there, it cannot import harness); a test holds them equal


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
    # The TMPDIR of every process started from this tree, inside the directory ``checkout`` made:
    # what a child killed before it could clean up left there goes with the tree, by the command's
    # own clean-up or the next sweep, whatever TMPDIR that command ran with. None: the user's tree.
    temp_dir: Optional[Path] = None

    def python_path(self, old: Optional[str] = None) -> str:
        return python_path(self.path, old)

    def env(self, base_env: Optional[dict] = None) -> dict:
        """The environment of every process started from this tree (asv's, which replaces
        PYTHONPATH by ASV_PYTHONPATH, gets ``asv_env()``)."""
        env = dict(os.environ if base_env is None else base_env)
        env["PYTHONPATH"] = self.python_path(env.get("PYTHONPATH"))
        env[TREE_ENV] = str(self.path)
        env.update(self._temp_env())
        return env

    def asv_env(self) -> dict:
        """What asv's benchmark processes need to run this tree's code: its path, and the tree that
        ``benchmarks/__init__.py`` checks ``harness`` is imported from; and the tree's TMPDIR, so
        that asv's own temporaries (its forkserver socket, a benchmark's result.json) go with the
        tree when a signal stops asv before it cleans up."""
        return {"ASV_PYTHONPATH": self.python_path(), TREE_ENV: str(self.path), **self._temp_env()}

    def _temp_env(self) -> dict:
        return {} if self.temp_dir is None else {"TMPDIR": str(self.temp_dir)}

    def to_dict(self) -> dict:
        return {"label": self.label, "ref": self.ref, "path": str(self.path), "commit": self.commit, "dirty": self.dirty}


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        return run_git(repo, *args, timeout=GIT_TIMEOUT_S, check=check)
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
    """The commit ``ref`` names, as a full SHA; TreeError naming the ref when it names none.
    Resolved first as it is, then the object it names peeled to a commit: a suffix appended to
    the user's text would be read inside ``:/regex`` (and ``REF^{commit}`` refused ``:/text``)."""
    if not ref or ref.startswith("-"):
        raise TreeError(f"ref {ref!r} is not a ref: a ref cannot be empty or start with '-'")
    named = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", ref, check=False).stdout.strip()
    result = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{named}^{{commit}}", check=False)
    if not named or result.returncode != 0 or not result.stdout.strip():
        raise TreeError(f"ref {ref!r} does not name a commit in {repo}")
    return result.stdout.strip()


def worktree_ambiguity(repo: Path, option: str) -> str:
    """Why ``option worktree`` is ambiguous in ``repo`` (a branch or tag is named ``worktree``
    too), or "" when it is not."""
    listed = _git(repo, "for-each-ref", "--format=%(refname)", "--", f"refs/heads/{WORKTREE}",
                  f"refs/tags/{WORKTREE}", check=False).stdout.split()
    if not listed:
        return ""
    return (f"{option} {WORKTREE} is ambiguous in {repo}: it names the working tree, and {listed[0]} exists too; "
            f"give {option} {listed[0]} for the ref, or rename it to name the working tree"
            + (" (the default of --candidate)" if option == "--candidate" else ""))


def working_tree(repo: Path, label: str) -> Tree:
    head = _git(repo, "rev-parse", "HEAD", check=False).stdout.strip() or None
    dirty = bool(_git(repo, "status", "--porcelain", "--untracked-files=no", check=False).stdout.strip())
    return Tree(label, WORKTREE, repo, head, dirty)


TREE_PREFIX = "critpath-gate-"  # of every directory ``checkout`` makes, under the temp dir
TREE_NAME = "tree"  # the worktree, inside that directory, beside the owner file
RMTREE_TRIES, RMTREE_PAUSE_S = 5, 0.2
TEMP_NAME = "tmp"  # the TMPDIR of the tree's processes (``Tree.temp_dir``), beside it


RECORDS_DIR = "critpath-worktrees"  # in the repository's common git directory: one file per checkout


def _records(repo: Path) -> Optional[Path]:
    """Where ``repo`` keeps the records of the checkouts critpath made in it; None where git cannot say."""
    result = _git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir", check=False)
    return Path(result.stdout.strip()) / RECORDS_DIR if result.returncode == 0 and result.stdout.strip() else None


def _record(repo: Path, parent: Path) -> Optional[Path]:
    """Record ``parent`` (a directory ``checkout`` made) in ``repo``'s git directory, where every
    later sweep of ``repo`` looks, whatever its temp dir."""
    records = _records(repo)
    if records is None:
        return None
    records.mkdir(exist_ok=True)
    record = records / f"{parent.name}.json"
    record.write_text(json.dumps({"dir": str(parent)}) + "\n")
    return record


# A record is one short line: {"dir": "/tmp/critpath-gate-base-abc123"} (a path is at most 4096 bytes).
MAX_RECORD_FILE_BYTES = 8192
RECORD_FILE_LIMITS = JsonLimits(keys=1, values=1, depth=1)


def _recorded(repo: Path, said: Optional[list] = None) -> dict[str, Path]:
    """The directories recorded by ``_record`` in ``repo`` (real path -> record file). A record
    that does not name a directory shaped as ``checkout`` makes, whose name is the record's own,
    vouches for nothing; one that is not a record critpath writes is left alone, and ``said``."""
    records = _records(repo)
    found = {}
    for record in sorted(records.glob(f"{TREE_PREFIX}*.json")) if records and records.is_dir() else []:
        try:
            data = loads_strict(read_bounded(record, "worktree record", MAX_RECORD_FILE_BYTES), str(record),
                                RECORD_FILE_LIMITS)
            where = data.get("dir") if isinstance(data, dict) else None
        except FileNotFoundError:
            continue  # forgotten by the gate that made it, as this one looked
        except (OSError, ValueError) as exc:  # ValueError: InputFileError (a FIFO, a device, too large), bad JSON
            if said is not None:
                said.append(f"left the record {record} alone: it is not critpath's ({exc})")
            continue
        if isinstance(where, str) and os.path.isabs(where) and Path(where).name == record.stem:
            found[os.path.realpath(where)] = record
    return found


def _forget(record: Optional[Path]) -> None:
    """Drop the record of a directory that is gone. The records directory stays, empty: removing
    it would race with another gate in the same repository writing its record there."""
    if record is not None:
        record.unlink(missing_ok=True)


def _remove(repo: Path, path: Path, made: bool = False) -> None:
    """Remove the worktree at ``path`` and the directory ``checkout`` made for it, nothing above.
    ``-f -f``: a gate killed during ``git worktree add`` leaves it locked ("initializing"), and a
    single ``--force`` (and ``prune``) skips a locked worktree. ``made``: its directory is known to
    be one ``checkout`` made (recorded), wherever it is."""
    _git(repo, "worktree", "unlock", "--", str(path), check=False)
    _git(repo, "worktree", "remove", "-f", "-f", "--", str(path), check=False)
    if (made or _made_here(path)) and not path.exists():  # a tree git could not remove keeps its owner file: retried next time
        for _ in range(RMTREE_TRIES):  # a child still unwinding may write into its TMPDIR there meanwhile
            shutil.rmtree(path.parent, ignore_errors=True)
            if not path.parent.exists():
                break
            time.sleep(RMTREE_PAUSE_S)


def _made_here(path: Path) -> bool:
    """Whether ``path`` is where ``checkout`` puts a worktree: ``TREE_NAME`` in a ``TREE_PREFIX``
    directory directly under the temp dir. Nothing else is ever deleted by the sweep, but a
    directory of that shape elsewhere that the repository records (``_recorded``)."""
    parent = path.parent
    return (_shaped(path)
            and os.path.realpath(parent.parent) == os.path.realpath(tempfile.gettempdir()))


def _shaped(path: Path) -> bool:
    return path.name == TREE_NAME and path.parent.name.startswith(TREE_PREFIX)


@contextlib.contextmanager
def checkout(repo: Path, ref: str, label: str, command: str = "critpath gate",
             prefix: Optional[str] = None) -> Iterator[Tree]:
    """``git worktree add --detach`` of ``ref`` into a temp dir, marked as ``command``'s; always
    removed afterwards. ``prefix``: the temp dir's name before its random part (it must start with
    TREE_PREFIX; default TREE_PREFIX + label + '-')."""
    if ref == WORKTREE:
        yield working_tree(repo, label)
        return
    sha = resolve(repo, ref)
    assert prefix is None or prefix.startswith(TREE_PREFIX), prefix  # else no sweep would know it for ours
    parent = Path(tempfile.mkdtemp(prefix=prefix or f"{TREE_PREFIX}{label}-"))
    path = parent / TREE_NAME
    record = None
    try:
        Owner.me(command).write(parent)  # before the worktree exists: no moment leaves it unmarked
        record = _record(repo, parent)
        _git(repo, "worktree", "add", "--detach", "--quiet", "--", str(path), sha)
        (parent / TEMP_NAME).mkdir()
        yield Tree(label, ref, path, sha, temp_dir=parent / TEMP_NAME)
    finally:
        _remove(repo, path, made=True)
        _git(repo, "worktree", "prune", check=False)
        if not parent.exists():
            _forget(record)


def registered_worktrees(repo: Path) -> list[Path]:
    """The worktrees git lists for ``repo``, the main one first. ``-z``: a path may hold a newline
    (a ``TMPDIR`` with one), which the line format cannot carry."""
    listed = _git(repo, "worktree", "list", "--porcelain", "-z", check=False).stdout
    return [Path(field[len("worktree "):]) for field in listed.split("\0") if field.startswith("worktree ")]


def sweep_orphans(repo: Path) -> list[str]:
    """Remove the worktrees of ``repo`` that a critpath process made and that outlived it (it was
    killed outright); what was removed (or could not be), as sentences. Only a worktree where
    ``checkout`` puts one (under this temp dir, or recorded by the repository under any), other
    than the main one, beside a well-formed owner file whose owner is gone, is removed; one whose
    owner file is malformed is left, with a warning."""
    listed = registered_worktrees(repo)
    said, tried = [], []
    recorded = _recorded(repo, said)
    for path in listed[1:]:  # the first is the main worktree: never ours
        made = _shaped(path) and os.path.realpath(path.parent) in recorded
        if not (made or _made_here(path)) or os.path.realpath(path) == os.path.realpath(repo):
            continue
        try:
            owner = owner_of(path)
        except Malformed as exc:
            said.append(f"left the worktree {path} alone: its {OWNER_FILE} is not critpath's ({exc})")
            continue
        if owner is not None and not owner.alive():
            _remove(repo, path, made)
            tried.append((path, owner))
    if tried:
        _git(repo, "worktree", "prune", check=False)
        left = set(registered_worktrees(repo))
        for path, owner in tried:
            if path in left or path.exists():
                said.append(f"could not remove the worktree {path}, left by {owner.describe()}; "
                            f"remove it with: git worktree remove -f -f -- {path}")
            else:
                said.append(f"removed the worktree {path}, left by {owner.describe()}, which is no longer running")
    _sweep_records(recorded, set(map(os.path.realpath, registered_worktrees(repo))))
    return said


def _sweep_records(recorded: dict[str, Path], listed: set[str]) -> None:
    """Forget the records whose directory is gone; a directory that holds only the owner file (and
    the tree's TMPDIR) of a process that is gone (killed before ``git worktree add``, or after git
    removed the tree) goes first. Anything else in a recorded directory keeps it, and its record."""
    for where, record in recorded.items():
        parent = Path(where)
        if os.path.join(where, TREE_NAME) in listed:
            continue
        with contextlib.suppress(OSError, Malformed):
            if parent.is_dir() and set(os.listdir(parent)) <= {OWNER_FILE, TEMP_NAME}:
                owner = owner_of(parent / TREE_NAME)
                if owner is not None and not owner.alive():
                    shutil.rmtree(parent)
        if not parent.exists():
            _forget(record)


PROBE_MARK = "critpath-probe-result: "  # leads the probe's one line of JSON, whatever else the tree prints
_PROBE = r"""
import importlib, json, sys
MARK = sys.argv.pop(1)
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
print("\n" + MARK + json.dumps({"harness_file": harness.__file__, "unknown": unknown, "worker_protocol": protocol,
                  "loaded": loaded}), flush=True)
"""


@dataclass(frozen=True)
class Probe:
    harness_file: str
    unknown: dict  # case ID -> why this tree does not know it
    worker_protocol: Optional[int] = None  # None: the tree has no `critpath worker`


def probe(tree: Tree, case_ids: Sequence[str], python: str = sys.executable) -> Probe:
    """Import the side's ``harness`` from its tree and parse every case ID there."""
    where = f"{tree.label} ({tree.ref})"
    try:
        result = subprocess.run([python, "-c", _PROBE, PROBE_MARK, *case_ids], cwd=tree.path, env=tree.env(),
                                capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TreeError(f"{where}: probing the tree took over {GIT_TIMEOUT_S} s") from None
    except OSError as exc:
        raise TreeError(f"{where}: cannot start {python}: {exc}") from None
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TreeError(f"{where}: cannot import harness from {tree.path}: {tail}")
    data = _probe_result(result.stdout)
    if data is None:
        tail = (result.stdout.strip().splitlines() or ["(no output)"])[-1][:200]
        raise TreeError(f"{where}: the probe of {tree.path} gave no result the gate can read (importing harness "
                        f"there exits early or rewrites the output?); last output line: {tail!r}")
    found = Path(data["harness_file"]).resolve()
    root = tree.path.resolve()
    foreign = sorted(name for name, path in data["loaded"].items() if root not in Path(path).resolve().parents)
    if root not in found.parents or foreign:
        at = data["loaded"].get(foreign[0]) if foreign else found
        raise TreeError(f"{where}: imports {foreign[0] if foreign else 'harness'} from {at}, "
                        f"not from {tree.path}; is another copy shadowing it on sys.path?")
    return Probe(str(found), dict(data["unknown"]), data["worker_protocol"])


def _probe_result(stdout: str) -> Optional[dict]:
    """The probe's result from its output: the last line after ``PROBE_MARK`` that holds the
    fields with their types, or None (a tree whose import prints, exits early, or lies)."""
    for line in reversed(stdout.splitlines()):
        if not line.startswith(PROBE_MARK):
            continue
        try:
            data = json.loads(line[len(PROBE_MARK):])
        except ValueError:
            return None
        ok = (isinstance(data, dict) and isinstance(data.get("harness_file"), str)
              and isinstance(data.get("unknown"), dict) and isinstance(data.get("loaded"), dict)
              and all(isinstance(v, str) for v in data["loaded"].values())
              and (data.get("worker_protocol") is None or type(data.get("worker_protocol")) is int))
        return data if ok else None
    return None


def list_cases(tree: Tree, families: Sequence[str], profile: str, python: str = sys.executable) -> list[str]:
    """The case IDs of ``families`` as this tree's ``critpath list`` gives them."""
    args = [python, "-m", "harness", "list", f"--families={','.join(families)}", f"--{profile}"]  # one word: never an option
    try:
        result = subprocess.run(args, cwd=tree.path, env=tree.env(), capture_output=True, text=True,
                                timeout=GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TreeError(f"{tree.label} ({tree.ref}): critpath list in {tree.path} took over {GIT_TIMEOUT_S} s") from None
    except OSError as exc:
        raise TreeError(f"{tree.label} ({tree.ref}): cannot start {python}: {exc}") from None
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TreeError(f"{tree.label} ({tree.ref}): critpath list --families {','.join(families)}: {tail}")
    return [line.strip() for line in result.stdout.splitlines() if line.startswith("  ") and "/" in line]

