"""Outputs under hostile input and faults: every file written whole and never over an input, every
output directory claimed by one process, every message escaped for the sink it reaches."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import xmlschema
from conftest import ROOT, RUN_FINGERPRINT, derived_record, run_cli, start_of

from harness.cli import main
from harness.core import atomic, escape, temps
from harness.core.claim import CLAIM_FILE, DirectoryClaimed, claim_dir
from harness.core.options import UsageError
from harness.core.records import ErrorInfo, Record
from harness.core.registry import parse
from harness.core.store import RESULTS, append_record, load_run
from harness.gate.outputs import (
    GateResult,
    junit_schema_path,
    junit_xml,
    markdown,
    write_outputs,
)
from harness.gate.stats import Outcome, Policy, Verdict

# What a case's error message can hold: an OSC sequence that retitles the terminal, a NUL, a lone
# surrogate (no UTF-8 file can hold it), markup for HTML and a markdown table's cell separator.
HOSTILE = "boom \x1b]0;pwned\x07 nul\x00 half\ud800 <script>alert(1)</script> a|b"
RAW = ("\x1b", "\x07", "\x00", "\ud800")
OK_CASE = "selftest/fault_rank=0,mode=noop,world=1"
BAD_CASE = "selftest/fault_rank=0,mode=raise,world=1"
HOLD = """
import sys, time
from harness.core.claim import claim_dir
claim_dir(sys.argv[1], "run")
print("held", flush=True)
sys.stdin.read()  # until the test closes it
"""


def hostile_run(path, host="<script>alert(2)</script>", run_id="r1", error=HOSTILE):
    """A finished run of two records, one failed with ``error`` (HOSTILE), on a host so named."""
    path.mkdir(parents=True, exist_ok=True)
    append_record(path / RESULTS, derived_record(OK_CASE, range(1000, 1200), run_id=run_id, started_at=start_of(run_id)))
    append_record(path / RESULTS, Record.failure(parse(BAD_CASE), run_id, ErrorInfo("failed", error, 0, ""), "gloo",
                                                 start_of(run_id), 0.1))
    atomic.write_json(path / "fingerprint.json", {**RUN_FINGERPRINT, "host": host}, run_writer=True)
    atomic.write_json(path / "run.json", {"schema": "critpath.run/1", "run_id": run_id, "state": "finished",
                                          "cases_total": 2}, run_writer=True)
    return path


def _no_raw(text: str) -> None:
    for char in RAW:
        assert char not in text, f"{char!r} reached the sink raw"


# -- escaping, one function per sink -----------------------------------------------------------------

def test_each_sink_gets_the_hostile_message_escaped_visibly():
    terminal = escape.for_terminal(HOSTILE)
    _no_raw(terminal)
    assert "\\x1b]0;pwned\\x07" in terminal and "\\x00" in terminal and "\\ud800" in terminal
    assert escape.for_terminal("a\u202eb\x9bc\x7f\nd\te") == "a\\u202eb\\x9bc\\x7f\nd\te"  # newline, tab kept
    xml_text = escape.for_xml(HOSTILE)
    _no_raw(xml_text)
    ET.fromstring(ET.tostring(ET.Element("e", message=xml_text)))  # well-formed once the writer escapes <&
    # legal XML, but a CI viewer would render the text after it reversed: visible, as on the terminal
    assert escape.for_xml("run\u202eA\u2066B") == "run\\u202eA\\u2066B"
    cell = escape.for_markdown_cell(HOSTILE + "\nnext")
    _no_raw(cell)
    assert "<script" not in cell and "&lt;script>" in cell and "a\\|b" in cell and "\n" not in cell
    assert escape.for_markdown("p99 <= 1 ms, 1 -> 2, &amp;") == "p99 <= 1 ms, 1 -> 2, &amp;amp;"
    html = escape.for_html(HOSTILE)
    _no_raw(html)
    assert "<" not in html
    assert escape.for_file(HOSTILE).encode("utf-8")  # no UnicodeEncodeError


# -- the gate ---------------------------------------------------------------------------------------

def _gate_result(reason: str) -> GateResult:
    result = GateResult("compare", "p50_ns", "iteration", Policy(),
                        base={"ref": "main", "host": "<script>x</script>"}, candidate={"ref": "a|b"})
    result.verdicts[BAD_CASE] = Verdict(Outcome.COULD_NOT_RUN, reason, 0.05, 0.01)
    result.warnings.append(reason)
    return result


def test_gate_outputs_of_a_hostile_message_are_well_formed(tmp_path):
    result = _gate_result(HOSTILE)
    paths = write_outputs(result, tmp_path / "gate")  # was UnicodeEncodeError and a 0-byte gate.xml
    xml_bytes = paths["junit"].read_bytes()
    assert xml_bytes
    xmlschema.XMLSchema(str(junit_schema_path())).validate(str(paths["junit"]))
    assert "\\x1b]0;pwned\\x07" in ET.fromstring(xml_bytes).find(".//error").get("message")
    md = paths["markdown"].read_text(encoding="utf-8")
    _no_raw(md)
    assert "<script" not in md and "a\\|b" in md
    row = next(line for line in md.splitlines() if BAD_CASE in line)
    assert row.count(" | ") == 7  # the message's | does not add a column
    raw = paths["json"].read_bytes()
    raw.decode("ascii")
    data = json.loads(raw)
    assert "\\ud800" in data["cases"][0]["reason"] and "\ud800" not in json.dumps(data, ensure_ascii=False)
    assert junit_xml(result) and markdown(result)


def test_compare_of_runs_with_a_hostile_error_writes_valid_outputs_and_escapes_the_terminal(tmp_path, capfd):
    a, b = hostile_run(tmp_path / "a"), hostile_run(tmp_path / "b", run_id="r2")
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "g")]) == 2
    out, err = capfd.readouterr()
    _no_raw(out + err)
    assert "\\x1b]0;pwned\\x07" in out
    xmlschema.XMLSchema(str(junit_schema_path())).validate(str(tmp_path / "g" / "gate.xml"))


def test_a_gate_stopped_before_its_result_records_the_sides_it_knows(tmp_path, capfd):
    from harness.gate.cli import gate
    from harness.gate.config import GateConfig
    from harness.gate.request import GateOutputs, GateRequest
    from harness.gate.schedule import Plan

    outputs = GateOutputs("gate", tmp_path / "g", None)
    request = GateRequest("no-such-ref", "worktree", None, ROOT, (OK_CASE,), None, "quick", Plan(), 2,
                          GateConfig(), outputs)
    assert gate(request) == 2  # the base ref does not exist: stopped before anything ran
    data = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert data["base"] == {"ref": "no-such-ref", "measured": False}
    assert data["candidate"] == {"ref": "worktree", "measured": False}
    assert data["error"]
    assert not (tmp_path / "g" / CLAIM_FILE).exists()  # given up when the gate is done
    # refused before it read its sides: null, not an empty object that reads as a side
    assert main(["gate", "--out", str(tmp_path / "r"), "--case", OK_CASE]) == 2
    assert json.loads((tmp_path / "r" / "gate.json").read_text())["base"] is None


# -- report, show, export of a run with a hostile error -------------------------------------------

def test_report_escapes_the_message_and_the_host_in_markdown_and_html(tmp_path):
    run = hostile_run(tmp_path / "run")
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0  # was UnicodeEncodeError
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    html = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    for text in (md, html):
        _no_raw(text)
        assert "<script" not in text
    # the ] backslash-escaped, as a ] from outside may close an image's alt text or a link
    assert "&lt;script>alert(2)" in md and "\\x1b\\]0;pwned\\x07" in md


def test_show_prints_no_escape_sequence(tmp_path, capfd):
    run = hostile_run(tmp_path / "run")
    assert main(["show", str(run)]) == 1  # a failed case
    out, err = capfd.readouterr()
    _no_raw(out + err)
    assert "\\x1b]0;pwned\\x07" in out


def test_run_progress_lines_escape_the_error():
    from rich.console import Console

    from harness.run.reporter import Reporter

    console = Console(record=True, force_terminal=False, width=300)
    record = Record.failure(parse(BAD_CASE), "r1", ErrorInfo("failed", HOSTILE, 0, ""), "gloo",
                            "2026-01-01T00:00:00+00:00", 0.1)
    with Reporter(console, 1) as reporter:
        reporter.finished(record)
    text = console.export_text()
    _no_raw(text)
    assert "\\x1b]0;pwned\\x07" in text


def test_an_error_line_on_stderr_is_escaped(tmp_path, capfd):
    assert main(["show", str(tmp_path / "run \x1b]0;pwned\x07")]) == 2  # no such run: the path is in the message
    err = capfd.readouterr().err
    _no_raw(err)
    assert "\\x1b]0;pwned\\x07" in err


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_export_of_a_hostile_error_writes_valid_utf8(tmp_path, fmt):
    pytest.importorskip("pyarrow")
    run = hostile_run(tmp_path / "run")
    out = tmp_path / f"x.{fmt}"
    assert main(["export", str(run), "--format", fmt, "--out", str(out)]) == 0  # was UnicodeEncodeError
    if fmt == "parquet":
        import pandas as pd

        assert "\\ud800" in pd.read_parquet(out)["error"].dropna().iloc[0]
        return
    text = out.read_bytes().decode("utf-8")
    _no_raw(text)
    assert "\\ud800" in text


# -- outputs never over an input, and written whole -----------------------------------------------

@pytest.mark.parametrize("how", ["same path", "symlink", "hard link"])
def test_export_refuses_an_output_that_is_one_of_its_inputs(tmp_path, capfd, how):
    run = hostile_run(tmp_path / "run")
    before = (run / RESULTS).read_bytes()
    out = {"same path": run / RESULTS, "symlink": tmp_path / "x.csv", "hard link": tmp_path / "y.csv"}[how]
    if how == "symlink":
        out.symlink_to(run / RESULTS)
    elif how == "hard link":
        os.link(run / RESULTS, out)
    assert main(["export", str(run), "--format", "csv", "--out", str(out)]) == 2
    # A symlink is refused as a link before its target is looked at: either way, not written.
    why = "is a symbolic link" if how == "symlink" else "is an input of this command"
    assert why in capfd.readouterr().err
    assert (run / RESULTS).read_bytes() == before
    assert len(load_run(run).records) == 2


MOE_SIM = ["moe-sim", "--worlds", "2", "--tokens", "64", "--json", "{out}"]  # a small model: seconds


@pytest.mark.parametrize("name, argv", [
    ("results.jsonl", ["export", "{r1}", "--format", "csv", "--out", "{out}"]),
    ("run.json", ["diagnose", "{r1}", "--json", "{out}"]),
    ("fingerprint.json", MOE_SIM),
    ("fingerprint.json", [*MOE_SIM, "new"]),  # a run without one gains none either
])
def test_no_other_command_writes_a_file_of_a_run_that_is_not_its_input(tmp_path, capfd, name, argv):
    """A run C2 that is not the command's input: `export r1 --out C2/results.jsonl`, `diagnose r1
    --json C2/run.json` and `moe-sim --json C2/fingerprint.json` replaced its files, exit 0."""
    r1, c2 = hostile_run(tmp_path / "r1"), hostile_run(tmp_path / "C2", run_id="c2")
    if argv[-1] == "new":
        argv = argv[:-1]
        (c2 / name).unlink()
    before = {p.name: p.read_bytes() for p in c2.iterdir()}
    out = c2 / name
    assert main([a.format(r1=r1, out=out) for a in argv]) == 2
    assert capfd.readouterr().err.endswith(f"error: {out} is the {name} of the run in {c2}, which only that run "
                                           "writes; choose another output path\n")
    assert {p.name: p.read_bytes() for p in c2.iterdir()} == before
    assert main(["export", str(r1), "--format", "csv", "--out", str(c2 / "r1.csv")]) == 0  # other names still go


def test_an_export_that_fails_midway_leaves_the_old_file_whole(tmp_path, monkeypatch):
    run = hostile_run(tmp_path / "run")
    out = tmp_path / "x.csv"
    out.write_text("the export of yesterday\n")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    assert main(["export", str(run), "--format", "csv", "--out", str(out)]) == 2
    assert out.read_text() == "the export of yesterday\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# -- output directories claimed atomically ----------------------------------------------------------

@pytest.fixture
def held(tmp_path):
    """A directory held by another live process, as a second `critpath run --out D` would find it."""
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert holder.stdout.readline().strip() == "held"
    yield out, holder
    holder.stdin.close()
    holder.wait(timeout=30)


@pytest.mark.parametrize("argv", [["run", "--case", OK_CASE, "--iters", "5"],
                                  ["gate", "--base", "HEAD", "--case", OK_CASE],
                                  ["compare", "A", "B"],
                                  ["import-nccl-tests"], ["history", "HEAD", "--repo", str(ROOT)], ["report"]])
def test_a_second_writer_of_a_claimed_out_is_refused_naming_the_holder(held, capfd, argv, tmp_path):
    out, holder = held
    if argv[0] == "import-nccl-tests":
        argv = [argv[0], str(sorted((ROOT / "tests" / "fixtures" / "nccl_tests").iterdir())[0])]
    elif argv[0] == "report":
        argv = [argv[0], str(hostile_run(tmp_path / "run"))]
    assert main([*argv, "--out", str(out)]) == 2
    err = capfd.readouterr().err
    assert f"{out} is in use: another process holds the lock on {out / CLAIM_FILE}; " in err
    assert f"the file names critpath run (pid {holder.pid} on " in err and "started 20" in err
    assert "which is running" in err
    assert sorted(p.name for p in out.iterdir()) == [CLAIM_FILE]  # nothing written beside the holder


def test_a_claim_of_a_killed_process_does_not_block_a_retry(tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(DirectoryClaimed):
        claim_dir(out, "run")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert (out / CLAIM_FILE).exists()  # a SIGKILLed holder cannot tidy up ...
    with claim_dir(out, "run") as claim:  # ... and its claim died with it
        assert claim.contents() == []
    assert not (out / CLAIM_FILE).exists()  # given up at the end of the block


def test_a_run_that_holds_the_claim_refuses_a_second_one_in_the_same_process_only_once(tmp_path):
    out = tmp_path / "out"
    with claim_dir(out, "report") as first:
        with claim_dir(out, "report") as again:  # this process held it already: a no-op
            assert again.fd == first.fd
        assert (out / CLAIM_FILE).exists()  # the inner block did not give it up
    assert not out.exists()


def test_a_results_file_holding_two_runs_is_not_shown_as_one(tmp_path, capfd):
    run = tmp_path / "run"
    run.mkdir()
    append_record(run / RESULTS, derived_record(OK_CASE, range(1000, 1200), run_id="r1"))
    append_record(run / RESULTS, derived_record(OK_CASE, range(1000, 1200), run_id="r2"))
    atomic.write_json(run / "run.json", {"schema": "critpath.run/1", "run_id": "r2", "state": "finished",
                                         "cases_total": 1}, run_writer=True)
    assert main(["show", str(run)]) == 1
    assert "mixed: records of 2 runs in one results file (r1, r2)" in capfd.readouterr().err


def test_a_case_named_twice_runs_once_and_says_so(tmp_path, capfd):
    out = tmp_path / "run"
    assert main(["run", "--case", OK_CASE, "--case", "selftest/world=1,mode=noop,fault_rank=0", "--iters", "5",
                 "--out", str(out)]) == 0
    assert [r.case_id for r in load_run(out).records] == [OK_CASE]
    assert "--case named 1 case(s) again" in capfd.readouterr().err
    assert not (out / CLAIM_FILE).exists()


# -- never over an input, whatever the command (issue 26's probe) ---------------------------------

def test_no_output_of_compare_or_diagnose_replaces_or_appends_to_an_input(tmp_path, capfd):
    a, b = hostile_run(tmp_path / "a"), hostile_run(tmp_path / "b", run_id="r2")
    before = (a / RESULTS).read_bytes()
    # --markdown appended gate.md to A's records; --json replaced D's
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "g"), "--markdown", str(a / RESULTS)]) == 2
    assert main(["diagnose", str(a), "--json", str(a / RESULTS)]) == 2
    err = capfd.readouterr().err
    assert err.count(f"{a / RESULTS} is an input of this command") == 2
    assert (a / RESULTS).read_bytes() == before


def test_a_file_read_through_open_regular_is_never_written_over(tmp_path):
    from harness.core.inputfile import open_regular

    data = tmp_path / "rules.yaml"
    data.write_text("rules: []\n")
    os.link(data, tmp_path / "alias.yaml")
    with open_regular(data, "rule file") as f:
        f.read()
    for target in (data, tmp_path / "alias.yaml"):
        with pytest.raises(UsageError, match=f"is an input of this command \\(it is {data}\\)|{data} is an input"):
            atomic.write_text(target, "over it")
        with pytest.raises(UsageError, match="is an input of this command"):
            atomic.append_text(target, "after it")
    assert data.read_text() == "rules: []\n"


def test_markdown_is_appended_whole_and_a_summary_keeps_what_it_held(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("## an earlier step\n", encoding="utf-8")
    write_outputs(_gate_result("fine"), tmp_path / "g", summary)
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## an earlier step\n### critpath gate:")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# -- markdown from outside stays text ------------------------------------------------------------

def _rendered(md: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(md)


def test_markdown_syntax_in_an_error_a_machine_or_a_case_id_stays_text(tmp_path):
    image = "![t](https://evil.example/t.png)"
    html = _rendered(markdown(_gate_result(image)))
    assert "<img" not in html and "evil.example" in html  # shown, not loaded
    result = _gate_result("fine")
    case = "selftest/mode=a`b,world=1"
    result.verdicts[case] = result.verdicts.pop(BAD_CASE)
    html = _rendered(markdown(result))
    assert "<code>selftest/mode=a`b,world=1</code>" in html
    from harness.document.blocks import Image, Para, to_markdown

    alt = "allreduce (m](https://evil.example/pwn.png) ![z)"
    html = _rendered(to_markdown([Image("allreduce_latency", alt, b""), Para("*a* [l](u) `c` _d_ <b>x</b> ~~s~~")]))
    assert html.count("<img") == 1 and "evil.example/pwn.png" not in html.split('src="')[1].split('"')[0]
    for markup in ("<em>", "<a ", "<code>", "<b>", "<del>", "<s>"):
        assert markup not in html.split("</p>", 1)[1]


