"""Every file critpath reads from outside is opened as a regular file, read within a declared size
and parsed within a declared count and depth; a file past one is refused naming it, and a FIFO or
/dev/zero in its place is refused at once.

On the code before each fix, each test failed: a hang, memory without bound, a traceback naming
no file, or a run of a few thousand records that took minutes to show."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.core import store
from harness.core.jsonfile import JsonFileError, JsonLimits, loads_strict
from harness.core.store import RECORD_LIMITS, ResultsFileError, iter_records, load_run
from harness.tables.frame import records_of
from tests.conftest import derived_record

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


def _spin(i: int) -> str:
    return f"selftest/fault_rank=0,mode=spin,spin_iters={i},world=1"


def _run(path: Path, n: int) -> Path:
    """A finished run of ``n`` verified records, each a case of its own."""
    path.mkdir()
    records = [derived_record(_spin(i + 1), [1000 + i, 1100, 1200]) for i in range(n)]
    (path / store.RESULTS).write_text("".join(r.to_json() + "\n" for r in records))
    (path / store.RUN_META).write_text(json.dumps({
        "run_id": "t", "state": "finished", "cases_total": n,
        store.PLANNED: store.planned_digest(r.case_id for r in records)}))
    return path


def _record_line(**extra) -> str:
    data = json.loads(derived_record(NOOP, [1000, 1100, 1200]).to_json())
    data["extra"] = extra
    return json.dumps(data, separators=(",", ":")) + "\n"


# -- results.jsonl: a run's wholeness judged once, not once per record --------------------------

def test_the_frame_of_a_run_judges_its_wholeness_once_however_many_records_it_holds(tmp_path, monkeypatch):
    run = load_run(_run(tmp_path / "run", 40))
    calls = []
    judge = store.incompleteness
    monkeypatch.setattr(store, "incompleteness", lambda *a, **k: calls.append(1) or judge(*a, **k))
    df = records_of([run])
    assert len(df) == 40 and not df["incomplete"].any()
    assert run.incomplete == ""  # asked again: the judgement made once is kept
    assert len(calls) == 1  # each of the 40 rows judged all 40 records: quadratic in the records


# -- results.jsonl: lines and records counted --------------------------------------------------

def test_a_flood_of_blank_lines_is_refused_at_the_line_cap_naming_the_file(tmp_path):
    path = tmp_path / store.RESULTS
    path.write_text(_record_line() + "\n" * (store.MAX_RESULTS_LINES + 5))
    with pytest.raises(ResultsFileError, match=rf"^{path}:{store.MAX_RESULTS_LINES + 1}: more than "
                                               rf"{store.MAX_RESULTS_LINES} lines"):
        list(iter_records(path))


def test_blank_lines_below_the_cap_are_still_passed_over(tmp_path):
    path = tmp_path / store.RESULTS
    path.write_text("\n" * 100 + _record_line() + "\n" * 100)
    assert [r.case_id for r in iter_records(path)] == [NOOP]


@pytest.mark.parametrize("skip_invalid, middle", [(False, _record_line() * 2), (True, "not a record\n" * 2)])
def test_more_records_than_a_run_holds_are_refused_even_when_invalid_ones_are_skipped(tmp_path, monkeypatch,
                                                                                   skip_invalid, middle):
    monkeypatch.setattr(store, "MAX_RUN_CASES", 3)
    path = tmp_path / store.RESULTS
    path.write_text(_record_line() + middle + "\n" + _record_line())
    with pytest.raises(ResultsFileError, match=rf"^{path}:5: more than 3 records; a run holds at most 3"):
        list(iter_records(path, skip_invalid=skip_invalid, skipped=[]))


# -- results.jsonl: what one line may hold once parsed -------------------------------------------

def test_a_record_with_more_keys_than_a_record_holds_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / store.RESULTS
    many = {f"k{i}": 0 for i in range(RECORD_LIMITS.keys + 1)}
    path.write_text(_record_line() + _record_line(many=many))
    with pytest.raises(ResultsFileError, match=rf"^{path}:2: \d+ keys; at most {RECORD_LIMITS.keys} are read"):
        list(iter_records(path))


def test_a_record_with_more_values_than_a_record_holds_is_refused(tmp_path):
    path = tmp_path / store.RESULTS
    path.write_text(_record_line(floats=[0.5] * (RECORD_LIMITS.values + 1)))
    with pytest.raises(ResultsFileError, match=rf"^{path}:1: about \d+ values .*at most {RECORD_LIMITS.values}"):
        list(iter_records(path))


def test_a_record_nested_deeper_than_a_record_is_refused_naming_the_depth(tmp_path):
    path = tmp_path / store.RESULTS
    deep: list = []
    for _ in range(RECORD_LIMITS.depth):
        deep = [deep]
    path.write_text(_record_line(deep=deep))  # the record, extra and depth + 1 lists
    with pytest.raises(ResultsFileError, match=rf"^{path}:1: nested {RECORD_LIMITS.depth + 3} deep; at most "
                                               rf"{RECORD_LIMITS.depth} levels"):
        list(iter_records(path))


LIMITS = JsonLimits(keys=2, values=4, depth=2)


@pytest.mark.parametrize("text", [
    '{"a": "[[[[{{{{::::,,,,"}',  # brackets, colons and commas inside a string are no structure
    '{"a\\\\": "b\\"[[[[::,,", "c": 1}',  # nor after an escaped backslash or quote
    '["\\\\\\"{{{{", 1]',
    '[[1, 2], 3]',
])
def test_what_lies_inside_strings_is_not_counted_against_the_limits(text):
    assert loads_strict(text, "f.json", LIMITS) == json.loads(text)


@pytest.mark.parametrize("text, message", [
    ('{"a": 1, "b": 2, "c": 3}', "f.json: 3 keys; at most 2 are read"),
    ('[1, 2, 3, 4, 5]', "f.json: about 5 values"),
    ('[[["x"]]]', "f.json: nested 3 deep; at most 2 levels are read"),
    (b'[[[{"[": "]]]"}]]]', "f.json: nested 4 deep"),
])
def test_text_past_a_limit_is_refused_naming_the_limit(text, message):
    with pytest.raises(JsonFileError) as err:
        loads_strict(text, "f.json", LIMITS)
    assert str(err.value).startswith(message)
