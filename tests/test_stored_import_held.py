"""An imported run is judged from its records: what the import checked of the log (the trailer
against the rows, the printed digits against the time, the samples against the row's time, one
log one measurement, the log each record cites) is checked again of the stored records, and a run
whose records or run.json say otherwise is refused naming the file and field."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.store import RESULTS, RUN_META, ResultsFileError, load_run
from harness.nccltests.importer import import_file

NT = Path(__file__).parent / "fixtures" / "nccl_tests"
LOG, PER_ITER = NT / "all_reduce_h100.txt", NT / "all_reduce_per_iter.json"
ROW_128M = "   538.22  249.37  436.40       0   538.62  249.19  436.08       0"
RAISED = "   300.00  447.39  782.94       0   300.00  447.39  782.94       0"
SIZE_128M = 134217728


def _edit_records(run: Path, edit) -> None:
    path = run / RESULTS
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        edit(record)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _edit_meta(run: Path, edit) -> None:
    meta = json.loads((run / RUN_META).read_text())
    edit(meta)
    (run / RUN_META).write_text(json.dumps(meta))


def _raise_128m(record: dict) -> None:
    """The 128 MiB row raised to 782.94 GB/s busbw, time and algbw with it, as one stored record."""
    if record["params"]["size_bytes"] != SIZE_128M:
        return
    for side in ("in_place", "out_of_place"):
        record["extra"]["imported"][side].update(time_us=300.0, time_printed="300.00", algbw_gbps=447.39,
                                                 busbw_gbps=782.94)
    record["metrics"].update(time_us=300.0, algbw_gbps=447.39, busbw_gbps=782.94)
    record["samples_ns"] = [300000]
    record["summary"] = {k: (v if k == "n" else 300000.0) for k, v in record["summary"].items()}


def test_a_contradicted_import_without_run_jsons_flag_is_refused_naming_it(tmp_path):
    log = tmp_path / "contra.txt"
    log.write_text(LOG.read_text().replace(ROW_128M, RAISED))
    import_file(log, tmp_path / "K")
    assert "contradicted" in load_run(tmp_path / "K").incomplete
    _edit_meta(tmp_path / "K", lambda m: m.pop("contradicted"))
    with pytest.raises(ResultsFileError, match=r"K/run.json: field contradicted: absent, but the trailer its "
                                               r"records keep says 'line 28: Avg bus bandwidth 102.083"):
        load_run(tmp_path / "K")
    assert main(["diagnose", str(tmp_path / "K")]) == 2


def test_stored_rows_edited_against_the_trailer_their_records_keep_are_refused(tmp_path):
    import_file(LOG, tmp_path / "E")
    _edit_records(tmp_path / "E", _raise_128m)
    with pytest.raises(ResultsFileError, match=r"E/results.jsonl: field extra.imported.trailer.rows_mean_busbw_gbps: "
                                               r"102.082778, but the busbw of the records' rows \(18 figures, both "
                                               r"sides\) averages 140.605000"):
        load_run(tmp_path / "E")


def test_an_import_rewritten_as_16_ranks_is_refused_by_its_trailer(tmp_path):
    import_file(LOG, tmp_path / "W")

    def sixteen(record):
        block = record["extra"]["imported"]
        block["ranks"] = record["world"] = record["params"]["world"] = 16
        record["case_id"] = record["case_id"].replace("world=8", "world=16")
        for side in ("in_place", "out_of_place"):
            block[side]["busbw_gbps"] = round(block[side]["algbw_gbps"] * 1.875, 2)
        record["metrics"]["busbw_gbps"] = block[block["placement"]]["busbw_gbps"]
    _edit_records(tmp_path / "W", sixteen)
    with pytest.raises(ResultsFileError, match=r"rows_mean_busbw_gbps: 102.082778, but .* averages 109.37"):
        load_run(tmp_path / "W")
    # the rows alone, the trailer made to fit them: run.json's ranks still say 8
    def refit(record):
        trailer = record["extra"]["imported"]["trailer"]
        trailer.update(rows_mean_busbw_gbps=109.372778, avg_busbw_gbps=109.373)
    _edit_records(tmp_path / "W", refit)
    _edit_meta(tmp_path / "W", lambda m: m.pop("trailer"))
    with pytest.raises(ResultsFileError, match=r"W/run.json: field ranks: 8, but the record of 'line 18' says 16"):
        load_run(tmp_path / "W")


def test_printed_time_digits_are_held_to_the_sides_time(tmp_path):
    import_file(LOG, tmp_path / "T")

    def digits(record):
        if record["params"]["size_bytes"] == SIZE_128M:
            record["extra"]["imported"]["in_place"]["time_printed"] = "0.54"
    _edit_records(tmp_path / "T", digits)
    with pytest.raises(ResultsFileError, match=r"field extra.imported.in_place.time_printed: '0.54', but the "
                                               r"side's time_us, read from those digits, is 538.62"):
        load_run(tmp_path / "T")
    assert main(["show", str(tmp_path / "T")]) == 2


def test_per_iteration_samples_far_above_their_rows_time_are_refused(tmp_path):
    import_file(PER_ITER, tmp_path / "P")

    def triple(record):
        record["samples_ns"] = [s * 3 for s in record["samples_ns"]]
        record["summary"] = {k: (v if k == "n" else v * 3) for k, v in record["summary"].items()}
    _edit_records(tmp_path / "P", triple)
    with pytest.raises(ResultsFileError, match=r"field samples_ns: their mean 70740.6 ns is more than 1.5 times its "
                                               r"imported row's mean time 22400.0 ns"):
        load_run(tmp_path / "P")


def test_imports_of_one_log_given_as_three_nodes_are_one_measurement(tmp_path, capsys):
    runs = []
    for n in (1, 2, 3):
        runs.append(tmp_path / f"Q{n}")
        import_file(LOG, runs[-1], run_id=f"q{n}")
        fingerprint = json.loads((runs[-1] / "fingerprint.json").read_text())
        fingerprint["host"] = f"node0{n}"
        for device in fingerprint["gpus"]["devices"]:
            device["host"] = f"node0{n}"
        (runs[-1] / "fingerprint.json").write_text(json.dumps(fingerprint))
    assert main(["diagnose", *map(str, runs)]) == 2
    assert "run q2 in " in capsys.readouterr().err  # named with the run it repeats
    capsys.readouterr()


def test_the_log_each_record_cites_is_run_jsons_source(tmp_path):
    import_file(LOG, tmp_path / "F")
    _edit_records(tmp_path / "F", lambda r: r["extra"]["imported"].update(file="other.txt"))
    with pytest.raises(ResultsFileError, match=r"F/results.jsonl: field extra.imported.file: 'other.txt' \(the record "
                                               r"of 'line 18'\), but run.json says the import read"):
        load_run(tmp_path / "F")
    import_file(LOG, tmp_path / "L")
    last = {"n": 0}

    def beyond(record):
        last["n"] += 1
        if last["n"] == 9:
            record["extra"]["imported"]["where"] = "line 99"
    _edit_records(tmp_path / "L", beyond)
    with pytest.raises(ResultsFileError, match=r"field extra.imported.where: 'line 99', but the rows of a text log "
                                               r"are on lines after 25 and before its trailer"):
        load_run(tmp_path / "L")
