"""A record is evidence only of what can be checked: a figure that cannot be recomputed never
passes a check, an import's identity, check and samples are its row's, and a run is whole only
when its records are exactly the cases it planned, each once, of its own run."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import RUN_FINGERPRINT, derived_record

from harness.cli import main
from harness.core.stats import Summary
from harness.core.store import RESULTS, RUN_META, RunDir, ResultsFileError, load_run
from harness.nccltests.importer import import_file

NCCL_LOG = Path(__file__).parent / "fixtures" / "nccl_tests" / "all_reduce_h100.txt"
MIB_16, MIB_128 = 16 << 20, 128 << 20


def _profile(tmp_path: Path, statistic: str, size: int, world: int = 8, **bound) -> Path:
    op, value = next(iter(bound.items()))
    path = tmp_path / f"profile-{statistic}-{size}.yaml"
    path.write_text(f"schema: critpath.accept/1\nname: p\nworld: {world}\nnodes: 1\nchecks:\n"
                    f"  - {{name: c, family: allreduce, select: {{size_bytes: {size}}}, statistic: {statistic}, "
                    f"{op}: {value}, source: t}}\n")
    return path


def _edit(run: Path, change, size: int | None = None) -> None:
    """``change`` applied to each record of ``run`` (of size ``size`` only, when given)."""
    path = run / RESULTS
    lines = []
    for line in path.read_text().splitlines():
        data = json.loads(line)
        if size is None or data["params"].get("size_bytes") == size:
            change(data)
        lines.append(json.dumps(data))
    path.write_text("\n".join(lines) + "\n")


def _accept(capsys, profile: Path, run: Path) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["accept", "--profile", str(profile), "--run", str(run), "--no-report"])
    return code, capsys.readouterr().out


@pytest.fixture
def imported(tmp_path) -> Path:
    out = tmp_path / "imported"
    import_file(NCCL_LOG, out, collective="all_reduce")
    return out


# -- D1: a figure that cannot be checked is no measurement -------------------------------------------

@pytest.mark.parametrize("drop", [lambda e: e.pop("imported"), lambda e: e.update(imported={}),
                                  lambda e: e.update(imported=False)], ids=["deleted", "empty", "false"])
def test_an_imported_record_without_its_row_is_refused(imported, tmp_path, capsys, drop):
    _edit(imported, lambda d: (d["metrics"].update(busbw_gbps=9999.0), drop(d["extra"])), MIB_128)
    code, out = _accept(capsys, _profile(tmp_path, "busbw_gbps", MIB_128, min=380), imported)
    assert code == 2 and "PASS  " not in out.split("\n", 1)[1], out
    assert f"{imported / RESULTS}:9: field extra.imported" in out


def _native_run(tmp_path: Path, **fields) -> Path:
    """A finished run of one allreduce record with its per-rank reports, as the driver writes it."""
    case_id = "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=1024,world=2"
    reports = [{"impl": "gloo allreduce", "nccl_algo_env": None}] * 2
    run = RunDir(tmp_path / "native", "t")
    run.append(derived_record(case_id, [30000 + i for i in range(200)], reports=reports, **fields))
    run.write_fingerprint({**RUN_FINGERPRINT, "world": 2})  # its record's two ranks
    run.write_meta({"schema": "critpath.run/1", "run_id": "t", "state": "finished", "cases_total": 1})
    return run.path


def test_a_native_figure_edited_where_it_cannot_be_recomputed_could_not_verify(tmp_path, capsys):
    profile = _profile(tmp_path, "busbw_gbps", 1024, world=2, min=1)
    honest = _native_run(tmp_path)
    code, out = _accept(capsys, profile, honest)
    assert code == 1 and "FAIL              check c: busbw_gbps" in out  # a real 1 KiB figure, judged
    for edit, why in [(lambda d: d["extra"].pop("rank_reports"), "no per-rank reports"),
                      (lambda d: d.update(family_version=2), "recorded by allreduce version 2")]:
        run = tmp_path / "edited"
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(honest, run)
        _edit(run, lambda d: (d["metrics"].update(busbw_gbps=9999.0), edit(d)))
        code, out = _accept(capsys, profile, run)
        assert code == 2 and "PASS              check c" not in out, out
        assert "COULD NOT VERIFY  check c: busbw_gbps >= 1 GB/s: allreduce/algo=native" in out
        assert "field metrics.busbw_gbps is not verified" in out and why in out
        # the other readers take it as no evidence either
        capsys.readouterr()
        assert main(["show", str(run)]) == 0
        assert "not verified" in capsys.readouterr().out


# A figure counts only with its correctness check: a native record's status, check and error are
# as the driver writes them, or the record is refused naming file, line and field.
_FAILED_CHECK = {"kind": "check", "message": "5 of 64 results wrong"}


@pytest.mark.parametrize("edit, says", [
    (lambda d: d.update(check=None), "field check: none recorded; an ok record counts only with its correctness"),
    (lambda d: d.pop("check"), "field check: none recorded"),
    (lambda d: d["check"].update(wrong=5, checked=64, passed=False), "field status: 'ok' but field check found 5 of 64 wrong"),
    (lambda d: d["check"].update(wrong=5), "field check.passed: True but field check.wrong is 5"),
    (lambda d: d["check"].update(wrong=2, checked=1, passed=False), "field check.wrong: 2 wrong of 1 checked"),
    (lambda d: d.update(error=_FAILED_CHECK), "field error: an ok record carries an error (check: 5 of 64"),
    (lambda d: d.update(status="failed", metrics={}, error=_FAILED_CHECK),
     "field check: the record failed its check (field error), and holds a passed check (0 of 1 wrong)"),
    (lambda d: d.update(status="failed", metrics={}, error=_FAILED_CHECK, check=None),
     "field check: the record failed its check (field error), and holds no check"),
], ids=["null", "deleted", "ok-but-wrong", "passed-but-wrong", "more-wrong-than-checked", "ok-with-error",
        "failed-check-passed", "failed-check-absent"])
def test_a_native_record_without_a_proper_check_is_refused(tmp_path, capsys, edit, says):
    profile = _profile(tmp_path, "p50_us", 1024, world=2, max=1e9)
    honest = _native_run(tmp_path)
    passed = "PASS              check c: p50_us"
    assert passed in _accept(capsys, profile, honest)[1]  # the same record with its check passes
    _edit(honest, edit)
    code, out = _accept(capsys, profile, honest)
    assert code == 2 and "COULD NOT VERIFY" in out and passed not in out, out
    assert f"{honest / RESULTS}:1: {says}" in out, out


# -- D4: an import's check is its row's #wrong --------------------------------------------------------

def _log_with_wrong(tmp_path: Path, wrong: int) -> Path:
    lines = NCCL_LOG.read_text().splitlines()
    at = next(i for i, text in enumerate(lines) if text.split()[:1] == [str(MIB_128)])
    lines[at] = lines[at].rstrip().rsplit(None, 1)[0] + f"  {wrong:5d}"  # the in-place #wrong
    path = tmp_path / "wrong.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("check", [{"wrong": 0, "checked": 67108864, "passed": True,
                                    "detail": "nccl-tests: out-of-place #wrong 0, in-place #wrong 0"}, None],
                         ids=["zeroed", "removed"])
def test_an_imported_check_that_its_row_contradicts_is_refused(tmp_path, capsys, check):
    run = tmp_path / "run"
    import_file(_log_with_wrong(tmp_path, 5), run, collective="all_reduce")
    assert not load_run(run).records[8].ok  # as imported: 5 wrong, the record fails
    _edit(run, lambda d: d.update(check=check), MIB_128)
    with pytest.raises(ResultsFileError, match=r"results.jsonl:9: .*field check: .* but its imported row's "
                                               r"#wrong gives wrong 5 of 67108864"):
        load_run(run)
    code, out = _accept(capsys, _profile(tmp_path, "busbw_gbps", MIB_128, min=380), run)
    assert code == 2 and "field check" in out
    assert main(["diagnose", str(run)]) == 2


# -- D5: an import's identity is its row's ------------------------------------------------------------

def _swap_sizes(d: dict) -> None:
    size = d["params"]["size_bytes"]
    other = {MIB_16: MIB_128, MIB_128: MIB_16}.get(size)
    if other:
        d["params"]["size_bytes"] = other
        d["case_id"] = d["case_id"].replace(f"size_bytes={size},", f"size_bytes={other},")


@pytest.mark.parametrize("edit, says", [
    (_swap_sizes, "field params.size_bytes: 134217728 but its imported row's count 4194304 of float"),
    (lambda d: (d.update(world=16), d["params"].update(world=16),
                d.update(case_id=d["case_id"].replace("world=8", "world=16"))), "field params.world: 16"),
    (lambda d: d.update(world=16), "field world: 16 but its imported row was measured on 8 ranks"),
    (lambda d: d.update(family="nccltests_bogus", case_id="nccltests_bogus/" + d["case_id"].split("/", 1)[1]),
     "field family: 'nccltests_bogus'"),
    (lambda d: d["extra"]["imported"].update(collective="bogus"), "'bogus' is not an nccl-tests collective"),
], ids=["sizes-swapped", "world-16", "world-alone", "family", "collective"])
def test_an_imported_record_moved_to_another_case_is_refused(imported, tmp_path, capsys, edit, says):
    _edit(imported, edit)
    with pytest.raises(ResultsFileError, match=r"results\.jsonl:\d+: "):
        load_run(imported)
    capsys.readouterr()
    assert main(["show", str(imported)]) == 2
    assert says in capsys.readouterr().err
    code, out = _accept(capsys, _profile(tmp_path, "busbw_gbps", MIB_16, min=380), imported)
    assert code == 2 and says in out


def test_a_record_of_an_import_family_without_its_row_is_refused(imported, capsys):
    _edit(imported, lambda d: (d.update(family="nccltests_all_gather", timer="", reduction="max_over_ranks",
                                        case_id="nccltests_all_gather/" + d["case_id"].split("/", 1)[1]),
                               d["extra"].pop("imported")))
    capsys.readouterr()
    assert main(["show", str(imported)]) == 2
    assert "field extra.imported: missing; the record says it was imported (family 'nccltests_all_gather')" in (
        capsys.readouterr().err)


def test_the_import_collectives_are_nccl_tests_own():
    from harness.core.imported import COLLECTIVES
    from harness.nccltests.evidence import SIGNS

    assert set(COLLECTIVES) == set(SIGNS)


# -- D6: per-iteration samples agree with their row ---------------------------------------------------

@pytest.mark.parametrize("fmt, says", [("text", "its row comes from a 'text' log, which prints means only"),
                                       ("json", "1000 samples but its imported row timed 20 iterations")])
def test_per_iteration_samples_their_row_does_not_give_are_refused(imported, tmp_path, capsys, fmt, says):
    def per_iteration(d):
        d["extra"]["imported"].update(samples="per_iteration", format=fmt)
        d["samples_ns"] = [538620] * 1000
        d["summary"] = Summary.of(d["samples_ns"]).to_dict()
    _edit(imported, per_iteration, MIB_128)
    code, out = _accept(capsys, _profile(tmp_path, "p99_us", MIB_128, max=600), imported)
    assert code == 2 and says in out, out


def test_per_iteration_samples_below_their_rows_mean_are_refused(tmp_path):
    run = tmp_path / "run"
    import_file(NCCL_LOG.with_name("all_reduce_per_iter.json"), run)
    assert load_run(run).incomplete == ""  # as imported: they agree

    def faster(d):
        d["samples_ns"] = [max(1, x // 2) for x in d["samples_ns"]]
        d["summary"] = Summary.of(d["samples_ns"]).to_dict()
    _edit(run, faster)
    with pytest.raises(ResultsFileError, match="field samples_ns: their mean .* is below its imported row's mean"):
        load_run(run)


# -- D7: a run is whole when its records are its planned cases, each once ----------------------------

SELFTEST = [f"selftest/fault_rank=0,mode={m},world=1" for m in ("noop", "raise")] + [
    f"selftest/fault_rank=0,mode=spin,spin_iters={n},world=1" for n in (10, 100, 1000)]


@pytest.fixture(scope="module")
def selftest_run(tmp_path_factory) -> Path:
    """A finished run of five one-rank selftest cases, one of which (raise) fails."""
    out = tmp_path_factory.mktemp("selftest") / "k"
    argv = ["run", "--iters", "20", "--out", str(out)]
    for case_id in SELFTEST:
        argv += ["--case", case_id]
    assert main(argv) == 1
    return out


def _copy(run: Path, tmp_path: Path, keep=None, meta=None) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(run, out)
    if keep is not None:
        lines = (run / RESULTS).read_text().splitlines()
        (out / RESULTS).write_text("\n".join(keep(lines)) + "\n")
    if meta is not None:
        data = json.loads((run / RUN_META).read_text())
        meta(data)
        (out / RUN_META).write_text(json.dumps(data))
    return out


def _ok(lines):
    return [line for line in lines if json.loads(line)["status"] == "ok"]


def _planned_ok(meta: dict, **fields) -> None:
    """run.json of the same run had it planned its 4 ok cases only: the failing one left out of its
    options too (run.json's options name the planned cases, harness.core.runheld)."""
    meta["options"]["case_ids"].remove(SELFTEST[1])
    meta.update(cases_total=4, **fields)


def _failed_line(lines):
    return next(i for i, line in enumerate(lines) if json.loads(line)["status"] != "ok")


def _show(capsys, run: Path) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["show", str(run)])
    return code, capsys.readouterr().err


