"""Known slowdowns, committed for real: the gate's power is measured on trees a user could have.

``critpath gate-power`` clones the repository into a temporary directory and, on a throwaway
branch per slowdown, commits a small module that wraps one case's ``step`` with a busy-wait into
``harness/wraps/``, whose modules the registry applies to every family it loads
(``harness.core.registry.WRAPS_PACKAGE``): the commit adds a file and edits none. Every way of
running the case then pays for it (the driver, a worker, another tool's benchmark calling the
family), and the gate compares the base commit with that branch exactly as it compares a pull
request with main: two worktrees, fresh processes.

Two shapes of slowdown, each sized to a fraction of the case's measured mean iteration time:

- ``uniform``: every iteration waits ``fraction`` x the mean;
- ``partial``: one iteration in ``PARTIAL_EVERY`` waits ``PARTIAL_EVERY`` x ``fraction`` x the
  mean. The mean grows by the same fraction, but the fastest iterations and the median do not
  move, so a statistic that only sees them cannot find it.

The wait is a busy loop on ``perf_counter_ns`` (it burns the core like real extra work, and
its length does not depend on what else the machine is doing).

The same module can be loaded from the environment instead of a commit (``from_environment``,
``CRITPATH_INJECT_SLOWDOWN``, applied by ``harness/wraps/environment.py``): only the processes that have the variable are slowed, so one
torchrun agent, one node, can be made the slow one (the diagnosis test does exactly that).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from harness.core.git import git_env, run_git
from harness.core.numbers import NumberError, parse_float, parse_int
from harness.core.options import UsageError
from harness.core.registry import WRAPS_PACKAGE

# Slowdowns injected on purpose into this process's families: how one torchrun agent, one node, is
# made the slow one. JSON {"CASE_ID": [wait_ns, every]}.
INJECT_ENV = "CRITPATH_INJECT_SLOWDOWN"
KINDS = ("uniform", "partial")
PARTIAL_EVERY = 10
WRAPS_DIR = WRAPS_PACKAGE.replace(".", "/")
MODULE_PATH = f"{WRAPS_DIR}/injected_slowdown.py"
GIT_TIMEOUT_S = 120
# wait_ns and every of an injected slowdown: 1000 s a wait is no slowdown a gate measures.
MAX_INJECT = 10**12


class InjectError(RuntimeError):
    """The slowdown cannot be committed (a base without the wraps package, git failed)."""


class SlowdownTextError(InjectError, UsageError):
    """``CRITPATH_INJECT_SLOWDOWN`` is not a table of slowdowns: a usage error (exit 2) naming the
    variable and what it must hold, in whichever process reads it."""


@dataclass(frozen=True)
class Slowdown:
    case_id: str
    kind: str  # uniform | partial
    fraction: float  # 0.10: the case's mean iteration time grows by 10 %
    mean_ns: float  # the case's mean iteration time it was sized from
    # The wait as measured to give ``fraction`` (see gate-power's calibration): a busy-wait of 10 %
    # of a round trip can slow it by more, as the peer sleeps meanwhile and wakes up later.
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"slowdown kind must be one of {KINDS}, got {self.kind!r}")
        if not 0 < self.fraction < 10:
            raise ValueError(f"slowdown fraction must be in (0, 10), got {self.fraction}")

    @property
    def every(self) -> int:
        return 1 if self.kind == "uniform" else PARTIAL_EVERY

    @property
    def wait_ns(self) -> int:
        return max(1, round(self.fraction * self.mean_ns * self.every * self.scale))

    @property
    def label(self) -> str:
        return f"{self.kind} +{self.fraction * 100:g} %"


def module_source(slowdowns: Sequence[Slowdown]) -> str:
    return _module_text({s.case_id: (s.wait_ns, s.every) for s in slowdowns})


def _module_text(table: Mapping[str, tuple[int, int]]) -> str:
    lines = "\n".join(f"    {case_id!r}: {spec!r}," for case_id, spec in table.items())
    return f'''"""A known slowdown, committed by critpath gate-power on a throwaway branch to measure the gate."""
import time
from dataclasses import replace

# case ID -> (busy-wait in ns, applied every Nth call of the step)
SLOWDOWNS = {{
{lines}
}}


def wrap(family):
    """The family with the steps of the cases above slowed (other cases pay a dict lookup)."""
    specs = {{case_id: spec for case_id, spec in SLOWDOWNS.items() if case_id.split("/", 1)[0] == family.name}}
    if not specs:
        return family
    setup, step, teardown, clock = family.setup, family.step, family.teardown, time.perf_counter_ns
    slowed = {{}}  # id(state) -> [wait_ns, every, calls]

    def slowed_setup(ctx, case):
        state = setup(ctx, case)
        if case.id in specs:
            slowed[id(state)] = [*specs[case.id], 0]
        return state

    def slowed_step(state):
        spec = slowed.get(id(state))
        if spec is not None:
            spec[2] += 1
            if spec[2] % spec[1] == 0:
                end = clock() + spec[0]
                while clock() < end:
                    pass
        return step(state)

    def slowed_teardown(state):
        slowed.pop(id(state), None)
        if teardown is not None:
            teardown(state)

    return replace(family, setup=slowed_setup, step=slowed_step, teardown=slowed_teardown)
'''


def _no_constant(name: str):
    raise NumberError(f"{INJECT_ENV}: {name} is not a number")


def slowdowns_from_text(text: str) -> dict[str, tuple[int, int]]:
    """``{"CASE_ID": [wait_ns, every], ...}`` (JSON), as ``CRITPATH_INJECT_SLOWDOWN`` holds it. Its
    numbers are read by the one grammar, named by the variable: json's own int() of 5,000 digits
    raised 'Exceeds the limit' naming nothing, and NaN or 1e400 are no number of nanoseconds."""
    try:
        data = json.loads(text, parse_int=lambda digits: parse_int(digits, INJECT_ENV),
                          parse_float=lambda digits: parse_float(digits, INJECT_ENV), parse_constant=_no_constant)
    except NumberError as exc:
        raise SlowdownTextError(f"{exc}; write {{\"CASE_ID\": [wait_ns, every]}}") from None
    except json.JSONDecodeError as exc:
        raise SlowdownTextError(f"{INJECT_ENV}: not JSON ({exc.msg}); write {{\"CASE_ID\": [wait_ns, every]}}") from None
    except RecursionError:
        raise SlowdownTextError(f"{INJECT_ENV}: nested too deep; write {{\"CASE_ID\": [wait_ns, every]}}") from None
    if not isinstance(data, dict) or not data:
        raise SlowdownTextError(f"{INJECT_ENV}: expected a JSON object {{\"CASE_ID\": [wait_ns, every]}}, "
                                f"got {text[:80]!r}")
    table = {}
    for case_id, spec in data.items():
        if (not isinstance(spec, list) or len(spec) != 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                                                     and 1 <= v <= MAX_INJECT for v in spec)):
            raise SlowdownTextError(f"{INJECT_ENV}: {case_id[:200]}: expected [wait_ns, every], two integers in "
                                    f"[1, {MAX_INJECT}], got {str(spec)[:80]}")
        table[case_id] = (spec[0], spec[1])
    return table


def _cases_of(family, table: Mapping[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The slowdowns of ``family``'s cases, keyed by each case's canonical ID: a key is matched to
    the ID a run gives its case, so ``world=1,mode=noop`` slows the case written ``mode=noop,world=1``.
    A key naming no family, or no case of ``family``, is refused naming the variable and the key.
    (The family being loaded is parsed against its own declaration: the registry is loading it.)"""
    from harness.core.case import CaseIdError, parse_case_id
    from harness.core.registry import FAMILY_MODULES

    out: dict[str, tuple[int, int]] = {}
    for key, spec in table.items():
        name = key.split("/", 1)[0]
        if name not in FAMILY_MODULES:
            raise SlowdownTextError(f"{INJECT_ENV}: key {key[:200]!r} names no family; known: {', '.join(FAMILY_MODULES)}")
        if name != family.name:
            continue
        try:
            case_id = family.check_case(parse_case_id(key, {family.name: family.declared})).id
        except CaseIdError as exc:
            raise SlowdownTextError(f"{INJECT_ENV}: key {key[:200]!r} names no case: {exc}") from None
        if out.get(case_id, spec) != spec:
            raise SlowdownTextError(f"{INJECT_ENV}: case {case_id} is given two slowdowns ({list(out[case_id])} and "
                                    f"{list(spec)}) by two spellings of its ID")
        out[case_id] = spec
    return out


