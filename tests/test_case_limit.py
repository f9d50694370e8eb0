"""A case's ``--timeout`` holds at its end too: one that ends between two looks at the clock but
past its limit is a timeout record, never an ok one."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from conftest import derived_record, run_cli

from harness.core.store import load_records
from harness.run.joined import _FileSink
from harness.run.limit import overran_by

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_a_case_that_ends_within_one_poll_but_past_its_limit_is_a_timeout(tmp_path):
    done = run_cli("run", "--case", NOOP, "--timeout", "1e-300", "--out", str(tmp_path / "r"))
    assert done.returncode == 1, done.stderr
    (record,) = load_records(tmp_path / "r")
    assert record.status == "timeout" and not record.ok
    # Its end held to the limit, or (a loaded machine, the poll first) the poll's own timeout.
    assert "did not finish within 1e-300 s" in record.error.message


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_a_case_within_its_limit_stays_ok(tmp_path):
    done = run_cli("run", "--case", NOOP, "--timeout", "30", "--out", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    (record,) = load_records(tmp_path / "r")
    assert record.ok


class _Journal:
    run_id = "t"

    def __init__(self):
        self.kept = []

    def keep(self, record):
        self.kept.append(record)


def test_a_joined_ranks_case_that_ends_past_its_limit_before_its_watchdog_ran_is_a_timeout():
    """The watchdog is a timer thread that a busy core may not run in time: the record is judged
    on the clock when it comes."""
    journal = _Journal()
    plan = SimpleNamespace(backend="gloo", timeout_s=1.0)
    sink = _FileSink(SimpleNamespace(rank=0), journal, SimpleNamespace(finished=lambda r: None), plan)
    sink.started_at, sink.started_s = "2026-01-01T00:00:00+00:00", time.monotonic() - 5.0  # started 5 s ago
    sink.record(derived_record(NOOP, [1000, 1100, 1200]))
    (kept,) = journal.kept
    assert kept.status == "timeout" and "within 1 s" in kept.error.message and kept.error.rank == 0
    sink.started_s = time.monotonic()
    sink.record(derived_record(NOOP, [1000, 1100, 1200]))
    assert journal.kept[-1].ok


def test_the_limit_itself_is_inclusive():
    assert overran_by(1.0, 1.0) == "" and overran_by(1.0001, 1.0)