def test_a_duplicate_in_place_of_a_missing_case_is_not_whole(selftest_run, tmp_path, capsys):
    def swap(lines):
        del lines[_failed_line(lines)]
        return lines + lines[:1]
    run = _copy(selftest_run, tmp_path, keep=swap)
    code, err = _show(capsys, run)
    assert code == 1 and "not whole: a case recorded more than once: selftest/fault_rank=0,mode=noop,world=1 (2 times)" in err


def test_records_of_unplanned_cases_are_not_whole(selftest_run, tmp_path, capsys):
    def replace_failed(lines):
        # the failed case's line stands in for a case the run never planned (an ok record of it)
        at = _failed_line(lines)
        data = json.loads(next(line for line in lines if "spin_iters=10," in line))
        data["params"]["spin_iters"] = 11
        data["case_id"] = data["case_id"].replace("spin_iters=10,", "spin_iters=11,")
        lines[at] = json.dumps(data)
        return lines
    run = _copy(selftest_run, tmp_path, keep=replace_failed)
    code, err = _show(capsys, run)
    assert code == 1 and "not whole: its 5 records are not the 5 cases run.json planned (field cases_planned_sha256" in err


@pytest.mark.parametrize("total", ["absent", 0])
def test_a_cases_total_that_is_no_count_is_not_whole(selftest_run, tmp_path, capsys, total):
    def meta(m):
        if total == "absent":
            del m["cases_total"]
        else:
            m["cases_total"] = total
    run = _copy(selftest_run, tmp_path, keep=lambda lines: _ok(lines)[:2], meta=meta)
    code, err = _show(capsys, run)
    want = None if total == "absent" else total
    assert code == 1 and f"not whole: run.json: field cases_total: {want!r} is not a count of planned cases" in err
    capsys.readouterr()
    assert main(["diagnose", str(run)]) == 1


