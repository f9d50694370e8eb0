"""Every field of a stored run is held to the rest of the run: a fingerprint's backend to the records
(as its world is), run.json's fields to the choices critpath knows and its options to the records,
a record's contention evidence together and to its samples and wall time, and an rpc record's
per-rank reports to the family's declared schema and its case, and the fingerprint's text and GPU
fields to what a machine gives. An edited or contradictory field is refused naming its file and
field."""
from __future__ import annotations

import json
import shutil
from dataclasses import fields, replace
from pathlib import Path

import pytest
from conftest import derived_record

from harness.accept.profile import ProfileError, load_profile
from harness.cli import main
from harness.core import contention as cn
from harness.core import runmeta
from harness.core.contention import Contention
from harness.core.store import FINGERPRINT, PLANNED, RESULTS, RUN_META, ResultsFileError, RunDir, load_run, run_of
from harness.run import fingerprint
from harness.run.plan import RunOptions

NOOP = "selftest/fault_rank=0,mode=noop,world=1"
SPIN = "selftest/fault_rank=0,mode=spin,spin_iters=10,world=1"
RPC = "rpc/codec=raw,mode=pingpong,payload_bytes=64,transport=tcp_nodelay"


@pytest.fixture(scope="module")
def noop_run(tmp_path_factory) -> Path:
    """A finished run of the one-rank noop case, as ``critpath run --case`` writes it."""
    out = tmp_path_factory.mktemp("held") / "R"
    assert main(["run", "--case", NOOP, "--iters", "200", "--out", str(out)]) == 0
    return out


def _copy(run: Path, tmp_path: Path, name: str, edit) -> Path:
    """A copy of ``run`` whose file ``name`` (a JSON document, or the first record of results.jsonl)
    ``edit`` changed in place."""
    out = tmp_path / "copy"
    shutil.copytree(run, out)
    path = out / name
    if name == RESULTS:
        data = json.loads(path.read_text().splitlines()[0])
        edit(data)
        path.write_text(json.dumps(data) + "\n")
    else:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return out


def _show(capsys, run: Path) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["show", str(run)])
    return code, capsys.readouterr().err


def _profile(tmp_path: Path, **pins) -> Path:
    path = tmp_path / "p.yaml"
    head = "".join(f"{key}: {value}\n" for key, value in {"world": 1, **pins}.items())
    path.write_text(f"schema: critpath.accept/1\nname: p\n{head}checks:\n"
                    f"  - {{name: c, case: '{NOOP}', statistic: p50_us, max: 1.0e+9, source: t}}\n")
    return path


def test_the_honest_run_is_read_and_passes_its_pins(noop_run, tmp_path, capsys):
    assert _show(capsys, noop_run)[0] == 0
    code = main(["accept", "--profile", str(_profile(tmp_path, backend="gloo")), "--run", str(noop_run), "--no-report"])
    assert code == 0 and "PASS              pin backend: backend gloo == gloo" in capsys.readouterr().out


# -- 1: the fingerprint's backend is the records' ---------------------------------------------------

def test_a_fingerprint_backend_the_records_contradict_is_refused_not_pinned(noop_run, tmp_path, capsys):
    run = _copy(noop_run, tmp_path, FINGERPRINT, lambda d: d.update(backend="nccl"))
    code = main(["accept", "--profile", str(_profile(tmp_path, backend="nccl")), "--run", str(run), "--no-report"])
    out = capsys.readouterr().out
    assert code == 2 and "PASS              pin backend" not in out, out
    assert f"{run / FINGERPRINT}: field backend: 'nccl', but the record of {NOOP} ran over 'gloo'" in out, out


# -- 2: run.json's fields are ones critpath writes, its options the records' ------------------------