def from_environment(family, env: Mapping[str, str] = os.environ):
    """``family`` with the slowdowns of ``CRITPATH_INJECT_SLOWDOWN`` on its cases, through the very
    module ``commit_slowdowns`` commits (``family`` itself where the variable is unset). A slowed
    case's per-rank report says so (``injected_slowdown``), and each process says so on stderr: an
    injected figure is never mistaken for a measured one."""
    if not env.get(INJECT_ENV):
        return family
    table = _cases_of(family, slowdowns_from_text(env[INJECT_ENV]))
    if not table:
        return family
    namespace: dict = {}
    exec(compile(_module_text(table), INJECT_ENV, "exec"), namespace)  # noqa: S102 - our own template, validated table
    slowed = namespace["wrap"](family)
    print(f"critpath: {INJECT_ENV} slows {len(table)} {family.name} case(s) in this process on purpose",
          file=sys.stderr)
    if family.report is None:
        return slowed
    setup, report, marked = slowed.setup, slowed.report, {}

    # Keyed by id(): the mark is taken when the report is read (once a case, before its state is
    # freed), so a later case's state that reuses the id does not inherit it.
    def marking_setup(ctx, case):
        state = setup(ctx, case)
        if case.id in table:
            marked[id(state)] = table[case.id]
        return state

    def marking_report(state):
        out = dict(report(state))
        spec = marked.pop(id(state), None)
        if spec is not None:
            wait_ns, every = spec
            out["injected_slowdown"] = {"wait_ns": wait_ns, "every": every, "source": INJECT_ENV}
        return out

    return replace(slowed, setup=marking_setup, report=marking_report)


