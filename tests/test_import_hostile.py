"""Imports of nccl-tests output that is hostile or cut short: a run directory is read as whole
only when its records say so, an imported figure is checked against the row it came from, every
value of the input is type- and range-checked, and the importer is bounded."""
from __future__ import annotations

import copy
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.store import MAX_RECORD_BYTES, RESULTS, RUN_META, load_run
from harness.nccltests import limits
from harness.nccltests.importer import NcclTestsFormatError, import_file, parse_file

ROOT = Path(__file__).resolve().parents[1]
NT = Path(__file__).parent / "fixtures" / "nccl_tests"
sys.path.insert(0, str(ROOT / "examples"))
from nccltests_biglog import write_log  # examples/ is on the path from here

PROFILE = ("schema: critpath.accept/1\nname: imported\nworld: 8\n"
           "checks:\n  - {name: busbw 128M, family: allreduce, select: {size_bytes: 134217728}, "
           "statistic: busbw_gbps, min: 380, source: t}\n")


def _profile(tmp_path: Path) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE)
    return path


def _json(tmp_path: Path, edit, name: str = "all_reduce.json") -> Path:
    data = json.loads((NT / "all_reduce_h100.json").read_text())
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them
    return path


def _reads_incomplete(run: Path, tmp_path: Path, capsys, why: str = "incomplete") -> None:
    """Every reader of ``run`` says it is not whole, and ``why``: show, report, accept, compare."""
    capsys.readouterr()
    assert main(["show", str(run)]) == 1
    assert why in capsys.readouterr().err
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) in (0, 1)
    assert "INCOMPLETE RUN" in (tmp_path / "report" / "report.md").read_text()
    assert main(["accept", "--profile", str(_profile(tmp_path)), "--run", str(run), "--no-report",
                 "--out", str(tmp_path / "acc")]) == 2
    assert f"COULD NOT VERIFY  the run: {why}" in capsys.readouterr().out
    assert main(["compare", str(run), str(run), "--out", str(tmp_path / "cmp")]) == 2
    assert why in capsys.readouterr().err


# -- 4: a killed or crashed import reads as incomplete, from its records ---------------------------