def _case_ids(ids):
    return lambda d: d["options"].update(case_ids=ids)


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["options"].update(profile="bogus"), "options.profile: 'bogus' is not one of quick, full"),
    (lambda d: d["options"].update(backend="mpi"), "options.backend: 'mpi' is not one of gloo, nccl"),
    (lambda d: d["options"].update(families=["nosuch"]), "options.families: 'nosuch' is not a critpath family"),
    (lambda d: d["options"].update(zz=1), "options: 'zz' is not an option critpath run keeps"),
    (lambda d: d.update(bogus=1), "'bogus': not a field of a run.json"),
    (lambda d: d.update(state="bogus"), "state: 'bogus' is not a state a run is left in"),
    (lambda d: d.update(argv=d["argv"][:-1] + ["--full"]), "argv.{last}: '--full', but field options.argv.{last} is"),
    (lambda d: d["options"].update(world=7), "options.world: 7, but the widest of the cases it names"),
    (lambda d: d["options"].update(backend="nccl"), "options.backend: 'nccl', but the run's fingerprint says it "
                                                    "ran over 'gloo'"),
    (_case_ids([SPIN]), f"options.case_ids: names 1 case(s), and not {NOOP}, which the run holds a record of"),
    (_case_ids([NOOP, SPIN]), "options.case_ids: 2 cases, but field cases_total says the run planned 1"),
    (_case_ids([NOOP, 5]), "options.case_ids.1: 5 is not a string"),
    (_case_ids(["nosuch/x=1"]), "options.case_ids: names no case: case ID 'nosuch/x=1': unknown family 'nosuch'"),
    (lambda d: d["options"].update(case_ids=[], families=["rpc"]), "options.families: 'rpc', and not 'selftest'"),
    (lambda d: d["options"].update(case_ids=[], families=["selftest", "selftest"]),
     "options.families.1: 'selftest' is given twice, which --families refuses"),
    (lambda d: d.update(cases_ok="1"), "cases_ok: expected an integer, got '1'"),
    (lambda d: d.update(cases_failed=0.0), "cases_failed: expected an integer, got 0.0"),
    (lambda d: d.update(cases_total=True), "cases_total: expected an integer, got True"),
    (lambda d: d.update(cases_ok=-1), "cases_ok: "),
], ids=["profile", "backend", "families", "option-key", "top-key", "state", "argv", "world", "backend-held",
        "case-ids-other", "case-ids-more", "case-ids-type", "case-ids-none", "families-held", "families-twice",
        "cases-ok-text", "cases-failed-float", "cases-total-bool", "cases-ok-negative"])
def test_a_run_json_field_critpath_would_not_write_is_refused_naming_it(noop_run, tmp_path, capsys, edit, field):
    run = _copy(noop_run, tmp_path, RUN_META, edit)
    field = field.format(last=len(json.loads((run / RUN_META).read_text())["argv"]) - 1)
    code, err = _show(capsys, run)
    assert code == 2 and f"run.json: field {field}" in err, err
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 2  # its options are never printed


def test_options_held_to_the_records_pass_as_critpath_writes_them(noop_run, tmp_path, capsys):
    # a run of --families selftest holds selftest records; accept's world beside named cases is
    # theirs; a case named in another spelling (as typed on the command line) is the case
    for edit in (lambda d: d["options"].update(case_ids=[], families=["selftest"]),
                 lambda d: d["options"].update(world=1, backend="gloo", case_ids=["selftest/world=1,mode=noop,"
                                                                                  "fault_rank=0"])):
        assert _show(capsys, _copy(noop_run, tmp_path / str(id(edit)), RUN_META, edit))[0] == 0


def test_a_joined_runs_world_option_is_the_jobs(tmp_path):
    record = derived_record(NOOP, [1000] * 50, run_id="j")
    meta = {"schema": runmeta.RUN_SCHEMA, "run_id": "j", "state": "finished", "cases_total": 1,
            "options": {"world": 2, "case_ids": []}}
    fp = fingerprint.collect("gloo", 1, "joined")
    (tmp_path / "j").mkdir()
    with pytest.raises(ResultsFileError, match="field options.world: 2, but the run's fingerprint says its job is 1 "
                                               "ranks, which --world must be"):
        run_of(tmp_path / "j", [record], meta, fp)
    run_of(tmp_path / "j", [record], {**meta, "options": {"world": 1}}, fp)


def test_the_options_run_json_keeps_are_the_run_commands():
    assert set(runmeta.OPTION_FIELDS) == {f.name for f in fields(RunOptions)}