def _git(repo: Path, *args: str) -> str:
    try:
        result = run_git(repo, *args, timeout=GIT_TIMEOUT_S, check=True)
    except subprocess.CalledProcessError as exc:
        raise InjectError(f"git {' '.join(args)}: {exc.stderr.strip() or exc}") from None
    return result.stdout.strip()


def clone(repo: Path, dest: Path) -> Path:
    """A private clone of ``repo`` (its committed history only) at ``dest``."""
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", "--", str(repo), str(dest)], check=True,
                   capture_output=True, timeout=GIT_TIMEOUT_S, env=git_env())
    _git(dest, "config", "user.name", "critpath gate-power")
    _git(dest, "config", "user.email", "gate-power@localhost")
    return dest


def commit_slowdowns(repo: Path, base_sha: str, branch: str, slowdowns: Sequence[Slowdown]) -> str:
    """Commit ``slowdowns`` on ``branch`` (from ``base_sha``) in ``repo``; returns the commit."""
    _git(repo, "checkout", "--quiet", "--force", "-B", branch, base_sha)
    if not (Path(repo) / WRAPS_DIR / "__init__.py").is_file():
        raise InjectError(f"{base_sha[:12]} has no {WRAPS_DIR}/, the package whose modules the registry applies "
                          "to every family it loads; measure a base that has it")
    (Path(repo) / MODULE_PATH).write_text(module_source(slowdowns))
    _git(repo, "add", MODULE_PATH)
    labels = ", ".join(f"{s.label} on {s.case_id}" for s in slowdowns)
    _git(repo, "commit", "--quiet", "-m", f"gate-power: injected slowdown ({labels})")
    return _git(repo, "rev-parse", "HEAD")


def branch_name(slowdown: Slowdown, index: int) -> str:
    return f"gate-power/{index:02d}-{slowdown.kind}-{round(slowdown.fraction * 1000)}permille"


def describe(slowdowns: Mapping[str, Slowdown]) -> list[dict]:
    return [{"branch": b, "case_id": s.case_id, "kind": s.kind, "fraction": s.fraction, "mean_ns": s.mean_ns,
             "scale": s.scale, "wait_ns": s.wait_ns, "every": s.every} for b, s in slowdowns.items()]