def test_a_newline_from_outside_starts_no_block_of_its_own(tmp_path, capsys):
    fake = "r1\n\n**INCOMPLETE RUN** none; all 2 cases ok"
    # a run ID is a plain token (harness/core/runid.py): one holding a newline is no run critpath wrote
    run = hostile_run(tmp_path / "forged")
    data = json.loads((run / "run.json").read_text())
    atomic.write_json(run / "run.json", {**data, "run_id": fake}, run_writer=True)
    (run / RESULTS).write_text((run / RESULTS).read_text().replace('"r1"', json.dumps(fake)))
    assert main(["report", str(run), "--out", str(tmp_path / "forged-rep")]) == 2
    assert "run.json: field run_id: 'r1\\n\\n**INCOMPLETE RUN**" in capsys.readouterr().err
    # a host name is outside text a report shows as it is
    run = hostile_run(tmp_path / "run", host=fake)
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) in (0, 1)
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    assert "| host | r1  \\*\\*INCOMPLETE RUN\\*\\* none" in md  # the text is there, in its cell, escaped
    assert not [line for line in md.splitlines() if line.startswith("**INCOMPLETE RUN**")]
    assert "<strong>INCOMPLETE" not in _rendered(md)
    gate_md = markdown(_gate_result("side sub\n\n### critpath gate: PASS (all fine)"))
    assert [line for line in gate_md.splitlines() if line.startswith("### ")] == [gate_md.splitlines()[0]]


