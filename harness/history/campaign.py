"""``critpath history A..B``: asv history over a range of commits, each commit's own code measured.

asv cannot do this itself with this project's ``existing`` environment (it refuses a range, and
``asv find`` and ``asv continuous`` need environments it builds, torch included, per commit).
So, per commit, oldest first, as the gate does for its two sides:

1. ``git worktree add`` the commit; its tree goes first on the path (nothing is reinstalled);
2. that tree's own ``critpath run`` of the tracked families at world 2, into ``OUT/runs/<sha>``
   (progress and its ETA on the terminal);
3. ``asv run --set-commit-hash <sha>`` of this checkout's ``benchmarks/bench_families.py`` with the
   commit's tree on asv's path and CRITPATH_ASV_RUN pointing at that run directory, so asv files
   the run's figures under the commit in the asv results directory (``asv publish``, ``asv
   compare`` and ``critpath report --asv-results`` read them).

One run of the families per commit, not one process per parameter. A commit asv already holds
every selected case of is skipped (``--rerun`` to measure it again). Interrupted, it keeps what
finished: commits already filed stay filed, a run that finished but was not yet filed is filed
on the next invocation without measuring again, and a run cut short is kept beside as
``<sha>.interrupted-N`` for ``critpath show``.

``--find FIGURE --case ID`` bisects instead, as ``asv find`` does: it measures the range's two
ends, then halves towards the larger step of FIGURE until two adjacent commits remain, into a
results directory of its own (a one-case measurement must not overwrite a commit's full history).
"""
from __future__ import annotations

import errno
import math
import os
import re
import signal
import site
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from harness.core import atomic, registry
from harness.core.claim import claim_dir, link_refused, refuse_links_below
from harness.core.escape import for_terminal
from harness.core.git import git_env, over_repository, run_git
from harness.core.inputfile import InputFileError, declare_inputs, read_bounded
from harness.core.nesting import overlap
from harness.core.options import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, absolute, case_id_option, families_option,
                                  machine_option, path_option, print_error, seconds)
from harness.core.options import UsageError
from harness.core.runfiles import run_files
from harness.core.store import (FINGERPRINT, RESULTS, ResultsFileError, load_records, read_fingerprint,
                                 run_incompleteness)
from harness.gate.trees import TreeError, checkout, probe, repo_root, resolve, sweep_orphans
from harness.history.asvfiles import (SAMPLE_FIGURES, SUITE_MODULE, AsvDirectoryError, read_results, suite_class, unreadable_files,
                                      warn_skipped)
from harness.run.lifetime import interrupt_signal, stop_signals_unwind, stop_with_parent

RUN_ENV = "CRITPATH_ASV_RUN"  # read by benchmarks/bench_families.py
WORLD = 2
STOP_GRACE_S = 30.0


class HistoryRunError(RuntimeError):
    """A range, repository or asv set-up that cannot be recorded; the message says which and why."""


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str


@dataclass(frozen=True)
class HistoryRequest:
    """What ``critpath history`` was asked, with the places it resolved once: every step below the
    handler reads this, never the parsed arguments."""

    case_ids: tuple[str, ...]  # --case: exactly these; overrides families
    families: Optional[tuple[str, ...]]  # None: every default family
    timeout_s: float  # per case
    rerun: bool  # measure commits asv already holds again
    find: Optional[str]  # the figure to bisect on, or None to record the range
    repo: Path
    config: Path  # asv's config, with absolute paths
    results: Path  # asv's results directory
    machine: str  # asv's machine name
    out: Path  # run directories and logs
    asv_home: dict  # the environment that gives asv a HOME of its own (``asv_home``)


@dataclass
class Filed:
    commit: Commit
    state: str  # filed, skipped, failed
    wall_s: float = 0.0
    detail: str = ""


