"""The foreign-CPU term of the contention rule: the host's busy time less the case's own CPU time,
judged per host, read from /proc, and the PSI term standing in where a record or its rule lacks it.
A quiet record whose own threads made PSI pressure and tick stalls was flagged by PSI alone."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from harness.core import contention as cn
from harness.core.records import Record, RecordError
from harness.run import contention as sampling
from test_contention import _judge, _rank, _record, _samples

WINDOW_NS = 10**9


def _host(rank: cn.RankEvidence, busy: float, own: float, cpus: int = 2, host: str = "aaaaaaaaaaaa") -> cn.RankEvidence:
    """``rank`` on a host of ``cpus`` CPUs ``busy`` of whose capacity was used, ``own`` of it by this rank."""
    capacity = rank.window_ns * cpus
    return replace(rank, host_idle_ns=round(capacity * (1 - busy)), own_cpu_ns=round(capacity * own),
                   host_cpus=cpus, host_id=host)


def test_a_quiet_record_whose_own_threads_made_pressure_is_not_contended():
    # PSI 50 % and 40 % of iterations at a tick, but the host's busy time was all the rank's own
    verdict = _judge(_host(_rank(0.5), busy=0.8, own=0.79))
    assert verdict.contended is False
    assert verdict.evidence == "foreign CPU 1.0% < 10.0%" and verdict.foreign_cpu_share == pytest.approx(0.01)
    assert verdict.pressure_share_max == 0.5  # PSI is still reported


def test_another_process_on_the_cpus_while_the_loop_stalled_is_contended():
    verdict = _judge(_host(_rank(0.02), busy=1.0, own=0.4))
    assert verdict.contended is True
    assert "tick-stall share 40.0% >= 5.0%" in verdict.evidence and "foreign CPU 60.0% >= 10.0%" in verdict.evidence
    # no stalls: the neighbour took nothing from the loop
    assert _judge(_host(_rank(0.02), busy=1.0, own=0.4), samples=_samples(1)).contended is False


def test_the_ranks_of_one_host_share_its_cpus_and_each_host_is_judged_alone():
    # two ranks on one host, each 40 % of it: 80 % own of a 90 % busy host leaves 10 % foreign
    a, b = _host(_rank(0.5), busy=0.9, own=0.4), _host(_rank(0.5), busy=0.9, own=0.4)
    assert _judge(a, b).foreign_cpu_share == pytest.approx(0.1)
    # on two hosts each rank's own is all its host saw: nothing foreign
    c = _host(_rank(0.5), busy=0.4, own=0.4, host="bbbbbbbbbbbb")
    verdict = _judge(_host(_rank(0.5), busy=0.4, own=0.4), c)
    assert verdict.contended is False and verdict.foreign_cpu_share == pytest.approx(0.0)
    # the worst host is named among the hosts
    loaded = _judge(_host(_rank(0.5), busy=0.4, own=0.4), _host(c, busy=0.9, own=0.4, host="bbbbbbbbbbbb"))
    assert loaded.contended is True and "foreign CPU 50.0% (host 1 of 2) >= 10.0%" in loaded.evidence


def test_a_window_too_short_for_the_unit_of_proc_stat_is_undecided():
    # 40 ms on 2 CPUs: 10 % of it is 8 ms, under /proc/stat's 10 ms unit
    short = _host(replace(_rank(0.5), window_ns=40_000_000), busy=0.5, own=0.5)
    verdict = _judge(short)
    assert verdict.contended is None and verdict.foreign_cpu_share is None
    assert "foreign CPU not resolved: 80 CPU-ms is too short to tell 10.0% from the 10 ms unit" in verdict.evidence


def test_a_record_without_the_evidence_or_judged_by_an_older_rule_is_judged_by_psi():
    assert "psi some 50.0% >= 10.0%" in _judge(_rank(0.5)).evidence  # no foreign evidence
    ranks = cn.Contention((_host(_rank(0.5), busy=0.8, own=0.79),))
    old = cn.Rule(foreign_cpu_share_min=None)
    assert cn.judge(ranks, _samples(40), old).contended is True
    assert "foreign_cpu_share_min" not in old.to_dict()
    # a record judged by that rule reads back by it, and today's rule re-judges it
    record = _record(ranks)
    data = json.loads(record.to_json())
    data["contention"]["summary"] = cn.judge(ranks, record.samples_ns, old).to_dict()
    assert Record.from_dict(data).contention_verdict.contended is False


def test_a_record_from_before_the_foreign_columns_loads():
    data = json.loads(_record(cn.Contention((_rank(0.5),))).to_json())
    for name in cn.FOREIGN_FIELDS:
        del data["contention"]["ranks"][name]
    data["contention"]["summary"].pop("foreign_cpu_share")
    data["contention"]["summary"]["rule"].pop("foreign_cpu_share_min")
    assert Record.from_dict(data).contention_verdict.contended is True


@pytest.mark.parametrize("edit, field", [
    (lambda c: c["ranks"]["host_id"].__setitem__(0, None), "contention.ranks.host_id.0"),
    (lambda c: c["ranks"]["host_idle_ns"].__setitem__(0, 5 * 10**9), "contention.ranks.host_idle_ns.0"),
    (lambda c: c["ranks"]["host_cpus"].__setitem__(0, 10**6), "contention.ranks.host_cpus.0"),
    (lambda c: c["ranks"]["own_cpu_ns"].__setitem__(0, 0), "contention.summary"),
    (lambda c: c["ranks"]["host_id"].__setitem__(0, "\x1b]0;x"), "contention.ranks.host_id.0"),
])
def test_an_edited_foreign_column_is_refused_naming_it(edit, field):
    data = json.loads(_record(cn.Contention((_host(_rank(0.5), busy=0.8, own=0.79),))).to_json())
    edit(data["contention"])
    with pytest.raises(RecordError, match=f"field {field}"):
        Record.from_dict(data)


def _consistent(*ranks: cn.RankEvidence) -> dict:
    """A record of ``ranks`` whose summary is the rule's own verdict on them: what an edit that
    re-derives the summary leaves, so that only the impossible evidence is under test."""
    return json.loads(_record(cn.Contention(tuple(ranks)), world=len(ranks)).to_json())


@pytest.mark.parametrize("make, field", [
    # far more CPU than the window holds: the foreign share went to -50,000,000 % and a contended
    # record read as not contended
    (lambda r: replace(r, own_cpu_ns=10**15), "contention.ranks.own_cpu_ns.0"),
    # within the CPUs, but more than the host was busy (idle says 20 % of it was)
    (lambda r: replace(r, own_cpu_ns=round(r.window_ns * 2 * 0.9)), "contention.ranks.own_cpu_ns.0"),
    # a mask of one CPU holds a rank to one CPU's time
    (lambda r: replace(r, cpus_allowed="1", cpu_last=1, host_idle_ns=0, own_cpu_ns=round(r.window_ns * 1.5)),
     "contention.ranks.own_cpu_ns.0"),
    (lambda r: replace(r, tick_hz=1), "contention.ranks.tick_hz.0"),
    (lambda r: replace(r, tick_hz=10), "contention.ranks.tick_hz.0"),
    (lambda r: replace(r, tick_source="/proc/\x1b]0;title\x07"), "contention.ranks.tick_source.0"),
    (lambda r: replace(r, tick_source="<script>"), "contention.ranks.tick_source.0"),
])
def test_evidence_that_cannot_be_what_a_window_sampled_is_refused_with_its_summary_rederived(make, field):
    data = _consistent(make(_host(_rank(0.5), busy=0.8, own=0.79)))
    with pytest.raises(RecordError, match=f"field {field}"):
        Record.from_dict(data)


def test_two_ranks_that_each_fit_but_together_used_more_than_the_host_was_busy_are_refused():
    # each rank 60 % of a 2-CPU host that was 80 % busy: alone each fits, together 120 % > 80 %
    a, b = _host(_rank(0.5), busy=0.8, own=0.6), _host(_rank(0.5), busy=0.8, own=0.6)
    with pytest.raises(RecordError, match=r"field contention\.ranks\.own_cpu_ns: the ranks on host 'aaaaaaaaaaaa'"):
        Record.from_dict(_consistent(a, b))
    # what the readings' units allow still loads: 0.5 % below zero on a window of 2 CPU-s
    fine = _host(_rank(0.5), busy=0.8, own=0.4025), _host(_rank(0.5), busy=0.8, own=0.4)
    assert Record.from_dict(_consistent(*fine)).contention_verdict.foreign_cpu_share == pytest.approx(-0.0025)


# ---- sampling ------------------------------------------------------------------------------

def test_proc_stat_gives_idle_and_iowait_and_counts_the_cpus(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 2 30 400 5 0 1 0 0 0\ncpu0 50 1 15 200 3 0 1 0 0 0\ncpu1 50 1 15 200 2 0 0 0 0 0\n"
                    "intr 1 2\nctxt 9\n")
    tick_ns = cn.NS_PER_S // 100  # USER_HZ, as sysconf says on Linux
    assert sampling.host_idle(stat) == (405 * tick_ns, 2)
    stat.write_text("garbage\n")
    assert sampling.host_idle(stat) is None and sampling.host_idle(tmp_path / "absent") is None


BUSY = "import time\nend = time.monotonic() + 0.6\nwhile time.monotonic() < end:\n    pass\n"


# Spins until it has used 0.4 s of CPU by its own clock, says so, then waits to be killed: what it
# used is then known however busy the machine is (a fixed sleep beside it flaked under load).
SPIN_CPU = ("import sys, time\nwhile time.process_time() < 0.4:\n    pass\nprint('spun', flush=True)\n"
            "time.sleep(60)\n")


def test_the_cpu_of_a_process_the_rank_started_is_its_own():
    # an rpc case's server is the case's own work, not a neighbour's
    before = sampling.descendants_cpu_ns(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", SPIN_CPU], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "spun\n"
        grown = sampling.descendants_cpu_ns(os.getpid()) - before
    finally:
        child.kill()
        child.wait(timeout=10)
    assert grown >= 400_000_000 - 2 * 10_000_000, grown  # /proc counts utime and stime in whole 10 ms units


def test_a_window_records_the_foreign_evidence_here():
    evidence = sampling.Window.start().stop()
    assert evidence.foreign_known() and evidence.host_cpus >= 1 and len(evidence.host_id) == 12
    assert 0 <= evidence.host_idle_ns and 0 <= evidence.own_cpu_ns


# Starts a busy process and exits: the busy one is orphaned, so it is no descendant of the test's
# process, which the spin case runs in, and counts as another job's.
ORPHAN = ("import subprocess, sys\nprint(subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
          "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)\n")


def _spin_share(neighbours: int) -> float:
    from test_contention import _run_spin

    pids = [int(subprocess.run([sys.executable, "-c", ORPHAN, BUSY.replace("0.6", "20")], capture_output=True,
                               text=True, check=True, timeout=60).stdout) for _ in range(neighbours)]
    try:
        time.sleep(0.3 if pids else 0)  # past the neighbours' start-up
        return _run_spin(iters=3000).contention_verdict.foreign_cpu_share
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.alone  # beside another test worker the quiet arm has a neighbour too
@pytest.mark.integration
def test_a_cpu_bound_neighbour_is_foreign_cpu_and_the_case_itself_is_not():
    """Two busy processes beside a CPU-bound loop, against the loop alone, alternating three times:
    the foreign share must rise by most of a CPU's share, whatever else the machine runs."""
    quiet, loaded = [], []
    for _ in range(3):
        quiet.append(_spin_share(0))
        loaded.append(_spin_share(2))
    assert min(loaded) > max(quiet), (quiet, loaded)
    # two spinning neighbours on two CPUs take at least a quarter of them from a loop that wants one
    assert sum(loaded) / 3 - sum(quiet) / 3 >= 0.25, (quiet, loaded)
