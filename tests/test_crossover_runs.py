"""The ring/tree crossover is decided by runs, not by the iterations of one record: one run never
establishes it, between-run noise is not read as a crossover however tight each run's iterations,
contended records are withheld and counted, and runs of different machines are never pooled."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.collectives import crossover
from harness.collectives.plots import plot_allreduce_latency
from harness.core import contention as cn
from harness.core.records import Record
from harness.core.store import LoadedRun

SIZES = [1 << k for k in range(4, 20, 2)]  # 16 B .. 256 KiB
TICK_NS = cn.tick_ns(250)
PRESSED = cn.Contention((cn.RankEvidence(window_ns=10**9, pressure_source=cn.PSI, pressure_share=0.5, nivcsw=3,
                                         cpus_allowed="0-1", cpu_last=0, tick_hz=250, tick_source="assumed"),))


def _allreduce(run_id: str, algo: str, size: int, samples, contention=None, **extra) -> Record:
    params = {"algo": algo, "size_bytes": size, "dtype": "float32"}
    case = "allreduce/" + ",".join(f"{k}={v}" for k, v in sorted(params.items()))
    return Record(run_id, case, "allreduce", 1, params, "ok", "gloo", 2, "2026-12-01T00:00:00Z", 1.0,
                  samples_ns=tuple(int(s) for s in samples), extra=extra, contention=contention)


def _tight_ns(median_us: float, rng, n: int = 200) -> np.ndarray:
    """Iterations within 1 % of their median: per iteration, every difference looks certain."""
    return median_us * 1e3 * rng.lognormal(0, 0.01, n)


def _run(run_id: str, ring_over_tree, rng, host: str = "node-a", sizes=SIZES) -> LoadedRun:
    """One run: tree at 100 us at every size, ring at ``ring_over_tree`` times that (< 1: ring faster)."""
    records = [r for s, f in zip(sizes, ring_over_tree)
               for r in (_allreduce(run_id, "ring", s, _tight_ns(100.0 * f, rng)),
                         _allreduce(run_id, "tree", s, _tight_ns(100.0, rng)))]
    return LoadedRun(Path(run_id), run_id, tuple(records), fingerprint={"host": host})


def _cells(runs) -> list[dict]:
    table = crossover.ring_tree_finding(runs)
    return [dict(zip(table.headers, row)) for row in table.rows]


def test_one_run_does_not_establish_a_crossover_and_says_what_to_add():
    # Tree 2x faster up to 1 KiB, ring 2x faster above: per iteration, as clear as can be.
    run = _run("r1", [2, 2, 2, 2, 0.5, 0.5, 0.5, 0.5], np.random.default_rng(1))
    [cell] = _cells([run])
    text = cell["crossover"]
    assert text.startswith("not established here (one run: one record per size, whose iterations share one process)")
    assert "measure the sweep in 3 runs and report them together: critpath report RUN1 RUN2 RUN3" in text
    assert "descriptive only: the measured p50s cross at ~2 KiB" in text
    [c] = crossover.ring_tree_crossovers([run])
    assert not c.significant and set(c.leads) == {crossover.NOT_ESTABLISHED}


def test_three_runs_of_a_clear_crossover_find_it_inside_its_bracket():
    rng = np.random.default_rng(7)
    # tree faster for small messages, ring for large: 2 s^0.3 = 0.1 s^0.6 at s = 20^(1/0.3) B (~21 KiB),
    # each run's ratio 1 % off the law (what differs between processes).
    law = [2.0 * s ** 0.3 / (0.1 * s ** 0.6) for s in SIZES]
    runs = [_run(f"r{k}", np.array(law) * rng.lognormal(0, 0.01, len(SIZES)), rng) for k in range(3)]
    true_bytes = 20 ** (1 / 0.3)
    cells = _cells(runs)
    assert [c["crossover"].endswith("; from 3 runs") for c in cells] == [True]  # one row: the three pooled
    [cell] = cells
    assert (cell["machine"], cell["runs"]) == ("node-a", "3")
    assert cell["crossover"].startswith("between 16 KiB and 64 KiB (tree faster below): interpolated ~")
    assert cell["crossover"].endswith("; from 3 runs")
    [c] = crossover.ring_tree_crossovers(runs)
    [change] = c.changes
    assert change.below_bytes <= true_bytes <= change.above_bytes
    assert change.below_bytes <= change.low_bytes <= change.point_bytes <= change.high_bytes <= change.above_bytes
    assert change.point_bytes == pytest.approx(true_bytes, rel=0.1)
    assert crossover.ring_tree_crossovers(runs) == [c]  # a fixed seed: the same report every build
    caption = plot_allreduce_latency(runs).caption
    assert "interval of the interpolation inside them over resamples of the 3 runs" in caption


def test_runs_that_disagree_give_no_crossover_however_tight_their_iterations():
    """Each run alone crosses clearly, but the runs cross in opposite directions: the ratio that
    varies is the run's, and its mean over runs is not told from 1 at any size."""
    rng = np.random.default_rng(3)
    runs = [_run(f"r{k}", [f, f, f, f, 1 / f, 1 / f, 1 / f, 1 / f], rng) for k, f in
            enumerate((1.35, 1 / 1.35, 1.25, 1 / 1.2))]
    cells = _cells(runs)
    assert not [c["crossover"] for c in cells if c["crossover"].startswith("between")]
    [cell] = cells
    assert cell["runs"] == "4" and cell["crossover"].startswith("no significant crossover (4 runs;")
    [c] = crossover.ring_tree_crossovers(runs)
    assert not c.significant and set(c.leads) == {crossover.NEITHER}