@pytest.mark.parametrize("field, value, said", [
    ("cases_total", -1, "-1 is outside the range it may take"), ("cases_total", 2.5, "expected an integer, got 2.5"),
    ("cases_total", True, "expected an integer, got True"), ("cases_ok", "4", "expected an integer, got '4'"),
    ("cases_failed", True, "expected an integer, got True")])
def test_a_count_of_outcomes_that_is_not_a_whole_number_is_refused_naming_the_field(selftest_run, tmp_path, capsys,
                                                                                    field, value, said):
    # A count of another type is a malformed run.json, refused as any other field of the wrong type
    # (exit 2), not read as a run that is not whole or contradicted.
    run = _copy(selftest_run, tmp_path, meta=lambda m: m.update({field: value}))
    code, err = _show(capsys, run)
    assert code == 2 and f"{run / RUN_META}: field {field}: {said}" in err, err
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 2


def test_a_state_that_does_not_fit_the_records_is_not_whole(selftest_run, imported, tmp_path, capsys):
    run = _copy(selftest_run, tmp_path, keep=_ok, meta=lambda m: _planned_ok(m, state="imported"))
    code, err = _show(capsys, run)
    assert code == 1 and "not whole: run.json says imported, and 4 of its records were not imported" in err
    meta = json.loads((imported / RUN_META).read_text())
    (imported / RUN_META).write_text(json.dumps({**meta, "state": "finished"}))
    code, err = _show(capsys, imported)
    assert code == 1 and "not whole: run.json says finished, a critpath run, and 9 of its records are imports" in err