def test_a_csv_cell_that_a_spreadsheet_would_run_is_quoted_numbers_are_not(tmp_path):
    import csv

    run = hostile_run(tmp_path / "run", host="=1+1")
    out = tmp_path / "x.csv"
    assert main(["export", str(run), "--format", "csv", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert {r["host"] for r in rows} == {"'=1+1"}
    assert escape.for_csv(-1.5) == -1.5 and escape.for_csv("-1") == "'-1" and escape.for_csv("ok") == "ok"
    assert escape.for_csv("@SUM(A1)") == "'@SUM(A1)" and escape.for_csv("\tx") == "'\tx"


# -- temporaries: gone on SIGTERM, swept after a SIGKILL, never "contents" --------------------------

STALL_IN_WRITE = """
import os, sys, time
from harness.core import atomic
from harness.cli import main
real = os.fsync
def stall(fd):  # the first file being written: its temporary is on disk now
    print("writing", flush=True)
    time.sleep(60)
atomic.os.fsync = stall
sys.exit(main(sys.argv[1:]))
"""


def _stalled(tmp_path, *argv):
    proc = subprocess.Popen([sys.executable, "-c", STALL_IN_WRITE, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "writing"
    return proc


def _temps(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.name.endswith(".tmp"))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])  # SIGHUP: a closed terminal, unwound alike
def test_a_sigterm_mid_write_leaves_no_temporary_and_no_claim(tmp_path, sig):
    run, out = hostile_run(tmp_path / "run"), tmp_path / "rep"
    proc = _stalled(tmp_path, "report", str(run), "--out", str(out))
    assert _temps(out)  # the write is under way
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 128 + sig
    assert f"interrupted by {sig.name}" in proc.stderr.read()
    assert _temps(out) == [] and not (out / CLAIM_FILE).exists()


def test_a_sigkill_mid_write_leaves_a_temporary_that_the_next_writer_sweeps(tmp_path):
    run, out = hostile_run(tmp_path / "run"), tmp_path / "x.csv"
    proc = _stalled(tmp_path, "export", str(run), "--format", "csv", "--out", str(out))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    left = _temps(tmp_path)
    assert len(left) == 1 and len(left[0]) < 40  # bounded, whatever the target's name
    assert main(["export", str(run), "--format", "csv", "--out", str(tmp_path / "y.csv")]) == 0
    assert _temps(tmp_path) == []


def test_a_claim_and_a_dead_writers_temporary_are_not_contents(tmp_path):
    out = tmp_path / "g"
    out.mkdir()
    stale = out / f".critpath-{_dead_pid()}-0a1b2c3d.tmp"
    stale.write_text("half a gate.json")
    with claim_dir(out, "gate") as claim:
        assert claim.contents() == []
        mine, fd = temps.new_temp(out)  # a live writer's, locked while it writes: kept, and it is contents
        try:
            assert claim.contents() == [mine]
        finally:
            os.close(fd)
        assert claim.contents() == [] and not mine.exists()  # its writer gone: swept
    assert not stale.exists()


def test_a_users_file_shaped_like_an_old_temporary_is_never_swept(tmp_path):
    """0.x named its temporaries ``.NAME.PID.RANDOM.tmp``: a pattern loose enough that the sweep
    deleted a user's ``.thesis.2024.abcdef.tmp`` beside an export."""
    run, out = hostile_run(tmp_path / "run"), tmp_path / "ud"
    out.mkdir()
    mine = [out / ".thesis.2024.abcdef.tmp", out / f".backup.{_dead_pid()}.deadbe.tmp", out / ".critpath-4000000-00.tmp"]
    for path in mine:
        path.write_text("data")
    assert main(["export", str(run), "--format", "csv", "--out", str(out / "x.csv")]) == 0
    assert all(path.read_text() == "data" for path in mine)


def test_an_output_that_is_a_symlink_is_refused_and_the_link_kept(tmp_path, capfd):
    """The rename replaced the link (``/dev/stdout``, a CI step summary) with a file holding the
    output, where nobody looked."""
    run = hostile_run(tmp_path / "run")
    summary = tmp_path / "summary.md"
    summary.write_text("earlier steps\n")
    link = tmp_path / "summary_link.md"
    link.symlink_to(summary)
    assert main(["export", str(run), "--format", "csv", "--out", str(link)]) == 2
    assert main(["compare", str(run), str(run), "--out", str(tmp_path / "g"), "--markdown", str(link)]) == 2
    assert capfd.readouterr().err.count("is a symbolic link") == 2
    assert link.is_symlink() and summary.read_text() == "earlier steps\n"
    assert not (tmp_path / "g" / "gate.json").exists()  # refused before any output was written


def test_markdown_into_one_of_the_gates_own_outputs_is_refused(tmp_path, capfd):
    run, out = hostile_run(tmp_path / "run"), tmp_path / "g"
    for name in ("gate.json", "gate.md", "gate.xml"):
        assert main(["compare", str(run), str(run), "--out", str(out), "--markdown", str(out / name)]) == 2
        assert "is one of the gate's own outputs" in capfd.readouterr().err
    assert not (out / "gate.json").exists()


# -- the terminal: every byte escaped, whatever prints it -------------------------------------------

def test_paths_hosts_and_names_reach_the_terminal_escaped(tmp_path, capfd):
    run = hostile_run(tmp_path / "run", host="node\x1b]0;pwned\x07\u202e\ud800")
    out = tmp_path / "R\x1b]0;pwned\x07"
    assert main(["report", str(run), "--out", str(out)]) == 0
    assert main(["export", str(run), "--format", "json", "--out", str(out / "x.json")]) == 0
    assert main(["diagnose", str(run), "--json", str(tmp_path / "d.json")]) in (0, 1, 2)  # was UnicodeEncodeError
    assert json.loads((tmp_path / "d.json").read_text())["schema"] == "critpath.diagnosis/1"
    profile = tmp_path / "p.yaml"
    profile.write_text((ROOT / "baselines" / "profiles" / "cpu-ci.yaml").read_text(encoding="utf-8")
                       .replace("name: cpu-ci", 'name: "cpu\\e]0;pwned\\a"'), encoding="utf-8")
    assert main(["accept", "--profile", str(profile), "--run", str(run), "--no-report"]) in (1, 2)
    printed = "".join(capfd.readouterr())
    _no_raw(printed)
    assert "\u202e" not in printed and "acceptance cpu\\x1b]0;pwned\\x07" in printed
    assert "R\\x1b]0;pwned\\x07/report.md" in printed and "node\\x1b]0;pwned\\x07\\u202e\\ud800" in printed


def test_rich_markup_and_escapes_in_a_host_are_text_and_rich_keeps_its_own_colours():
    import io

    from harness.core.console import Console
    from harness.core.streams import EscapedStream

    stream = EscapedStream(io.StringIO())
    console = Console(file=stream, force_terminal=True, color_system="standard", width=80)
    console.print("[bold]h\x1b]0;x\x07", style="red", highlight=False)
    text = stream.raw.getvalue()
    assert "\x1b[31m" in text  # rich's colour, as it drew it
    # the BEL too: rich's Text would drop it, and the line would not be the text printed
    assert "[bold]h\\x1b]0;x\\x07" in text and "\x07" not in text and text.count("\x1b") == 2


def test_an_emoji_shortcode_in_a_label_or_an_error_is_text(tmp_path, capsys):
    """`show r1 T2 --label ':smiley:x'` printed 😃x; an error holding `:smiley:` printed 😃."""
    one = hostile_run(tmp_path / "one", error="boom :smiley:")
    assert main(["show", str(one)]) == 1
    two = hostile_run(tmp_path / "two", run_id="r2")
    assert main(["show", str(one), str(two), "--label", ":smiley:x", "--label", "y"]) in (0, 1)
    out = capsys.readouterr().out
    assert "boom :smiley:" in out and ":smiley:x" in out
    assert "\U0001f603" not in out


def test_an_ascii_locale_gets_backslashes_not_a_traceback(tmp_path):
    run = hostile_run(tmp_path / "run")
    env = {"PYTHONUTF8": "0", "LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": ""}
    shown = run_cli("show", str(run), env=env)
    assert shown.returncode == 1 and "Traceback" not in shown.stderr, shown.stderr
    assert "\\u2014" in shown.stdout or "\\u" in shown.stdout
    summary = tmp_path / "s.md"
    reason = "zero\u200bwidth"
    result = _gate_result(reason)
    write_outputs(result, tmp_path / "g", summary)  # files are UTF-8 whatever the locale
    assert reason in summary.read_text(encoding="utf-8")
    compared = run_cli("compare", str(run), str(hostile_run(tmp_path / "b", run_id="r2")), "--out", str(tmp_path / "g2"),
                       "--markdown", str(summary), env=env)
    assert compared.returncode == 2 and "Traceback" not in compared.stderr, compared.stderr


# Rich markup in text from outside: a closing tag with no opening one ended a command in a
# MarkupError traceback; an opening one vanished, so the path printed was not the one written.
MARKUP_DIR = "out[/x]\x1b]0;pwned\x07"
BOLD_DIR = "b[bold]X"


def test_rich_markup_in_a_path_a_label_or_a_host_is_text_in_every_command_that_prints_through_rich(
        tmp_path, capfd):
    one = hostile_run(tmp_path / MARKUP_DIR, host="h[/x][bold]y")
    two = hostile_run(tmp_path / BOLD_DIR, run_id="r2")
    assert main(["show", str(one)]) == 1  # a failed case
    assert main(["show", str(one), str(two), "--label", "[/y]", "--label", "[bold]z"]) == 1
    assert main(["diagnose", str(one)]) in (0, 1, 2)
    model_out = tmp_path / "m[/x]\x07"
    assert main(["model", "--out", str(model_out), "--ranks", "8,16", "--sizes", "1K,1M"]) == 0
    out, err = capfd.readouterr()
    printed = out + err
    assert "Traceback" not in printed and "MarkupError" not in printed, printed
    _no_raw(printed)
    assert "[/y]" in printed and "[bold]z" in printed and "h[/x][bold]y" in printed
    shown = escape.for_terminal(str(model_out))
    assert f"modelled figures: {shown}/modelled_time_vs_size.png" in printed
    assert f"modelled results in {shown} " in printed


def test_critpath_runs_header_and_summary_name_the_directory_it_wrote(tmp_path):
    import io
    from types import SimpleNamespace

    from harness.core.console import Console
    from harness.run.reporter import announce, finish

    for name in (MARKUP_DIR, BOLD_DIR):
        path = tmp_path / name
        journal = SimpleNamespace(run_id="r1", path=path, records=[],
                                  plan=SimpleNamespace(cases=[], backend="gloo"))
        stream = io.StringIO()
        console = Console(file=stream, width=400)
        announce(console, journal, "world 1")
        finish(console, journal)
        text = stream.getvalue()
        shown = escape.for_terminal(str(path))
        assert f"gloo -> {shown}\n" in text and f"results in {shown}\n" in text, text


def test_a_progress_bars_text_is_not_markup():
    """The bar's description is the case running, and rich's own text column reads it as markup."""
    import io

    from harness.core.console import Console
    from harness.run.reporter import Reporter

    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=200)
    with Reporter(console, 1) as reporter:
        reporter.started("case[/x] [bold]y\x07")
        reporter.progress.refresh()
    assert "case[/x] [bold]y\\x07" in stream.getvalue()


def test_no_module_reads_rich_markup():
    """Markup off in the one Console is the rule; these are the ways round it."""
    import ast

    allowed = ROOT / "harness" / "core" / "console.py"
    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if path == allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in ("rich", "rich.markup", "rich.console"):
                found.append(f"{path.name}: from {node.module} import ...")  # a Console that reads markup
            named = node.func if isinstance(node, ast.Call) else None
            name = getattr(named, "attr", None) or getattr(named, "id", None)
            if name in ("TextColumn", "from_markup", "render_markup"):
                found.append(f"{path.name}:{node.lineno}: {name}(...)")
            if isinstance(node, ast.keyword) and node.arg in ("markup", "emoji") and getattr(
                    node.value, "value", None) is True:
                found.append(f"{path.name}: {node.arg}=True")
    assert not found, found


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
@pytest.mark.parametrize("name", [MARKUP_DIR, BOLD_DIR])
def test_critpath_run_into_an_out_holding_markup_finishes_and_prints_its_real_path(tmp_path, name):
    out = tmp_path / name
    done = run_cli("run", "--case", OK_CASE, "--out", str(out), env={"COLUMNS": "400"})  # a path on one line
    printed = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in printed, printed
    _no_raw(printed)
    shown = escape.for_terminal(str(out))
    assert f"gloo -> {shown}\n" in printed and f"results in {shown}\n" in printed, printed
    assert json.loads((out / "run.json").read_text())["state"] == "finished"
    shown_run = run_cli("show", str(out))
    assert shown_run.returncode == 0 and "Traceback" not in shown_run.stderr, shown_run.stderr


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_critpath_accept_into_an_out_holding_markup_verifies_and_prints_its_real_path(tmp_path):
    """accept runs its cases through run's header and summary: a closing tag there was exit 1,
    which CI reads as a failed acceptance."""
    profile = tmp_path / "p.yaml"
    profile.write_text(f"""schema: critpath.accept/1
name: markup
description: markup in --out
world: 1
backend: gloo
nodes: 1
run: {{iters: 50, warmup: 2, timeout_s: 60, cases: ['{OK_CASE}']}}
checks:
  - {{name: noop p50, case: '{OK_CASE}', statistic: p50_us, max: 100000, source: test}}
""", encoding="utf-8")
    out = tmp_path / MARKUP_DIR
    done = run_cli("accept", "--profile", str(profile), "--out", str(out), "--no-report", env={"COLUMNS": "400"})
    printed = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in printed, printed
    _no_raw(printed)
    shown = escape.for_terminal(str(out))
    assert f"gloo -> {shown}\n" in printed and f"results in {shown}\n" in printed, printed


# -- what --out and the claim may be -----------------------------------------------------------------

def test_an_out_that_is_a_fifo_or_a_device_is_refused_and_left_alone(tmp_path, capfd):
    import stat as stat_

    run = hostile_run(tmp_path / "run")
    fifo = tmp_path / "ff"
    os.mkfifo(fifo)
    assert main(["export", str(run), "--format", "csv", "--out", str(fifo)]) == 2
    assert stat_.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(UsageError, match="/dev/null is a character device, not a regular file"):
        atomic.write_text(os.devnull, "x")  # as root, os.replace would have put a file there
    err = capfd.readouterr().err
    assert f"{fifo} is a FIFO, not a regular file" in err


@pytest.mark.parametrize("how", ["symlink", "hard link"])
def test_a_planted_claim_file_is_refused_and_what_it_points_at_kept(tmp_path, capfd, how):
    run = hostile_run(tmp_path / "run")
    victim = tmp_path / "victim.txt" if how == "symlink" else run / RESULTS
    if how == "symlink":
        victim.write_text("precious\n")
        (run / CLAIM_FILE).symlink_to(victim)
    else:
        os.link(victim, run / CLAIM_FILE)
    before = victim.read_bytes()
    assert main(["report", str(run)]) == 2
    assert victim.read_bytes() == before
    assert f"{run / CLAIM_FILE} is a" in capfd.readouterr().err


def test_long_names_fit_and_a_failed_cleanup_hides_no_error(tmp_path, monkeypatch):
    run = hostile_run(tmp_path / "run")
    out = tmp_path / ("x" * 240)
    assert main(["export", str(run), "--format", "csv", "--out", str(out)]) == 0  # was ENAMETOOLONG on the temp
    assert out.exists()
    cjk = hostile_run(tmp_path / ("数" * 85), run_id="r2")  # 255 bytes: the longest name a directory can have
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(cjk), str(run)]) == 0
    made = next((tmp_path / "reports").iterdir())
    assert len(made.name.encode()) <= 120 and (made / "report.md").exists()

    def gone(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(atomic.os, "unlink", gone)
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(OSError, match="No space left on device"):
        atomic.write_text(tmp_path / "y", "z")


# -- the third probe of this class (issue 26) ---------------------------------------------------------

# A process that is not critpath locks a file, as flock(1) or another tool would, until stdin closes.
LOCKER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def locker(live_script):
    """Start LOCKER on a path; every one started is released at the end of the test."""
    return lambda path: live_script(LOCKER, path, ready="locked")


@pytest.mark.parametrize("name", [CLAIM_FILE, ".critpath-4242-0a1b2c3d.tmp"])
def test_an_output_named_as_critpaths_bookkeeping_is_refused_and_the_holder_keeps_its_directory(
        held, capfd, tmp_path, name):
    """``export --out D/.critpath-claim`` replaced a live holder's claim file, after which a second
    process claimed D."""
    out, holder = held
    before = (out / CLAIM_FILE).read_bytes()
    run = hostile_run(tmp_path / "run")
    assert main(["export", str(run), "--format", "csv", "--out", str(out / name)]) == 2
    assert f"{out / name}: {name} is a name critpath keeps for its own bookkeeping" in capfd.readouterr().err
    assert (out / CLAIM_FILE).read_bytes() == before
    with pytest.raises(DirectoryClaimed, match=f"the file names critpath run \\(pid {holder.pid} on "):
        claim_dir(out, "run")
    assert main(["run", "--case", OK_CASE, "--iters", "5", "--out", str(tmp_path / CLAIM_FILE)]) == 2
    assert not (tmp_path / CLAIM_FILE).exists()


@pytest.mark.parametrize("command", ["gate-power --report", "export --out", "diagnose --json"])
def test_every_output_of_every_command_is_refused_in_a_directory_another_process_holds(held, capfd, tmp_path,
                                                                                         command):
    """``gate-power --report FILE --resample N`` rewrote FILE without claiming its directory; a
    file output (export, diagnose) was written into a directory a live run held."""
    out, holder = held
    run = hostile_run(tmp_path / "run")
    power = out / "power.json"
    power.write_text(json.dumps({"cells": [], "trials": [], "settings": {}}))
    (out / "gates").mkdir()
    argv = {"gate-power --report": ["gate-power", "--report", str(power), "--resample", "10"],
            "export --out": ["export", str(run), "--format", "csv", "--out", str(out / "x.csv")],
            "diagnose --json": ["diagnose", str(run), "--json", str(out / "d.json")]}[command]
    before = sorted(p.name for p in out.iterdir())
    assert main(argv) == 2
    err = capfd.readouterr().err
    assert f"{out} is in use: another process holds the lock on {out / CLAIM_FILE}" in err
    assert f"the file names critpath run (pid {holder.pid} on " in err
    assert sorted(p.name for p in out.iterdir()) == before
    assert json.loads(power.read_text()) == {"cells": [], "trials": [], "settings": {}}


def test_a_refusal_names_the_files_holder_only_as_what_the_file_says(tmp_path, capfd, locker):
    """A lock held by a process that is not critpath was reported as held by whatever pid the
    claim file named, a process long gone."""
    import socket

    run, out = hostile_run(tmp_path / "run"), tmp_path / "out"
    out.mkdir()
    dead = _dead_pid()
    (out / CLAIM_FILE).write_text(json.dumps({"pid": dead, "host": socket.gethostname(), "command": "run",
                                              "argv": ["critpath", "run"], "started_at": "2026-01-01T00:00:00+00:00"}))
    locker(out / CLAIM_FILE)
    assert main(["report", str(run), "--out", str(out)]) == 2
    err = capfd.readouterr().err
    assert f"{out} is in use: another process holds the lock on {out / CLAIM_FILE}; " in err
    assert f"the file names critpath run (pid {dead} on {socket.gethostname()}" in err
    assert f"but no process {dead} runs here: the lock is held by a process the file does not name" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    locker(empty / CLAIM_FILE)
    with pytest.raises(DirectoryClaimed, match="the file names no holder"):
        claim_dir(empty, "report")


def test_json_outputs_are_strict_json_a_non_finite_figure_null_with_its_reason_or_an_error(tmp_path, monkeypatch):
    """model.json held ``Infinity`` when a profile's figures overflowed: write_json allowed NaN. A
    profile file can no longer give such figures (each number has its declared range); a profile
    built in code still can, and model.json must stay strict JSON."""
    import dataclasses

    from harness.model import command
    from harness.model import profile as hardware

    path = tmp_path / "huge.yaml"
    path.write_text((ROOT / "harness" / "model" / "profiles" / "dgx-a100-roce.yaml").read_text()
                    .replace("bandwidth_gbytes_s: 25\n", "bandwidth_gbytes_s: 1e-320\n"))
    assert main(["model", "--profile", str(path), "--out", str(tmp_path / "refused"), "--no-plots"]) == 2
    shipped = hardware.load_profile("dgx-a100-roce")
    roce = dataclasses.replace(shipped.tiers["roce"], bandwidth_gbytes_s=1e-320)
    huge = dataclasses.replace(shipped, tiers={**shipped.tiers, "roce": roce})
    monkeypatch.setattr(command, "load_profile", lambda spec: huge)
    assert main(["model", "--out", str(tmp_path / "m"), "--no-plots"]) == 0

    def refuse(token):
        raise AssertionError(f"{token} in model.json")

    doc = json.loads((tmp_path / "m" / "model.json").read_text(), parse_constant=refuse)
    assert doc["modelled_time_us"]["ring"][1][0] is None
    assert "modelled_time_us.ring[1][0]" in doc["non_finite"]["fields"] and doc["non_finite"]["count"] > 0
    assert "overflow" in doc["non_finite"]["reason"]
    with pytest.raises(atomic.NonFiniteError, match=r"x.json: field a\[1\].b is nan, which JSON cannot hold"):
        atomic.write_json(tmp_path / "x.json", {"a": [1.0, {"b": float("nan")}]})
    assert not (tmp_path / "x.json").exists()


def test_the_sweep_asks_the_temporarys_lock_not_its_pid(tmp_path, locker):
    """A live writer's temporary in another pid namespace (its pid dead here) was swept; one whose
    pid was reused by an unrelated process made every `import-nccl-tests --out D` refuse for ever."""
    live = tmp_path / "d" / f".critpath-{_dead_pid()}-0a1b2c3d.tmp"
    live.parent.mkdir()
    locker(live)  # its writer holds it: alive, whatever its pid says
    run = hostile_run(tmp_path / "run")
    assert main(["export", str(run), "--format", "csv", "--out", str(live.parent / "x.csv")]) == 0
    assert live.exists()
    out = tmp_path / "imported"
    out.mkdir()
    reused = out / ".critpath-1-0a1b2c3d.tmp"  # pid 1 is alive, and is not a writer
    reused.write_text("half a file")
    log = sorted((ROOT / "tests" / "fixtures" / "nccl_tests").iterdir())[0]
    assert main(["import-nccl-tests", str(log), "--out", str(out)]) == 0
    assert not reused.exists()


def test_accept_checks_every_output_before_it_writes_one(tmp_path, capfd):
    """accept wrote acceptance.json, then refused its report, whose path was the profile it read."""
    run = hostile_run(tmp_path / "run")
    profile = run / "report.md"
    profile.write_text((ROOT / "baselines" / "profiles" / "cpu-ci.yaml").read_text(encoding="utf-8"))
    before = profile.read_bytes()
    assert main(["accept", "--profile", str(profile), "--run", str(run)]) == 2
    assert f"{profile} is an input of this command" in capfd.readouterr().err
    assert not (run / "acceptance.json").exists() and profile.read_bytes() == before


def _repo(path):
    path.mkdir()
    for argv in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"]):
        if argv[0] == "add":
            (path / "asv.conf.json").write_text('{"version": 1}\n')
            (path / "docs").mkdir()
            (path / "docs" / "a.md").write_text("a\n")
        subprocess.run(["git", *argv], cwd=path, check=True, capture_output=True)
    return path


@pytest.mark.parametrize("where", ["the repo", "above it", "a tracked directory"])
def test_history_refuses_an_out_over_the_repository_it_measures(tmp_path, capfd, where):
    """``history --out REPO`` rewrote the repository's own asv.conf.json."""
    repo = _repo(tmp_path / "repo")
    out = {"the repo": repo, "above it": tmp_path, "a tracked directory": repo / "docs"}[where]
    assert main(["history", "HEAD", "--repo", str(repo), "--out", str(out)]) == 2
    err = capfd.readouterr().err
    assert f"--out {out}" in err and "being measured" in err
    assert (repo / "asv.conf.json").read_text() == '{"version": 1}\n'
    assert not (out / CLAIM_FILE).exists()
    assert sorted(p.name for p in repo.iterdir()) == [".git", "asv.conf.json", "docs"]


def test_report_never_writes_through_a_planted_plots_link(tmp_path, capfd):
    """`report` wrote its plots through a ``plots`` symlink to elsewhere."""
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    lines = (ROOT / "tests" / "fixtures" / "run_mixed" / RESULTS).read_text().splitlines(keepends=True)
    (run / RESULTS).write_text("".join(line for line in lines if '"family":"allreduce"' in line))
    (run / "plots").symlink_to(elsewhere)
    assert main(["report", str(run)]) == 2
    assert f"{run / 'plots'} is a symbolic link (to {elsewhere})" in capfd.readouterr().err
    assert list(elsewhere.iterdir()) == [] and not (run / "report.md").exists()