def register(sub) -> None:
    p = sub.add_parser("history", help="record asv history over a range of commits (each commit's own code)")
    p.add_argument("range", metavar="A..B", help="git range (commits after A up to B, as git log A..B) or one ref")
    p.add_argument("--repo", type=path_option, default=Path.cwd(),
                   help="git checkout whose commits to record (default: .)")
    p.add_argument("--families", type=families_option, help="comma-separated families (default: every default family)")
    p.add_argument("--case", dest="case_ids", action="append", default=[], metavar="ID", type=case_id_option,
                   help="record exactly this case (repeatable); overrides --families")
    p.add_argument("--results", type=path_option, help="asv results directory (default: the repo's asv.conf.json "
                   "results_dir; with --find, OUT/find-results; never inside --out or the repository's tracked files)")
    p.add_argument("--out", type=path_option, help="run directories and logs (default: REPO/.asv/history)")
    p.add_argument("--machine", type=machine_option, help="asv machine name (default: asv's, this host's)")
    p.add_argument("--timeout", type=seconds, default=120.0, metavar="SECONDS", help="per-case limit (default 120)")
    p.add_argument("--rerun", action="store_true", help="measure commits asv already holds again")
    p.add_argument("--find", metavar="FIGURE", help="bisect for the largest step of FIGURE (p50_us, p99_us or a "
                   "headline figure) of the one --case, as asv find does")
    p.set_defaults(func=cmd_history)


