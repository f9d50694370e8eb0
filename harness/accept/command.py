"""``critpath accept --profile PROFILE.yaml``: hardware acceptance against a profile of thresholds.

The profile (harness.accept.profile) says what to run and what to hold it to; the cases run
through the normal runner, or come from a stored run (``--run``), imports of nccl-tests output
included; each check, pin and fact gets its verdict (harness.accept.checks, harness.accept.pins).

Three verdicts (harness.accept.verdicts): pass, fail, could not verify. A check whose case the run does
not hold, in a data type or from a source the check does not accept, or whose statistic its
records cannot give, and a pin or fact the fingerprint did not record, could not be verified; only
a measured value or a recorded property that misses the profile fails.

Exit codes: 0 everything passed; 1 a check, pin or fact failed; 2 something could not be verified
and nothing failed, or acceptance could not start (bad profile, unreadable run).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from harness.accept.checks import Acceptance, accept
from harness.accept.coverage import run_options
from harness.accept.profile import ProfileError, load_profile
from harness.accept.verdicts import EXIT_UNVERIFIED, FAIL, PASS, UNVERIFIED, line, show_value, word
from harness.core import atomic
from harness.core.claim import claim_dir
from harness.core.escape import for_terminal
from harness.core.options import EXIT_USAGE, os_error_text, path_option, print_error
from harness.core.store import LoadedRun, ResultsFileError, load_run, new_run_id, run_digests
from harness.document.blocks import Heading, Para, Table
from harness.report.cli import make_report, report_targets, write_report
from harness.run.joined import position
from harness.run.runner import run


def acceptance_blocks(result: Acceptance) -> list:
    rows = [[o.kind, o.name, o.verdict, o.statistic, show_value(o.measured, o.unit), o.threshold,
             "-" if o.margin_pct is None else f"{o.margin_pct:+.1f} %", o.detail, o.source] for o in result.outcomes]
    counts = result.counts()
    blocks = [Heading(2, f"Acceptance: {result.profile} — {result.verdict}"),
              Para(f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[UNVERIFIED]} could not be verified "
                   "(a pin or fact the fingerprint did not record, a case the run does not hold, a statistic its "
                   "records cannot give).")]
    if result.incomplete:
        blocks.append(Para(f"Could not verify the run: {result.incomplete}."))
    blocks.append(Table(["kind", "name", "verdict", "statistic", "measured", "threshold", "margin", "detail",
                         "threshold source"], rows))
    return blocks



def register(sub) -> None:
    p = sub.add_parser("accept", help="hardware acceptance against a profile: pass, fail or could not verify")
    p.add_argument("--profile", type=path_option, required=True, metavar="PROFILE.yaml")
    p.add_argument("--run", type=path_option, metavar="RUN_DIR", help="judge a stored run instead of running the cases")
    p.add_argument("--out", type=path_option, help="run directory for the cases run now (default reports/<run-id>)")
    p.add_argument("--no-report", action="store_true", help="skip writing report.md / report.html")
    p.set_defaults(func=cmd_accept)


def _run_cases(profile: Mapping[str, Any], out: Optional[Path]) -> tuple[Path, int]:
    """The profile's run.cases (load_profile(measuring=True) held each check to them)."""
    out = out or Path("reports") / f"accept-{new_run_id()}"
    code = run(run_options(profile, out))  # failed cases become records; the checks judge them
    return out, code


# acceptance.json's field of the SHA-256 of each run file the verdict judged (store.run_digests).
JUDGED = "judged_sha256"


def _load_judged(run_dir: Path) -> tuple[LoadedRun, dict]:
    """The run and the digests of the files it was read from. Taken before and after reading: a file
    that changed in between was not judged as its digest says, and the run is not judged at all."""
    before = run_digests(run_dir)
    run = load_run(run_dir)
    after = run_digests(run_dir)
    changed = [name for name in after if before.get(name) != after[name]]
    if changed:
        raise ResultsFileError(f"{run_dir}: {', '.join(changed)} changed while the run was read; judge it "
                               "again when nothing writes to it")
    return run, after


def cmd_accept(args) -> int:
    try:
        profile = load_profile(args.profile, measuring=not args.run)  # refused before anything is measured
        if args.run:
            run_dir = args.run
        else:
            me = position()  # the run's own decision, so the two cannot disagree on who judges
            run_dir, code = _run_cases(profile, args.out)
            if me is not None and me.rank != 0:
                # Under torchrun/Slurm every rank ran the cases; rank 0 alone holds and judges them.
                return 0 if code == 0 else 1
        run, judged = _load_judged(run_dir)
    except ProfileError as exc:
        print_error("accept", exc)
        return EXIT_UNVERIFIED
    except ResultsFileError as exc:
        # A record that contradicts itself (an imported figure its own row does not give) or a
        # results file that does not read: nothing in the run can be judged.
        print(for_terminal(f"acceptance {profile['name']}: {word(EXIT_UNVERIFIED)} ({run_dir})\n  the run: {exc}"))
        return EXIT_UNVERIFIED
    out = args.out if args.run and args.out else Path(run_dir)
    # Every output claimed and checked before the verdict is printed: a directory that cannot be
    # written (read-only, held by another process, a planted link) is refused first, so the log
    # never says PASS and then that nothing was written.
    with claim_dir(out, "accept"):
        report = None
        verdict = out / "acceptance.json"
        targets = [verdict]
        if not args.no_report:
            report = make_report([run_dir])
            targets += report_targets(report, out)
        atomic.check_targets(targets)
        result = accept(profile, run.records, run.fingerprint, run.incomplete)
        if report is not None:
            report.blocks[2:2] = acceptance_blocks(result)  # after the title and preamble
        # acceptance.json and the report are one set: every output checked before the first is
        # written (a report path refused, the profile itself or a planted link, leaves no
        # acceptance.json), and a full disk leaves the previous set whole, never a new verdict
        # beside the previous report.
        document = {verdict: atomic.json_bytes(verdict, {**result.to_dict(), JUDGED: judged}, sort_keys=False)}
        # Written before the verdict is printed: a log that ends "PASS, exit 0" has its record on
        # disk, and a full disk is said instead of a verdict nothing holds.
        md = None
        try:
            if report is None:
                atomic.write_set(document)
            else:
                md, _ = write_report(report, out, beside=document)
        except OSError as exc:
            print_error("accept", f"acceptance {profile['name']}: the verdict could not be recorded, so none is "
                                  f"given ({os_error_text(exc)})")
            return EXIT_USAGE
    _print_verdict(profile, run_dir, result, judged)
    if md is not None:
        print(f"report: {md}")
    return result.exit_code


def _print_verdict(profile: Mapping[str, Any], run_dir: Path, result: Acceptance, judged: Mapping[str, Any]) -> None:
    print(f"acceptance {profile['name']}: {result.verdict} ({run_dir})")
    if result.incomplete:
        print(for_terminal(f"  {word(EXIT_UNVERIFIED):16}  the run: {result.incomplete}"))
    for o in result.outcomes:
        print(for_terminal("  " + line(o)))  # a check's detail can quote a case's error
    for name, digest in judged.items():
        print(f"  judged {name} sha256 {digest or '(absent)'}")
    counts = result.counts()
    print(f"{counts[PASS]} pass, {counts[FAIL]} fail, {counts[UNVERIFIED]} could not verify: "
          f"{result.verdict}, exit {result.exit_code}")