_STOP_AFTER_FIRST_BATCH = """
import os, signal, sys
real = os.fsync
def fsync(fd):
    real(fd)
    if os.readlink(f"/proc/self/fd/{fd}").endswith("/results.jsonl"):
        os.kill(os.getpid(), signal.SIGSTOP)  # the first batch is on disk: wait here to be killed
os.fsync = fsync
from harness.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_an_import_killed_after_its_first_batch_reads_as_incomplete_everywhere(tmp_path, capsys):
    log, run = tmp_path / "all_reduce.txt", tmp_path / "run"
    write_log(log, 2 * limits.RECORDS_PER_BATCH + 7)
    # A real critpath import, stopped by itself at a deterministic point (right after its first
    # fsync of results.jsonl), then SIGKILLed: no timing decides what is on disk.
    proc = subprocess.Popen([sys.executable, "-c", _STOP_AFTER_FIRST_BATCH, "import-nccl-tests", str(log),
                             "--out", str(run)], env={**os.environ, "PYTHONPATH": str(ROOT)})
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), "the import ended before its first batch was on disk"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    written = (run / RESULTS).read_text().count("\n")
    assert written == limits.RECORDS_PER_BATCH
    assert json.loads((run / RUN_META).read_text())["state"] == "importing"
    assert load_run(run).incomplete == f"incomplete: {written} cases, run.json says importing"
    _reads_incomplete(run, tmp_path, capsys)



@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
@pytest.mark.slow  # real processes, signalled
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_an_import_stopped_by_a_signal_says_interrupted_as_a_run_does(tmp_path, capsys, signal_name):
    # Before: run.json said "importing", as after a SIGKILL; a stopped `critpath run` says interrupted.
    log, run = tmp_path / "all_reduce.txt", tmp_path / "run"
    write_log(log, 2 * limits.RECORDS_PER_BATCH + 7)
    proc = subprocess.Popen([sys.executable, "-c", _STOP_AFTER_FIRST_BATCH, "import-nccl-tests", str(log),
                             "--out", str(run)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), "the import ended before its first batch was on disk"
    signum = getattr(signal, signal_name)
    os.kill(proc.pid, signum)  # pending while it is stopped, handled once it goes on
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    written = (run / RESULTS).read_text().count("\n")
    assert written == limits.RECORDS_PER_BATCH
    assert json.loads((run / RUN_META).read_text())["state"] == "interrupted"
    assert load_run(run).incomplete == f"incomplete: {written} cases, run.json says interrupted"
    _reads_incomplete(run, tmp_path, capsys)
    assert main(["import-nccl-tests", str(log), "--out", str(run)]) == 2
    said = capsys.readouterr().err
    assert (f"{run} holds an import that did not finish (run.json state interrupted, {written} records): "
            "choose another --out, or remove it") in said, said

def test_an_import_whose_run_json_claims_more_than_its_records_is_incomplete(tmp_path, capsys):
    # What the old importer left when killed: run.json "imported" and cases_ok written first.
    run = tmp_path / "run"
    assert main(["import-nccl-tests", str(NT / "all_reduce_h100.txt"), "--out", str(run)]) == 0
    lines = (run / RESULTS).read_text().splitlines(keepends=True)
    (run / RESULTS).write_text("".join(lines[:4]))
    assert load_run(run).incomplete == "incomplete: 4 of 9 cases, run.json says imported"
    _reads_incomplete(run, tmp_path, capsys)


def test_a_run_directory_without_run_json_is_not_whole(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["import-nccl-tests", str(NT / "all_reduce_h100.txt"), "--out", str(run)]) == 0
    (run / RUN_META).unlink()
    assert load_run(run).incomplete == "incomplete: 9 cases and no run.json, which a whole run writes last"
    assert main(["show", str(run)]) == 1
    # its results file, with the run's fingerprint beside it, is that run: no more whole
    assert main(["show", str(run / RESULTS)]) == 1


def test_the_import_writes_its_records_before_the_run_json_that_claims_them(tmp_path):
    run = tmp_path / "run"
    import_file(NT / "all_reduce_h100.txt", run)
    meta = json.loads((run / RUN_META).read_text())
    assert meta["state"] == "imported" and meta["cases_total"] == 9 == meta["cases_ok"]
    assert (run / RUN_META).stat().st_mtime_ns >= (run / RESULTS).stat().st_mtime_ns
    assert len(meta["source_sha256"]) == 64
    assert load_run(run).incomplete == ""


def test_a_json_row_with_a_nan_figure_is_refused_and_leaves_nothing(tmp_path, capsys):
    def nan_algbw(data):
        data["results"][3]["in_place"]["alg_bw"] = float("nan")
    path = _json(tmp_path, nan_algbw)
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: results[3].in_place.alg_bw: nan is not a finite number (GB/s)" in err
    assert not (tmp_path / "run").exists()


# -- 4: diagnose calls a node without valid records "no evidence", never healthy --------------------

def test_diagnose_says_no_evidence_for_a_node_without_records(tmp_path, capsys):
    good = tmp_path / "good"
    assert main(["import-nccl-tests", str(NT / "all_reduce_h100.txt"), "--out", str(good)]) == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / RUN_META).write_text(json.dumps({"schema": "critpath.run/1", "state": "finished", "cases_total": 0}))
    (empty / "fingerprint.json").write_text(json.dumps({"host": "node09"}))
    capsys.readouterr()
    code = main(["diagnose", str(good), str(empty), "--json", str(tmp_path / "d.json")])
    out = capsys.readouterr().out
    # a run.json that plans no case describes no run critpath writes: the run is not whole, and its
    # node is not healthy
    assert "not whole: run.json: field cases_total: 0 is not a count of planned cases" in out
    verdicts = {n["node"]: n["verdict"] for n in json.loads((tmp_path / "d.json").read_text())["nodes"]}
    assert verdicts["node01"] == "healthy" and verdicts["node09"] != "healthy"
    assert code == 1


# -- 5: an edited imported figure is refused, naming the record and the field ---------------------

@pytest.mark.parametrize("field, edit", [
    ("metrics.busbw_gbps", lambda r: r["metrics"].update(busbw_gbps=9999.0)),
    ("metrics.time_us", lambda r: r["metrics"].update(time_us=1.0)),
    ("metrics.p99_us", lambda r: r["metrics"].update(p99_us=1.0)),
    ("metrics.algbw_gbps", lambda r: r["metrics"].pop("algbw_gbps")),
    ("samples_ns", lambda r: (r.update(samples_ns=[1000]), r.update(summary=None))),
])
def test_an_edited_imported_figure_is_refused_by_acceptance(tmp_path, capsys, field, edit):
    run = tmp_path / "run"
    assert main(["import-nccl-tests", str(NT / "all_reduce_h100.txt"), "--out", str(run)]) == 0
    lines = (run / RESULTS).read_text().splitlines()
    record = json.loads(lines[-1])
    edit(record)
    lines[-1] = json.dumps(record)
    (run / RESULTS).write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["accept", "--profile", str(_profile(tmp_path)), "--run", str(run), "--no-report"]) == 2
    out = capsys.readouterr().out
    assert "acceptance imported: COULD NOT VERIFY" in out
    assert (f"results.jsonl:9: allreduce/algo=native,backend=nccl,dtype=float32,size_bytes=134217728,world=8: "
            f"field {field}") in out
    assert main(["show", str(run)]) == 2


def test_the_tampered_busbw_names_what_its_row_says(tmp_path):
    run = tmp_path / "run"
    import_file(NT / "all_reduce_h100.txt", run)
    text = (run / RESULTS).read_text()
    assert text.count('"busbw_gbps":436.08}') == 1
    (run / RESULTS).write_text(text.replace('"busbw_gbps":436.08}', '"busbw_gbps":9999.0}'))
    with pytest.raises(Exception, match=r"field metrics.busbw_gbps: 9999.0 but its imported row "
                                         r"\(all_reduce_h100.txt line 26, extra.imported.in_place\) says 436.08"):
        load_run(run)


# -- 7: a wrong count is a whole number, never rounded --------------------------------------------

@pytest.mark.parametrize("token", ["0.5", "-1", "1e0", "nan", "+0", "1_0"])
def test_a_text_wrong_count_that_is_not_a_whole_number_is_refused(tmp_path, token):
    lines = (NT / "all_reduce_h100.txt").read_text().splitlines(keepends=True)
    assert lines[25].rstrip().endswith("436.08       0")
    lines[25] = lines[25].rstrip()[:-1] + token + "\n"
    path = tmp_path / "all_reduce.txt"
    path.write_text("".join(lines))
    refused = rf"(expected an integer .*, got '{re.escape(token)}'|{re.escape(token)} is outside the range)"
    with pytest.raises(NcclTestsFormatError, match=rf"all_reduce.txt:26: in-place #wrong: {refused}"):
        parse_file(path)


@pytest.mark.parametrize("value", [0.9, 0.5, -1, float("nan"), "1", True, [0]])
def test_a_json_nwrong_that_is_not_a_count_is_refused(tmp_path, value):
    path = _json(tmp_path, lambda d: d["results"][8]["in_place"].update(nwrong=value))
    with pytest.raises(NcclTestsFormatError, match=r"all_reduce.json: results\[8\].in_place.nwrong: "):
        parse_file(path)


# -- 16: accept of a run killed before its first record ------------------------------------------

def test_accept_of_a_run_without_records_could_not_verify(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_META).write_text(json.dumps({"schema": "critpath.run/1", "run_id": "x", "state": "running",
                                            "cases_total": 9, "cases_ok": 0}))
    assert main(["accept", "--profile", str(_profile(tmp_path)), "--run", str(run)]) == 2
    out = capsys.readouterr().out
    assert "COULD NOT VERIFY  the run: incomplete: 0 of 9 cases, run.json says running" in out
    assert "COULD NOT VERIFY  check busbw 128M: busbw_gbps >= 380 GB/s: the run holds no records" in out


# -- 19: every field of -J output is type- and range-checked ---------------------------------------

HOSTILE = {"str": "abc", "int": 123, "nan": math.nan, "inf": math.inf, "1e400": 1e400, "neg": -1, "frac": 8.5,
           "list": [1], "obj": {"a": 1}, "true": True, "null": None, "zero": 0, "empty": ""}
# field -> the hostile values nccl-tests could have written there (everything else must be refused)
FIELDS = {
    ("config", "iterations"): {"int"},
    ("config", "warmup_iters"): {"int", "zero", "null"},
    ("config", "nthreads"): {"int", "null"},
    ("config", "ngpus"): {"int", "null"},
    ("config", "aggregated_iterations"): {"int", "null"},
    ("config", "validation"): {"zero", "true", "null"},
    ("config", "devices"): {"null"},
    ("config", "devices", 0, "hostname"): {"str", "null"},
    ("config", "devices", 0, "rank"): {"int", "zero", "null"},
    ("config", "devices", 0, "device"): {"int", "zero", "null"},
    ("config", "devices", 0, "device_info"): {"str", "null", "empty"},
    ("config", "devices", 0, "device_hex"): {"str", "null", "empty"},
    ("nccl_version",): {"int", "zero", "null"},
    ("start_time",): {"null"},  # else strftime's "%Y-%m-%d %H:%M:%S", which "abc" and "" are not
    ("end_time",): {"null"},
    ("errors",): {"null"},  # else a list of at most one string, NCCL's last error
    ("args",): {"null"},
    ("results", 0, "size"): {"int", "zero"},
    ("results", 0, "count"): {"int", "zero"},
    ("results", 0, "type"): set(),
    ("results", 0, "redop"): {"str", "empty"},
    ("results", 0, "root"): {"neg", "zero"},
    ("results", 0, "actual_iterations"): {"null"},  # else config.iterations, 20 here
    ("results", 0, "experiment_name"): {"str", "empty", "null"},
    ("results", 0, "in_place"): {"null"},
    ("results", 0, "in_place", "time"): {"int", "frac"},
    ("results", 0, "in_place", "alg_bw"): {"int", "zero", "frac"},
    ("results", 0, "in_place", "bus_bw"): {"int", "zero", "frac"},
    ("results", 0, "in_place", "nwrong"): {"int", "zero", "null"},
    ("out_of_bounds",): {"null"},
    ("out_of_bounds", "count"): {"int", "zero"},
    ("out_of_bounds", "okay"): {"true", "null"},
    ("average_bus_bandwidth",): {"null"},
    ("average_bus_bandwidth", "bandwidth"): {"int", "zero", "frac"},
    ("average_bus_bandwidth", "okay"): {"true", "null"},
}
TRIES = [(path, name) for path in FIELDS for name in HOSTILE]
# what a refusal says when a value nccl-tests can write is contradicted by the rest of the file: the
# rows' evidence, their figures, the config's sweep or rank count, validation beside the rows' nwrong
CONTRADICTED = ("evidence contradicts itself", "cannot tell which collective", "changed after nccl-tests wrote them",
                "but the sweep of field config", "but the run has", "-J lists the first rank of each process",
                "field config.validation: validation 0, but", "times every row for the configured iterations",
                "writes true exactly when the count is 0", "there without a bound")


def _set(data, path, value):
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


@pytest.mark.parametrize("path, name", TRIES, ids=[".".join(map(str, p)) + "=" + n for p, n in TRIES])
def test_a_json_field_of_the_wrong_type_or_range_is_refused_naming_it(tmp_path, path, name):
    value = copy.deepcopy(HOSTILE[name])
    source = _json(tmp_path, lambda d: _set(d, path, value))
    try:
        parsed = parse_file(source)
    except NcclTestsFormatError as exc:
        message = str(exc)
        assert message.startswith(f"{source}:"), message
        if any(said in message for said in CONTRADICTED):
            return  # a value of the right type that the rest of the file contradicts (ranks, shape, factor, time)
        assert name not in FIELDS[path], f"refused a value nccl-tests can write: {exc}"
        dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
        assert dotted in message, message  # file, record index and field
        return
    assert name in FIELDS[path], f"accepted {path}={value!r} silently"
    import_file(source, tmp_path / "run")  # what parses also writes, with no traceback
    assert parsed.rows


def test_text_figures_that_are_not_finite_are_refused(tmp_path):
    for token in ("nan", "inf", "1e400", "-nan", "0x10"):
        lines = (NT / "all_reduce_h100.txt").read_text().splitlines(keepends=True)
        lines[25] = lines[25].replace("538.62", token)
        path = tmp_path / "all_reduce.txt"
        path.write_text("".join(lines))
        with pytest.raises(NcclTestsFormatError, match=rf"all_reduce.txt:26: in-place time \(us\) is '{token}'"):
            parse_file(path)


# -- 13: the importer is bounded and names its limits -----------------------------------------------

def test_more_rows_than_a_run_holds_are_refused_naming_the_limit(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("harness.nccltests.parse.MAX_ROWS", 50)
    log = tmp_path / "all_reduce.txt"
    write_log(log, 51)
    assert main(["import-nccl-tests", str(log), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{log}:67: more than 50 result rows; an import holds at most 50" in err
    assert not (tmp_path / "run").exists()


def test_a_log_over_its_byte_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.nccltests.source.MAX_TEXT_BYTES", 1000)
    log = tmp_path / "all_reduce.txt"
    write_log(log, 20)
    with pytest.raises(NcclTestsFormatError, match=r"bytes; nccl-tests output \(text\) is at most 1000 bytes"):
        parse_file(log)


def test_a_line_longer_than_any_log_line_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.nccltests.source.MAX_LINE_BYTES", 100)
    log = tmp_path / "all_reduce.txt"
    log.write_text("# " + "x" * 200 + "\n")
    with pytest.raises(NcclTestsFormatError, match=r"all_reduce.txt:1: a line of more than 100 bytes"):
        parse_file(log)


def test_a_fifo_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "all_reduce.txt"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(Exception, match="a FIFO, not a regular file"):
        parse_file(fifo)
    assert time.monotonic() - start < 5


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_records_are_written_in_batches_with_one_fsync_each(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    log = tmp_path / "all_reduce.txt"
    write_log(log, 2 * limits.RECORDS_PER_BATCH + 1)
    records = import_file(log, tmp_path / "run")
    assert len(records) == 2 * limits.RECORDS_PER_BATCH + 1
    assert sum(c.endswith("/results.jsonl") for c in calls) == 3  # not one per record
    assert load_run(tmp_path / "run").incomplete == ""


# -- D9: a JSON key given twice is refused, never the last one taken -------------------------------

def _json_text(tmp_path: Path, edit, replace: tuple[str, str], name: str = "all_reduce.json") -> Path:
    """-J output written by json.dumps, then edited as text (json.dumps cannot repeat a key)."""
    data = json.loads((NT / "all_reduce_h100.json").read_text())
    edit(data)
    text = json.dumps(data, indent=1)
    assert text.count(replace[0]) == 1
    path = tmp_path / name
    path.write_text(text.replace(*replace))
    return path


def test_a_json_nwrong_given_twice_is_refused_naming_the_key_and_line(tmp_path, capsys):
    path = _json_text(tmp_path, lambda d: d["results"][8]["in_place"].update(nwrong="TWICE"),
                      ('"nwrong": "TWICE"', '"nwrong": 3, "nwrong": 0'))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if '"nwrong": 3' in text)
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert re.search(rf'{re.escape(str(path))}:\d+: the key "nwrong" appears twice in one object', err), err
    assert f"{path}:{line}: " in err  # the line of the second key
    assert not (tmp_path / "run").exists()


def test_a_second_results_list_is_refused(tmp_path, capsys):
    path = _json_text(tmp_path, lambda d: d.update(version="V"), ('"version": "V"', '"results": [], "version": 1'))
    line = [i for i, text in enumerate(path.read_text().splitlines(), 1) if '"results":' in text][1]
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    assert (f'{path}:{line}: the key "results" appears twice in one object (the object opened on line 1)'
            in capsys.readouterr().err)


# -- D8: counts and sizes are ASCII digits within what nccl-tests prints ----------------------------

_SIZE_LINE = "   134217728      33554432"


def _text_log(tmp_path: Path, old: str, new: str, name: str = "all_reduce.txt") -> Path:
    text = (NT / "all_reduce_h100.txt").read_text()
    assert text.count(old) == 1
    path = tmp_path / name
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize("size, count, message", [
    ("1180591620717411303424", "295147905179352825856",
     "size (B): 1180591620717411303424 is outside the range it may take (from 0 to 9223372036854775807)"),
    ("9223372036854775808", "2305843009213693952", "size (B): 9223372036854775808 is outside the range"),
    ("1" * 5000, "2", "size (B): expected an integer"),
    ("１３４２１７７２８", "33554432", "is neither a result row"),  # fullwidth digits
    ("134217728", "３３５５４４３２", "count (elements): expected an integer (ASCII digits"),
])
def test_a_text_size_past_what_nccl_tests_prints_is_refused_naming_line_and_field(tmp_path, capsys, size, count,
                                                                                 message):
    path = _text_log(tmp_path, _SIZE_LINE, f"   {size}      {count}")
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:26: " in err and message in err, err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


@pytest.mark.parametrize("digits, message", [
    (str(2**70), "field size: the integer 1180591620717411303424 is outside the signed 64-bit range"),
    ("1" * 5000, "field size: the integer 11111111111111111111... (5000 digits) is outside"),
    ("1e20", "results[8].size: 1e+20 is more than 9.22337e+18"),
])
def test_a_json_size_past_what_nccl_tests_prints_is_refused(tmp_path, capsys, digits, message):
    path = _json_text(tmp_path, lambda d: d["results"][8].update(size="BIG"), ('"size": "BIG"', f'"size": {digits}'))
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err, err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


# -- D3: a line in the table that is no row, comment or NCCL line is refused, never dropped ---------

_WRONG_ROW = "   538.62  249.19  436.08       0"


@pytest.mark.parametrize("prefix", ["+", "\x00", "x", "~"])
def test_a_spoilt_row_in_the_table_is_refused_not_dropped(tmp_path, capsys, prefix):
    text = (NT / "all_reduce_h100.txt").read_text().replace(_WRONG_ROW, _WRONG_ROW[:-1] + "5")
    lines = text.splitlines(keepends=True)
    assert lines[25].startswith(_SIZE_LINE)
    lines[25] = prefix + lines[25].lstrip()
    # without the trailer nothing else says that a row with 5 wrong elements is missing
    lines = [line for line in lines if "Out of bounds" not in line and "Avg bus" not in line]
    path = tmp_path / "all_reduce.txt"
    path.write_text("".join(lines))
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:26: " in err and "in the results table is neither a result row" in err, err
    assert not (tmp_path / "run").exists()


def test_lines_nccl_prints_between_rows_are_still_read_past(tmp_path):
    text = (NT / "all_reduce_h100.txt").read_text()
    noise = ("node01:4100:4100 [0] NCCL INFO comm 0x55d1 rank 0 nranks 8 - Init COMPLETE\n"
             "node01:4100:4107 [0] NCCL WARN Cuda failure 'out of memory'\nNCCL version 2.21.5+cuda12.4\n"
             "[1669205421.627353] [node01:4100:0]          parser.c:1885 UCX  WARN  unused env variable: "
             "UCX_NET_DEVICES (set UCX_WARN_UNUSED_ENV_VARS=n to suppress this)\n")
    path = _text_log(tmp_path, _SIZE_LINE, noise + _SIZE_LINE)
    records = import_file(path, tmp_path / "run")
    assert len(records) == 9 == len(import_file(NT / "all_reduce_h100.txt", tmp_path / "run2"))
    assert text.count("\n") + 4 == path.read_text().count("\n")


# -- D6: per-iteration times agree with the row's iterations and the file's own summary -------------

def _per_iter(tmp_path: Path, edit, name: str = "all_reduce_per_iter.json") -> Path:
    data = json.loads((NT / "all_reduce_per_iter.json").read_text())
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _all_times(data: dict, value: float) -> None:
    for row in data["results"]:
        for side in ("out_of_place_per_iter", "in_place_per_iter"):
            row[side]["times_us"] = [value] * len(row[side]["times_us"])


def test_per_iteration_times_that_disagree_with_their_summary_are_refused(tmp_path, capsys):
    # every time 1.0 us: a p50 of 1 us where nccl-tests measured 23.4 us
    path = _per_iter(tmp_path, lambda d: _all_times(d, 1.0))
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert (f"{path}: results[0].in_place_per_iter.min_us: 21.541, but the least of times_us[0:] is 1.000000: "
            "the times or their summary were changed") in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("key, value, message", [
    ("avg_us", 20.0, "results[0].in_place_per_iter.avg_us: 20.0, but the mean of times_us[0:] is 23.580200"),
    ("max_us", 30.0, "results[0].in_place_per_iter.max_us: 30.0, but the greatest"),
    ("avg_us", None, "results[0].in_place_per_iter.avg_us: missing; nccl-tests writes it with times_us"),
])
def test_a_per_iteration_summary_that_disagrees_with_the_times_is_refused(tmp_path, key, value, message):
    path = _per_iter(tmp_path, lambda d: d["results"][0]["in_place_per_iter"].update({key: value}))
    with pytest.raises(NcclTestsFormatError, match=re.escape(message)):
        parse_file(path)


def test_per_iteration_times_are_one_per_iteration(tmp_path, capsys):
    def more(data):
        times = data["results"][1]["in_place_per_iter"]["times_us"]
        data["results"][1]["in_place_per_iter"]["times_us"] = times * 50_000  # 1,000,000 where iterations is 20
    path = _per_iter(tmp_path, more)
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    assert (f"{path}: results[1].in_place_per_iter.times_us: 1000000 times, but the row ran 20 iterations"
            in capsys.readouterr().err)
    fewer = _per_iter(tmp_path, lambda d: d["results"][1]["in_place_per_iter"]["times_us"].pop(), "fewer.json")
    with pytest.raises(NcclTestsFormatError, match=r"times_us: 19 times, but the row ran 20 iterations"):
        parse_file(fewer)


def test_a_time_past_what_a_sample_holds_is_refused(tmp_path):
    path = _per_iter(tmp_path, lambda d: d["results"][0]["in_place"].update(time=1e300))
    with pytest.raises(NcclTestsFormatError, match=r"results\[0\].in_place.time: 1e\+300 is more than"):
        parse_file(path)
    log = _text_log(tmp_path, "538.62  249.19", "1e300  249.19")
    with pytest.raises(NcclTestsFormatError, match=r"all_reduce.txt:26: in-place time \(us\) is 1e300, more than"):
        parse_file(log)


# -- D10: what one row may hold is what one record may hold ----------------------------------------

def test_a_row_with_more_times_than_a_record_holds_is_refused_before_they_are_read(tmp_path, capsys):
    n = limits.MAX_TIMES_PER_SIDE + 1

    def huge(data):  # actual_iterations of n is refused first, as more than a record's plan holds
        data["results"][1]["in_place_per_iter"]["times_us"] = [24.5] * n
    path = _per_iter(tmp_path, huge)
    assert path.stat().st_size < limits.MAX_JSON_BYTES  # within the JSON limit, past the record's
    assert main(["import-nccl-tests", str(path), "--out", str(tmp_path / "run")]) == 2
    assert (f"{path}: results[1].in_place_per_iter.times_us: {n} times; a record holds at most "
            f"{limits.MAX_TIMES_PER_SIDE} per side" in capsys.readouterr().err)
    assert not (tmp_path / "run").exists()


def test_the_times_a_row_may_hold_make_a_record_every_reader_reads(tmp_path):
    # The longest a time can be written: 19 digits of nanoseconds in samples_ns (in place, the
    # record's side) and a float's longest repr in extra.imported.out_of_place.times_us.
    longest = {"in_place": 4.123456789012345e15, "out_of_place": 1.2345678901234567e-05}
    assert len(str(round(longest["in_place"] * 1e3))) == 19 and len(repr(longest["out_of_place"])) == 22

    def record_bytes(n: int) -> int:
        def edit(data):
            data["config"]["iterations"] = n
            del data["results"][1]
            row = data["results"][0]
            row["actual_iterations"] = n
            for side, t in longest.items():
                row[f"{side}_per_iter"].update(times_us=[t] * n, min_us=t, max_us=t, avg_us=t)
            # the row's time is its times' (a record's samples are held near it); 8 bytes in it is 0 GB/s
            row["in_place"].update(time=longest["in_place"], alg_bw=0.0, bus_bw=0.0)
        path = _per_iter(tmp_path, edit, f"all_reduce_{n}.json")
        import_file(path, tmp_path / f"run{n}")
        assert len(load_run(tmp_path / f"run{n}").records) == 1
        return len((tmp_path / f"run{n}" / RESULTS).read_bytes())

    small, large = record_bytes(1000), record_bytes(3000)
    per_iteration = (large - small) / 2000
    rest = small - 1000 * per_iteration
    assert per_iteration <= limits._SAMPLE_JSON_BYTES and rest <= limits._RECORD_REST_BYTES, (per_iteration, rest)
    assert limits.MAX_TIMES_PER_SIDE * limits._SAMPLE_JSON_BYTES + limits._RECORD_REST_BYTES <= MAX_RECORD_BYTES


# -- D2: an import whose trailer contradicts its rows is not a whole run to any reader --------------

def test_an_import_whose_trailer_contradicts_its_rows_is_not_whole_to_any_reader(tmp_path, capsys):
    # the 128 MiB row raised from 436 to 500 GB/s busbw, its time and algbw with it; the trailer's
    # average still says 102.083
    log = _text_log(tmp_path, "538.62  249.19  436.08       0", "469.77  285.71  499.99       0")
    run, good = tmp_path / "run", tmp_path / "good"
    assert main(["import-nccl-tests", str(log), "--out", str(run)]) == 1
    assert "rows are missing, changed, or the file was edited" in capsys.readouterr().err
    meta = json.loads((run / RUN_META).read_text())
    assert meta["state"] == "imported" and meta["contradicted"].startswith("line 28: Avg bus bandwidth 102.083")
    assert load_run(run).incomplete == f"contradicted: {meta['contradicted']}"
    _reads_incomplete(run, tmp_path, capsys, "contradicted: line 28: Avg bus bandwidth 102.083")
    # beside a whole import of another node, the contradicted node is not called healthy
    assert main(["import-nccl-tests", str(NT / "all_reduce_h100.txt"), "--out", str(good)]) == 0
    (run / "fingerprint.json").write_text((run / "fingerprint.json").read_text().replace("node01", "node09"))
    main(["diagnose", str(good), str(run), "--json", str(tmp_path / "d.json")])
    verdicts = {n["node"]: n["verdict"] for n in json.loads((tmp_path / "d.json").read_text())["nodes"]}
    assert verdicts["node01"] == "healthy" and verdicts["node09"] != "healthy", verdicts


def test_an_import_whose_trailer_agrees_says_nothing_of_contradiction(tmp_path):
    import_file(NT / "all_reduce_h100.txt", tmp_path / "run")
    assert "contradicted" not in json.loads((tmp_path / "run" / RUN_META).read_text())


def test_a_file_past_every_byte_limit_is_refused_before_a_byte_is_read_even_to_tell_its_kind(tmp_path, monkeypatch):
    # A file of white space was read whole to find its first character before the size check.
    monkeypatch.setattr("harness.nccltests.source.MAX_TEXT_BYTES", 1000)
    monkeypatch.setattr("harness.nccltests.source.MAX_JSON_BYTES", 500)
    log = tmp_path / "all_reduce.txt"
    log.write_bytes(b" " * 2000)
    read = []
    monkeypatch.setattr("harness.nccltests.source._is_json", lambda f: read.append(f) or False)
    with pytest.raises(NcclTestsFormatError, match=r"2000 bytes; nccl-tests output is at most 500 bytes \(JSON\) or 1000"):
        parse_file(log)
    assert read == []


def test_an_import_stopped_before_its_last_run_json_says_interrupted(tmp_path, monkeypatch):
    # Before: the final write_meta sat outside the try, so a signal after the last batch and before
    # run.json said "imported" left it saying "importing" rather than "interrupted".
    from harness.core.store import RunDir
    run = tmp_path / "run"
    real = RunDir.write_meta

    def stopped_at_imported(self, data):
        if data["state"] == "imported":
            raise KeyboardInterrupt
        real(self, data)

    monkeypatch.setattr(RunDir, "write_meta", stopped_at_imported)
    with pytest.raises(KeyboardInterrupt):
        import_file(NT / "all_reduce_h100.txt", run)
    assert (run / RESULTS).read_text().count("\n") > 0  # its records are written before run.json
    assert json.loads((run / RUN_META).read_text())["state"] == "interrupted"
    assert load_run(run).incomplete.endswith("run.json says interrupted")