# -- git ------------------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    result = run_git(repo, *args)
    if result.returncode != 0:
        raise HistoryRunError(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def commits_in(repo: Path, spec: str, include_start: bool = False) -> list[Commit]:
    """The commits of ``spec``, oldest first: ``A..B`` as ``git log A..B`` (plus A with
    ``include_start``), or one ref alone. Each end is checked as a commit before git sees the
    range, so neither is ever read as an option (``--output=FILE``)."""
    if ".." in spec:
        start, _, end = spec.partition("..")
        if not start or not end or end.startswith("."):
            raise HistoryRunError(f"range {spec!r}: give A..B with both ends (A..B, not A... or ..B)")
        start_sha, end_sha = (_commit(repo, spec, ref) for ref in (start, end))
        lines = _git(repo, "rev-list", "--reverse", "--format=%H %s", "--no-commit-header", "--end-of-options",
                     f"{start_sha}..{end_sha}").splitlines()
        if include_start:
            lines = _git(repo, "log", "-1", "--format=%H %s", "--end-of-options", start_sha).splitlines() + lines
    else:
        lines = _git(repo, "log", "-1", "--format=%H %s", "--end-of-options", _commit(repo, spec, spec)).splitlines()
    commits = [Commit(*line.split(" ", 1)) if " " in line else Commit(line, "") for line in lines if line.strip()]
    if not commits:
        raise HistoryRunError(f"range {spec!r} holds no commits in {repo}")
    return commits


def _commit(repo: Path, spec: str, ref: str) -> str:
    try:
        return resolve(repo, ref)
    except TreeError as exc:
        raise HistoryRunError(f"range {spec!r}: {exc}") from None


# -- asv ------------------------------------------------------------------------------------------


# asv.conf.json: a few kB of settings and comments; json5 parses it in Python, a character at a time.
MAX_ASV_CONFIG_BYTES = 1 << 20
# The directories the config names, which the history resolves against the repository.
ASV_CONFIG_DIRS = ("results_dir", "benchmark_dir", "html_dir")


def read_asv_config(repo: Path) -> dict:
    """The repo's own asv config, checked where the history reads it."""
    import json5  # asv's parser of its config, which has comments (asv's dependency)

    source = repo / "asv.conf.json"
    try:
        config = json5.loads(read_bounded(source, "config of asv", MAX_ASV_CONFIG_BYTES).decode("utf-8"))
    except InputFileError as exc:  # a FIFO, a device, too large: the message names the file
        raise HistoryRunError(str(exc)) from None
    except RecursionError:
        raise HistoryRunError(f"{source}: cannot read asv's config: nested too deep to be read as data") from None
    except (OSError, ValueError) as exc:  # absent, unreadable, not UTF-8, not JSON
        raise HistoryRunError(f"{source}: cannot read asv's config: {exc}") from None
    if not isinstance(config, dict):
        raise HistoryRunError(f"{source}: cannot read asv's config: expected an object, got {type(config).__name__}")
    wrong = [k for k in ASV_CONFIG_DIRS if not isinstance(config.get(k, ""), str)]
    if wrong:
        raise HistoryRunError(f"{source}: field {wrong[0]}: expected a directory, got {config[wrong[0]]!r}")
    return config


def results_dir(repo: Path, config: dict, given: Optional[Path]) -> Path:
    """asv's results directory: ``given`` (--results), else the one the repo's config names."""
    return (given or repo / config.get("results_dir", ".asv/results")).resolve()


def write_asv_config(repo: Path, config: dict, results: Path, out: Path) -> Path:
    """The repo's config for asv with absolute paths and ``results``, written into ``out``."""
    config = {**config, "repo": str(repo), "benchmark_dir": str(repo / config.get("benchmark_dir", "benchmarks")),
              "results_dir": str(results), "html_dir": str(repo / config.get("html_dir", ".asv/html")),
              "env_dir": str(out / "env")}
    path = out / "asv.conf.json"
    atomic.write_json(path, config, indent=1, sort_keys=False)
    return path


def refuse_out_over_repo(repo: Path, out: Path) -> None:
    """HistoryRunError when ``out`` is the measured repository, holds it, or holds a file git
    tracks there (``over_repository``): the asv config, logs and runs written into it would replace
    the repository's own files, the ones being measured. Inside it, where git tracks nothing (the
    default REPO/.asv/history), is fine."""
    repo, out = repo.resolve(), out.resolve()
    why = over_repository(repo, out)
    if why:
        raise HistoryRunError(f"--out {out} {why}; choose a directory outside it, or one inside that git tracks "
                              f"nothing in (default {repo / '.asv' / 'history'})")
    declare_inputs([repo / "asv.conf.json"])  # read by asv's own reader: never written over, by any path


def refuse_results_where(repo: Path, out: Path, results: Path) -> None:
    """HistoryRunError when --results ``results`` may not be asv's results directory: over the
    measured repository (asv rewrites its files there, as --out's would be), or overlapping --out
    ``out`` (a run directory or asv's HOME below --out would be read as asv's results, and asv's
    results would lie among the history's runs and logs)."""
    repo, out, results = repo.resolve(), out.resolve(), results.resolve()
    why = over_repository(repo, results)
    if why:
        raise HistoryRunError(f"--results {results} {why}; choose a directory outside it, or one inside that git "
                              f"tracks nothing in (default {repo / '.asv' / 'results'})")
    for where in (results, results.parent):  # a run's directory, or a folder of its own in one
        held = run_files(where)
        if held:
            raise HistoryRunError(f"--results {results} {'is' if where == results else 'lies inside'} the run "
                                  f"directory {where} (it holds {held[0].name}); asv's results would lie among "
                                  "that run's files: choose a --results outside every run directory")
    how = overlap(results, out)
    if how:
        raise HistoryRunError(f"--results {results} {how} --out {out}; asv's results and the history's runs and logs "
                              "must not overlap: choose a --results outside --out")


# asv keeps its machines in $HOME/.asv-machine.json (asv/machine.py, MachineCollection), which
# every `asv machine` and `asv run` reads and rewrites, without a lock and with no option naming
# another file: two histories at once had one fail on the other's half-written file, and every
# history wrote outside its --out. So asv's HOME is this directory of the history's --out.
ASV_HOME = "asv-home"
ASV_MACHINE_FILE = ".asv-machine.json"  # asv's machine file, in its HOME
MACHINE_LOG = "asv-machine.log"  # what `asv machine` says
FIND_RESULTS = "find-results"  # --find's results directory, of its own in --out
# What a history and its children write below --out, each refused when it is a link (a run's own
# directory is `critpath run`'s to check; the logs below logs/ are opened with open_log).
OUT_WRITTEN = ("runs", "logs", ASV_HOME, f"{ASV_HOME}/{ASV_MACHINE_FILE}", MACHINE_LOG)


def open_log(out: Path, path: Path):
    """``path`` below --out ``out``, opened to append: a link there, planted before or during the
    history, is refused (UsageError naming it), never written through to its target."""
    refuse_links_below(out, path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(link_refused(path, out)) from None
        raise
    return os.fdopen(fd, "a")


def asv_home(out: Path) -> dict:
    """The variables that give asv the HOME of the history writing ``out``, with what else lives
    under HOME kept the user's: Python's user site-packages (where a ``pip install --user`` put
    asv itself) and git's global settings (a ``safe.directory`` asv's git calls need)."""
    home = out / ASV_HOME
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "PYTHONUSERBASE": os.environ.get("PYTHONUSERBASE", site.getuserbase())}
    git_global = Path.home() / ".gitconfig"
    if "GIT_CONFIG_GLOBAL" not in os.environ and git_global.is_file():
        env["GIT_CONFIG_GLOBAL"] = str(git_global)
    return env


def _asv(args: Sequence[str], log, home: dict, env: Optional[dict] = None, cwd: Optional[Path] = None) -> int:
    """``python -m asv ARGS`` in its own session, output into ``log``, under ``home`` (``asv_home``)."""
    asv_home_dir = Path(home["HOME"])
    refuse_links_below(asv_home_dir.parent, asv_home_dir / ASV_MACHINE_FILE)  # asv rewrites it, following a link
    proc = subprocess.Popen([sys.executable, "-m", "asv", *args], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=git_env({**os.environ, **home, **(env or {})}), cwd=cwd,
                            start_new_session=True, preexec_fn=stop_with_parent)
    return _wait(proc)


def machine_name(config: Path, given: Optional[str], log, home: dict) -> str:
    """asv needs a machine recorded before it files results; ``asv machine --yes`` records this host."""
    args = ["machine", "--yes", "--config", str(config)] + ([f"--machine={given}"] if given else [])
    if _asv(args, log, home) != 0:
        raise HistoryRunError(f"asv machine --yes failed; see {log.name}")
    if given:
        return given
    from asv.machine import (
        Machine,  # asv is 0.15 s of every `critpath --help`: imported where it serves
    )

    return Machine.get_unique_machine_name()


def _held(results: Path, machine: str, sha: str):
    """What asv holds for ``sha`` on ``machine``: the figures of the family classes. A file that is
    not asv's is named on stderr and holds nothing: its cases are measured again."""
    if not (results / machine).is_dir():
        return
    try:
        files = read_results(results, machine, sha)
    except AsvDirectoryError as exc:
        raise HistoryRunError(str(exc)) from None
    warn_skipped("history", files.skipped)
    for result in files.results:
        for figure in result.figures:
            if figure.benchmark.startswith("bench_families."):
                yield figure


def recorded_cases(results: Path, machine: str, sha: str) -> set[str]:
    """Case IDs asv already holds for ``sha`` on ``machine``, in any family's class."""
    return {figure.case_id for figure in _held(results, machine, sha)}


# -- processes -------------------------------------------------------------------------------------


def _wait(proc: subprocess.Popen) -> int:
    """Wait for a child in its own session; on an interrupt, pass SIGTERM to its whole group (a
    critpath run then writes an interrupted run.json), give it time, then re-raise."""
    try:
        return proc.wait()
    except KeyboardInterrupt:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
        raise


def bench_regex(families: Sequence[str]) -> str:
    """asv --bench for the classes of ``families`` only (not the start-up or model suites, nor a
    family this run did not measure, whose earlier figures must stay), by the class the suite
    tracks each in (``asvfiles.suite_class``)."""
    names = "|".join(sorted(re.escape(suite_class(f)) for f in families))
    return rf"^{SUITE_MODULE}\.({names})\."


def _run_args(request: HistoryRequest, run_dir: Path) -> list[str]:
    argv = [sys.executable, "-m", "harness", "run", "--backend", "gloo",
            "--timeout", str(request.timeout_s), "--out", str(run_dir)]
    if request.case_ids:  # a case ID names its own world: --world with it is refused
        for case_id in request.case_ids:
            argv.append(f"--case={case_id}")  # one word: never read as an option
    else:
        argv.append(f"--world={WORLD}")
        if request.families:
            argv.append(f"--families={','.join(request.families)}")
    return argv


def asv_run_env(tree, run_dir: Path) -> dict:
    """What `asv run` of a commit gets beside the history's: the tree's (``Tree.asv_env``, its
    TMPDIR with it) and the run directory the suite reads its figures from."""
    return {**tree.asv_env(), RUN_ENV: str(run_dir)}


def _finished(run_dir: Path) -> Optional[list]:
    """The records of a run that finished every case, or None (missing, interrupted, unreadable)."""
    if not (run_dir / RESULTS).exists():
        return None
    try:
        records = load_records(run_dir)
    except ResultsFileError:
        return None
    return None if run_incompleteness(run_dir, records) else records


def _run_commit(run_dir: Path) -> Optional[str]:
    """The git commit a run's fingerprint names (None: none named, or the file unreadable)."""
    try:
        return read_fingerprint(run_dir / FINGERPRINT).get("git", {}).get("commit")
    except ResultsFileError:
        return None


@dataclass(frozen=True)
class EarlierRun:
    """What OUT/runs/<sha> holds before the commit is measured: ``records`` when it is a finished
    run of that commit (filed without measuring again), else None; ``state`` names it when set
    aside (its directory is <sha>.<state>-N) and ``why`` says so to the user."""
    records: Optional[list]
    state: str
    why: str = ""


def earlier_run(run_dir: Path, sha: str) -> EarlierRun:
    """The run ``run_dir`` holds for commit ``sha``: a finished run whose fingerprint names
    another commit (copied there, or from another repository) is no measurement of ``sha``."""
    records = _finished(run_dir)
    if records is None:
        return EarlierRun(None, "interrupted")
    made_from = _run_commit(run_dir)
    if made_from != sha:
        return EarlierRun(None, "other-commit", f"its fingerprint.json names git commit {made_from}, not {sha}")
    return EarlierRun(records, "finished")


def _set_aside(run_dir: Path, state: str) -> Path:
    n = 1
    while (aside := run_dir.with_name(f"{run_dir.name}.{state}-{n}")).exists():
        n += 1
    run_dir.rename(aside)
    return aside


def set_aside_unreadable(results: Path, machine: str, sha: str, say) -> None:
    """Each results file of ``sha`` that cannot be read as JSON (a full disk cut asv's write of it
    short) renamed to ``<name>.unreadable-N``, which neither asv nor critpath reads, and said:
    asv refuses to file the commit over it, so without this the commit could never be filed
    again. Renamed, never deleted: what it held is the user's to look at."""
    for path, why in unreadable_files(results, machine, sha):
        aside = _set_aside(path, "unreadable")
        say(f"  {why}: asv cannot file the commit over it; kept as {aside} and the commit filed anew")


# asv's output when a write of its found the disk full: Python's words for ENOSPC
# (`OSError: [Errno 28] No space left on device`).
DISK_FULL = os.strerror(errno.ENOSPC)
# The end of one asv run's output searched for DISK_FULL: asv stops at the write that failed, so its
# traceback is last; a run of every family prints some hundred kB before it.
MAX_LOG_TAIL_BYTES = 1 << 20


def said_disk_full(log_path: Path, since: int) -> bool:
    """Whether the output asv wrote into ``log_path`` from byte ``since`` on says the disk was full."""
    try:
        fd = os.open(log_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as log:
        log.seek(max(since, os.fstat(fd).st_size - MAX_LOG_TAIL_BYTES))
        return DISK_FULL.encode() in log.read(MAX_LOG_TAIL_BYTES)


def record_commit(request: HistoryRequest, commit: Commit, say) -> Filed:
    """Measure one commit and file it with asv; a commit that cannot be measured is a Filed that
    says why, and the range goes on."""
    repo, config, results, machine, out = request.repo, request.config, request.results, request.machine, request.out
    start = time.monotonic()
    run_dir = out / "runs" / commit.sha
    log_path = out / "logs" / f"{commit.sha}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with checkout(repo, commit.sha, "history", "critpath history") as tree:
            probe(tree, [])
            earlier = earlier_run(run_dir, commit.sha)
            records = earlier.records
            if records is not None and not request.rerun:
                say(f"  {run_dir} finished before; filing it without measuring again")
            else:
                if run_dir.exists():
                    why = f" ({earlier.why}); measuring the commit" if earlier.why else ""
                    say(f"  kept the earlier run as {_set_aside(run_dir, earlier.state)}{why}")
                run_dir.parent.mkdir(parents=True, exist_ok=True)
                proc = subprocess.Popen(_run_args(request, run_dir), cwd=tree.path, env=tree.env(),
                                        stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=stop_with_parent)
                code = _wait(proc)
                records = _finished(run_dir)
                if code not in (0, 1) or records is None:
                    return Filed(commit, "failed", time.monotonic() - start,
                                 f"critpath run exited {code}" + ("" if records else "; no finished run"))
            set_aside_unreadable(results, machine, commit.sha, say)
            with open_log(out, log_path) as log:
                log_start = os.fstat(log.fileno()).st_size  # this run's output follows the earlier runs'
                code = _asv(["run", "--config", str(config), "--environment", f"existing:{sys.executable}",
                             "--set-commit-hash", commit.sha, "--bench", bench_regex({r.family for r in records}),
                             f"--machine={machine}",
                             "--show-stderr"], log, request.asv_home, env=asv_run_env(tree, run_dir),
                            cwd=tree.path)
    except TreeError as exc:
        return Filed(commit, "failed", time.monotonic() - start, str(exc))
    except UsageError:  # a link planted below --out: the range's, not one commit's
        raise
    except Exception as exc:  # noqa: BLE001 -- one commit that breaks the tooling is that commit's failure, not the range's
        return Filed(commit, "failed", time.monotonic() - start, f"{type(exc).__name__}: {exc}")
    wanted = {r.case_id for r in records}
    missing = wanted - recorded_cases(results, machine, commit.sha)
    if missing:
        full = (f"disk full: asv could not write its results ({DISK_FULL}); free space and run the same command "
                "again; " if said_disk_full(log_path, log_start) else "")
        return Filed(commit, "failed", time.monotonic() - start,
                     f"{full}asv run exited {code} and filed {len(wanted) - len(missing)} of {len(wanted)} cases; "
                     f"see {log_path}")
    failed = [r for r in records if not r.ok]
    detail = f"{len(records)} cases filed" + (f", {len(failed)} failed (asv shows them as failed, with the reason): "
                                              + "; ".join(f"{r.case_id}: {r.label}" for r in failed[:3])
                                              if failed else "")
    return Filed(commit, "filed", time.monotonic() - start, detail)


def _already(request: HistoryRequest, commit: Commit) -> bool:
    if request.rerun:
        return False
    held = recorded_cases(request.results, request.machine, commit.sha)
    if not held:
        return False
    if request.case_ids:
        return set(request.case_ids) <= held
    # Without --case, the finished run this command made for the commit says what was asked for.
    records = earlier_run(request.out / "runs" / commit.sha, commit.sha).records
    return records is not None and {r.case_id for r in records} <= held and _same_families(request, records)


def _same_families(request: HistoryRequest, records) -> bool:
    if not request.families:
        return True
    return set(request.families) <= {r.family for r in records}


def _eta(done_s: list[float], left: int) -> str:
    if not done_s:
        return "ETA after the first commit"
    per = sorted(done_s)[len(done_s) // 2]
    return f"about {per * left / 60:.0f} min left ({per / 60:.1f} min a commit)"


def cmd_history(args) -> int:
    with stop_signals_unwind():  # SIGTERM and SIGHUP unwind as Ctrl-C: the commit's run stops, its tree goes
        return _history(args)


def _history(args) -> int:
    try:
        repo = repo_root(args.repo.resolve())
        for removed in sweep_orphans(repo):
            print(f"critpath history: {removed}", file=sys.stderr)
        if args.find:
            check_find(args.find, args.case_ids)
        commits = commits_in(repo, args.range, include_start=bool(args.find))
        if args.find and len(commits) < 2:
            raise HistoryRunError(f"--find: range {args.range!r} holds {len(commits)} commit; a step lies between "
                                  "two: give A..B, whose start A is measured too")
        out = (args.out or repo / ".asv" / "history").resolve()
        refuse_out_over_repo(repo, out)
        settings = read_asv_config(repo)
        find_results = out / FIND_RESULTS if args.find and args.results is None else None
        results = results_dir(repo, settings, absolute(args.results) or find_results)
        if results != find_results:  # the --find default is the history's own, inside --out on purpose
            refuse_results_where(repo, out, results)
        claim_dir(out, "history")  # held while it measures: a second history into OUT is refused
        for written in OUT_WRITTEN:  # by children and by appends, which no write below checks
            refuse_links_below(out, out / written)
        claim_dir(results, "history", option="--results")  # asv files every commit there: held as --out is
        config = write_asv_config(repo, settings, results, out)
        home = asv_home(out)
        with open_log(out, out / MACHINE_LOG) as log:
            machine = machine_name(config, args.machine, log, home)
    except (HistoryRunError, TreeError) as exc:
        print_error("history", exc)
        return EXIT_USAGE

    request = HistoryRequest(tuple(args.case_ids), args.families, args.timeout, args.rerun, args.find, repo, config,
                             results, machine, out, home)

    def say(text: str) -> None:
        print(for_terminal(text), flush=True)  # commit subjects and case errors are anyone's text

    try:
        if request.find:
            return _find(request, commits, say)
        return _record_range(request, commits, say)
    except KeyboardInterrupt as exc:
        signum = interrupt_signal(exc)
        say(f"critpath history: interrupted by {signum.name}; commits filed so far stay in "
            f"{results}, runs in {out / 'runs'}; the same command carries on")
        return 128 + signum


def _record_range(request: HistoryRequest, commits, say) -> int:
    say(f"critpath history: {len(commits)} commits of {request.repo} into {request.results} "
        f"(machine {request.machine})")
    walls: list[float] = []
    filed: list[Filed] = []
    for i, commit in enumerate(commits, 1):
        head = f"[{i}/{len(commits)}] {commit.sha[:10]} {commit.subject[:60]}"
        if _already(request, commit):
            filed.append(Filed(commit, "skipped", 0.0, "asv holds it already (--rerun to measure again)"))
            say(f"{head}: skipped, asv holds it already")
            continue
        say(f"{head}: measuring; {_eta(walls, len(commits) - i + 1)}")
        result = record_commit(request, commit, say)
        filed.append(result)
        if result.state == "filed":
            walls.append(result.wall_s)
        say(f"{head}: {result.state} in {result.wall_s / 60:.1f} min; {result.detail}")
    counts = {s: sum(f.state == s for f in filed) for s in ("filed", "skipped", "failed")}
    say(f"critpath history: {counts['filed']} filed, {counts['skipped']} skipped, {counts['failed']} could not be "
        f"recorded. View: critpath report --asv-results {request.results} --out DIR")
    return EXIT_OK if counts["failed"] == 0 else EXIT_FAILED


# -- bisect -----------------------------------------------------------------------------------------


def _value(results: Path, machine: str, sha: str, case_id: str, figure: str) -> Optional[float]:
    return next((held.value for held in _held(results, machine, sha) if held.benchmark.endswith(f".track_{figure}")
                 and held.case_id == case_id and held.value is not None), None)


def largest_step(n: int, measure) -> tuple[int, int]:
    """Indices (i, i + 1) of the adjacent pair of ``n`` commits with the largest step, found as
    ``asv find`` does: measure both ends, then keep the half whose ends differ more (as a ratio),
    so about log2(n) + 2 commits are measured. ``measure(i)`` gives commit i's figure (> 0); ``n``
    is at least 2."""
    def step(a: int, b: int) -> float:
        x, y = measure(a), measure(b)
        if x <= 0 or y <= 0:
            raise ValueError(f"a figure of {x} or {y} has no ratio; bisect on a positive figure")
        return abs(math.log(y / x))

    lo, hi = 0, n - 1
    step(lo, hi)  # both ends first: of two commits, the step is theirs, and nothing else measures them
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if step(lo, mid) >= step(mid, hi) else (mid, hi)
    return lo, hi


def check_find(figure: str, case_ids: Sequence[str]) -> None:
    """HistoryRunError unless ``--find FIGURE`` can be bisected: one --case, and a figure the suite
    tracks for it, so a misspelt figure is refused before the first commit is measured. A family
    this checkout does not define is the measured trees' to judge."""
    if len(case_ids) != 1:
        raise HistoryRunError("--find bisects one case: give exactly one --case")
    family = registry.FAMILIES.get(case_ids[0].partition("/")[0])
    if family is None:
        return
    tracked = [*SAMPLE_FIGURES, *(f.name for f in family.figures if f.headline)]
    if figure not in tracked:
        raise HistoryRunError(f"--find {figure}: asv tracks no such figure of a {family.name} case; "
                              f"give one of {', '.join(tracked)}")


def _find(request: HistoryRequest, commits, say) -> int:
    case_id, figure = request.case_ids[0], request.find
    values: dict[int, float] = {}

    def measure(i: int) -> float:
        if i not in values:
            commit = commits[i]
            if not _already(request, commit):
                say(f"find: measuring {commit.sha[:10]} {commit.subject[:60]}")
                filed = record_commit(request, commit, say)
                if filed.state == "failed":
                    raise HistoryRunError(f"{commit.sha[:10]}: {filed.detail}")
            value = _value(request.results, request.machine, commit.sha, case_id, figure)
            if value is None:
                raise HistoryRunError(f"{commit.sha[:10]}: no {figure} for {case_id} (the case failed, or does not "
                                   f"define it); see {request.out / 'logs'}")
            values[i] = value
            say(f"find: {commit.sha[:10]} {figure} = {value:.4g}")
        return values[i]

    try:
        lo, hi = largest_step(len(commits), measure)
    except (HistoryRunError, ValueError) as exc:
        print_error("history --find", exc)
        return EXIT_USAGE
    a, b = commits[lo], commits[hi]
    say(f"find: largest step of {figure} for {case_id}: {a.sha[:10]} -> {b.sha[:10]} ({b.subject[:70]}): "
        f"{values[lo]:.4g} -> {values[hi]:.4g} (x{values[hi] / values[lo]:.3g}), from one run per commit "
        f"({len(values)} commits measured); confirm with critpath gate --base {a.sha[:10]} --candidate {b.sha[:10]} "
        f"--case '{case_id}'")
    return EXIT_OK
