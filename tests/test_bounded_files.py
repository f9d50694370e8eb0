"""Every file critpath reads from outside is opened as a regular file, read within a declared size
and parsed within a declared count and depth; a file past one is refused naming it, and a FIFO or
/dev/zero in its place is refused at once.

On the code before each fix, each test failed: a hang, memory without bound, a traceback naming
no file, or a run of a few thousand records that took minutes to show."""
from __future__ import annotations

import json
from pathlib import Path

from harness.core import store
from harness.core.store import load_run
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