def test_a_contended_record_is_withheld_and_counted():
    rng = np.random.default_rng(5)
    runs = [_run(f"r{k}", [2, 2, 2, 2, 0.5, 0.5, 0.5, 0.5], rng) for k in range(3)]
    # Run r2's tree at 256 KiB waited for a core: most iterations at a scheduler tick, under pressure.
    stalled = [TICK_NS] * 120 + list(_tight_ns(100.0, rng, 80))
    bad = _allreduce("r2", "tree", SIZES[-1], stalled, contention=PRESSED)
    assert bad.contention_verdict.contended is True
    runs[2] = LoadedRun(Path("r2"), "r2", tuple(r for r in runs[2].records if r.case_id != bad.case_id) + (bad,),
                        fingerprint={"host": "node-a"})
    cells = _cells(runs)
    assert [c["crossover"].endswith("; from 3 runs; one contended record withheld") for c in cells] == [True]
    [c] = crossover.ring_tree_crossovers(runs)
    assert c.withheld == 1 and c.runs_at[-1] == 2 and c.leads[-1] == crossover.NOT_ESTABLISHED


def test_runs_withheld_below_three_ask_for_a_quiet_machine_not_for_more_runs():
    rng = np.random.default_rng(6)
    runs = [_run(f"r{k}", [2, 2, 2, 2, 0.5, 0.5, 0.5, 0.5], rng) for k in range(3)]
    # Run r2 waited for a core throughout: every one of its records contended.
    stalled = [TICK_NS] * 120 + list(_tight_ns(100.0, rng, 80))
    runs[2] = LoadedRun(Path("r2"), "r2", tuple(_allreduce("r2", algo, size, stalled, contention=PRESSED)
                                                for algo in ("ring", "tree") for size in SIZES),
                        fingerprint={"host": "node-a"})
    [cell] = [c["crossover"] for c in _cells(runs)]
    assert cell.startswith("not established here (2 runs, fewer than 3 at every size")
    assert "again on a quiet machine" in cell and "16 contended records withheld" in cell


def test_runs_of_two_machines_are_not_pooled():
    rng = np.random.default_rng(9)
    factors = [2, 2, 2, 2, 0.5, 0.5, 0.5, 0.5]
    runs = [_run("a1", factors, rng, "node-a"), _run("a2", factors, rng, "node-a"), _run("b1", factors, rng, "node-b")]
    cells = _cells(runs)
    assert all(c["crossover"].startswith("not established here") for c in cells)
    assert [(c["machine"], c["runs"]) for c in cells] == [("node-a", "2"), ("node-b", "1")]
    assert "2 runs, fewer than 3 at every size both algorithms measured" in cells[0]["crossover"]
    caption = plot_allreduce_latency(runs).caption
    assert "node-a: gloo, float32, world 2: crossover not established here" in caption
    assert "node-b: gloo, float32, world 2: crossover not established here (one run" in caption


def test_imported_runs_are_runs_too():
    imported = {"imported": {"samples": "mean_only", "iters": 20}}

    def run(run_id: str, scale: float) -> LoadedRun:
        means = [("ring", 1024, 30_000), ("tree", 1024, 10_000), ("ring", 65536, 40_000), ("tree", 65536, 90_000)]
        records = (_allreduce(run_id, a, s, [t * scale if a == "ring" else t], **imported) for a, s, t in means)
        return LoadedRun(Path(run_id), run_id, tuple(records), fingerprint={"host": "cluster"})

    [one] = _cells([run("i1", 1.0)])
    assert one["crossover"].startswith("not established here (one run")
    assert "the measured p50s (means, for imported records) cross at ~" in one["crossover"]
    [three] = _cells([run("i1", 1.0), run("i2", 1.1), run("i3", 0.9)])
    assert three["crossover"].startswith("between 1 KiB and 64 KiB (tree faster below)")


def test_the_report_header_says_how_many_of_each_runs_records_were_contended():
    from harness.document.blocks import to_markdown
    from harness.report.build import build

    rng = np.random.default_rng(7)
    quiet = _run("r1", [2, 2, 2, 2, 0.5, 0.5, 0.5, 0.5], rng)
    stalled = [TICK_NS] * 120 + list(_tight_ns(100.0, rng, 80))
    bad = _allreduce("r2", "tree", SIZES[-1], stalled, contention=PRESSED)
    busy = _run("r2", [2, 2, 2, 2, 0.5, 0.5, 0.5, 0.5], rng)
    busy = LoadedRun(Path("r2"), "r2", tuple(r for r in busy.records if r.case_id != bad.case_id) + (bad,),
                     fingerprint={"host": "node-a"})
    header = to_markdown(build([quiet, busy], []).blocks).split("\n\n")[1]
    assert "(r1: 0 of 16 records contended (16 without evidence to judge), " \
           "r2: 1 of 16 records contended (15 without evidence to judge))" in header, header