def test_records_of_another_run_are_not_whole(selftest_run, tmp_path, capsys):
    run = _copy(selftest_run, tmp_path, meta=lambda m: m.update(run_id="another-run"))
    code, err = _show(capsys, run)
    assert code == 1 and "mixed: its records are of run " in err and "its run.json of run another-run" in err


def test_a_run_of_the_previous_release_is_whole_by_its_count(selftest_run, tmp_path, capsys):
    # run.json before it kept the planned cases' digest: the count decides, duplicates still do not pass
    def old(m):
        m.pop("cases_planned_sha256", None)
        _planned_ok(m, cases_failed=0)
    run = _copy(selftest_run, tmp_path, keep=_ok, meta=old)
    assert load_run(run).incomplete == ""
    assert _show(capsys, run)[0] == 0


@pytest.mark.parametrize("field, change", [("cases_ok", lambda n: n + 1), ("cases_failed", lambda n: n - 1)],
                         ids=["ok-one-more", "failed-one-less"])
def test_counts_of_outcomes_the_records_do_not_hold_are_contradicted(selftest_run, tmp_path, capsys, field, change):
    meta = json.loads((selftest_run / RUN_META).read_text())
    run = _copy(selftest_run, tmp_path, meta=lambda m: m.update({field: change(m[field])}))
    records = load_run(run).records
    held = sum(r.ok for r in records) if field == "cases_ok" else sum(not r.ok for r in records)
    assert held == meta[field]  # what the honest run.json says, and what the edit contradicts
    said = f"field {field}: {change(meta[field])!r}, and {held} of its {len(records)} records are"
    code, err = _show(capsys, run)
    assert code == 1 and f"contradicted: run.json: {said}" in err, err
    code, out = _accept(capsys, _selftest_profile(tmp_path), run)
    assert code == 2 and f"COULD NOT VERIFY  the run: contradicted: run.json: {said}" in out, out
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 1
    assert f"INCOMPLETE RUN ({records[0].run_id}: contradicted: run.json: {said}" in (
        tmp_path / "report" / "report.md").read_text()