def test_an_acceptance_profile_whose_cases_are_not_on_its_world_is_refused(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(f"schema: critpath.accept/1\nname: p\nworld: 2\nrun:\n  cases:\n    - {NOOP}\nchecks:\n"
                    f"  - {{name: c, case: '{NOOP}', statistic: p50_us, max: 1.0e+9, source: t}}\n")
    with pytest.raises(ProfileError, match=r"p.yaml:3: field world: 2, but the widest case of run.cases is world 1"):
        load_profile(path)


# -- 3: contention evidence held together, to the samples and to the wall time -----------------------

def _ranks(**columns):
    return lambda d: d["contention"]["ranks"].update(columns)


def _rejudged(**columns):
    """An edit of the rank columns whose summary agrees with it, so that what refuses it is the
    check of the field itself (a window's length enters the foreign-CPU share)."""
    def edit(d):
        d["contention"]["ranks"].update(columns)
        block = Contention.from_dict(d["contention"])
        d["contention"]["summary"] = cn.judge(block, d["samples_ns"]).to_dict()
    return edit


_psi_share_rejudged = _rejudged(pressure_source=["psi"], pressure_share=[5.0])


@pytest.mark.parametrize("edit, field", [
    (_rejudged(window_ns=[1]), "contention.ranks.window_ns: 1 ns, less than the"),
    (_rejudged(window_ns=[10**15]), "contention.ranks.window_ns.0: 1000000000000000 ns, longer than the record's wall_s"),
    (_ranks(cpu_last=[99], cpus_allowed=["0-1"]), "contention.ranks.cpu_last.0: 99, a CPU outside the rank's "
                                                  "cpus_allowed 0-1"),
    (_ranks(cpus_allowed=["5-1"]), "contention.ranks.cpus_allowed.0: the range 5-1 runs backwards"),
    (_ranks(cpus_allowed=["9" * 5000]), "contention.ranks.cpus_allowed.0: '9999"),
    (_ranks(cpus_allowed=["0-3,2"]), "contention.ranks.cpus_allowed.0: the range 2 is not after the one before it"),
    (_psi_share_rejudged, "contention.ranks.pressure_share.0: 5.0, but a PSI share is of the window's wall time"),
    (_ranks(tick_source=["assumed"], tick_hz=[1000]), "contention.ranks.tick_hz.0: 1000 beside tick_source 'assumed'"),
    (_ranks(pressure_source=["none"], pressure_share=[0.0]), "contention.ranks.pressure_share.0: 0.0 beside "
                                                             "pressure_source 'none'"),
    (_ranks(pressure_source=["psi"], pressure_share=[None]), "contention.ranks.pressure_share.0: None beside "
                                                             "pressure_source 'psi'"),
], ids=["window-short", "window-long", "cpu-last", "reversed", "digits", "overlap", "psi-over-1", "tick-assumed",
        "none-with-share", "psi-without-share"])
def test_contention_evidence_that_cannot_be_sampled_is_refused_naming_the_field(noop_run, tmp_path, capsys, edit,
                                                                                field):
    run = _copy(noop_run, tmp_path, RESULTS, edit)
    code, err = _show(capsys, run)
    assert code == 2 and f"results.jsonl:1: field {field}" in err, err


# -- 4: an rpc record's per-rank reports as the family declares them ---------------------------------

def _rpc_report(**changes) -> dict:
    """One rank's report as the rpc family writes it for RPC (harness.families.rpc.report)."""
    counters = {name: 0 for name in ("connections", "frames", "malformed", "oversized", "truncated", "closed",
                                     "errors", "stalls", "drops", "refused", "idle")}
    counters.update(connections=1, frames=1536)
    return {"transport": "TCP, TCP_NODELAY on, one write per message, kept connection", "encoded_bytes": 64,
            "msgs_per_iter": 1, "counters": {"server": counters}, **changes}


RPC_SAMPLES = [100_000 + i for i in range(200)]


def _rpc_run(tmp_path: Path, reports, **metrics) -> Path:
    """A run directory holding one rpc record with ``reports`` in place of the ones its figures were
    derived from (which ``metrics`` changes)."""
    honest = derived_record(RPC, RPC_SAMPLES, run_id="rp", reports=[_rpc_report()])
    run = RunDir(tmp_path / "rpc", "rp")
    run.append(replace(honest, extra={"rank_reports": reports}, metrics={**honest.metrics, **metrics}))
    return run.path


def _server(**counts):
    report = _rpc_report()
    report["counters"]["server"].update(counts)
    return report


def test_an_rpc_record_as_the_family_writes_it_is_read(tmp_path):
    assert load_run(_rpc_run(tmp_path, [_rpc_report()])).records[0].unverifiable == {}


@pytest.mark.parametrize("reports, metrics, field", [
    ([_rpc_report(msgs_per_iter="x")], {}, "extra.rank_reports.0.msgs_per_iter: expected an integer, got 'x'"),
    ([_rpc_report(msgs_per_iter=0)], {}, "extra.rank_reports.0.msgs_per_iter: 0 is less than the minimum of 1"),
    ([_rpc_report(msgs_per_iter=2)], {}, f"extra.rank_reports.0.msgs_per_iter: 2, but a sample of {RPC} covers 1"),
    ([_rpc_report(), _rpc_report()], {}, "extra.rank_reports: 2 reports in a record of world 1"),
    ([_server(frames=-5)], {}, "extra.rank_reports.0.counters.server.frames: -5 is less than the minimum of 0"),
    ([_server(frames=1792.5)], {}, "extra.rank_reports.0.counters.server.frames: expected an integer, got 1792.5"),
    ([_server(bogus=1)], {}, "extra.rank_reports.0.counters.server: Additional properties are not allowed"),
    ([_server(malformed=3, errors=7)], {}, "extra.rank_reports.0.counters.server.malformed: 3 in an ok record"),
    ([_rpc_report(encoded_bytes=-64)], {"encoded_bytes": -64.0},
     "extra.rank_reports.0.encoded_bytes: -64 is less than the minimum of 1"),
    ([_rpc_report(encoded_bytes=65)], {"encoded_bytes": 65.0},
     "extra.rank_reports.0.encoded_bytes: 65, but raw bytes go on the wire as they are: payload_bytes=64"),
    ([_rpc_report(bogus=1)], {}, "extra.rank_reports.0: Additional properties are not allowed"),
], ids=["msgs-text", "msgs-zero", "msgs-other", "two-reports", "frames-negative", "frames-fraction", "counter-key",
        "broken-in-ok", "bytes-negative", "bytes-other", "report-key"])
def test_rpc_reports_the_family_would_not_write_are_refused_naming_the_field(tmp_path, capsys, reports, metrics,
                                                                             field):
    code, err = _show(capsys, _rpc_run(tmp_path, reports, **metrics))
    assert code == 2 and f"results.jsonl:1: field {field}" in err and "could not recompute" not in err, err


# -- 5: fingerprint text and GPUs as a machine gives them --------------------------------------------

@pytest.mark.parametrize("edit, field", [
    (lambda d: d["git"].update(commit="zz"), "git.commit: 'zz' is not a git commit"),
    (lambda d: d.update(gpus={"present": True}), "gpus.present: true, but field gpus.devices lists no device"),
    (lambda d: d.update(gpus={"present": False, "count": 2, "devices": []}), "gpus.count: 2, but field gpus.devices "
                                                                             "lists 0"),
    (lambda d: d.update(kernel="L" * (2 << 20)), "kernel: 2097152 characters, more than the 129 it may hold"),
    (lambda d: d.update(backend="mpi"), "backend: 'mpi' is not a backend critpath runs (gloo, nccl)"),
    (lambda d: d["env"].update(NCCL_DEBUG="x" * (1 << 20)), "env.NCCL_DEBUG: 1048576 characters, more than the"),
], ids=["commit", "gpus-present", "gpus-count", "kernel", "backend", "env-value"])
def test_a_fingerprint_field_no_machine_gives_is_refused_naming_it(noop_run, tmp_path, capsys, edit, field):
    run = _copy(noop_run, tmp_path, FINGERPRINT, edit)
    code, err = _show(capsys, run)
    assert code == 2 and f"fingerprint.json: field {field}" in err, err


def test_the_planned_digest_is_one_run_json_field(noop_run):
    assert PLANNED in runmeta.RUN_FIELDS and PLANNED in json.loads((noop_run / RUN_META).read_text())


@pytest.mark.parametrize("block, key, value", [
    ("summary", "p95_ns", 99999.0), ("plan", "extra_key", 1), ("check", "extra_key", 1), ("error", "hint", "x"),
])
def test_a_key_a_record_never_writes_inside_one_of_its_blocks_is_refused(noop_run, tmp_path, capsys, block, key, value):
    # a planted summary.p95_ns (a figure no sample gave) loaded, while a key at the top was refused
    def edit(record):
        if record.get(block) is None:
            record[block] = {"kind": "RuntimeError", "message": "m"}
        record[block][key] = value

    code, err = _show(capsys, _copy(noop_run, tmp_path, RESULTS, edit))
    assert code == 2 and "results.jsonl:1" in err and key in err, err