def _selftest_profile(tmp_path: Path) -> Path:
    """A profile the honest selftest run passes: one check on its noop case, no pins."""
    path = tmp_path / "selftest-profile.yaml"
    path.write_text(f"schema: critpath.accept/1\nname: p\nworld: 1\nchecks:\n  - {{name: c, case: '{SELFTEST[0]}', "
                    "statistic: p50_us, max: 1.0e+9, source: t}\n")
    return path


def test_the_honest_selftest_run_passes_its_profile(selftest_run, tmp_path, capsys):
    code, out = _accept(capsys, _selftest_profile(tmp_path), selftest_run)
    assert code == 0 and "PASS              check c: p50_us" in out, out


def test_compare_refuses_a_run_with_a_duplicated_record(selftest_run, tmp_path, capsys):
    def old(m):
        m.pop("cases_planned_sha256", None)
        _planned_ok(m, cases_failed=0)
    base = _copy(selftest_run, tmp_path, keep=_ok, meta=old)
    pooled = tmp_path / "pooled"
    shutil.copytree(base, pooled)
    lines = (base / RESULTS).read_text().splitlines()
    (pooled / RESULTS).write_text("\n".join(lines + lines[1:2]) + "\n")  # 5 records where 4 were planned
    capsys.readouterr()
    assert main(["compare", str(base), str(pooled), "--out", str(tmp_path / "cmp")]) == 2
    assert "not whole: a case recorded more than once" in capsys.readouterr().err
