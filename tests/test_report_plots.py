"""The report's plots read as they claim: a percentile line stops where its samples stop supporting
it, the ring/tree crossover is reported per bracket of measured sizes, and values a log
axis cannot show are counted in the caption instead of drawn as a cliff."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.core import registry
from harness.core.records import Record
from harness.collectives import crossover
from harness.collectives.plots import plot_allreduce_busbw
from harness.rpc.plots import percentile_spectrum, plot_rpc_percentiles, rpc_panels
from harness.core.store import LoadedRun, load_run

PUBLIC = Path(__file__).parent / "fixtures" / "nccl_tests" / "public"


def _record(family: str, params: dict, samples, **extra) -> Record:
    case = family + "/" + ",".join(f"{k}={v}" for k, v in sorted(params.items()))
    return Record("r1", case, family, 1, params, "ok", "gloo", 2, "2026-12-01T00:00:00Z", 1.0,
                  samples_ns=tuple(int(s) for s in samples), extra=extra)


def _run(records) -> LoadedRun:
    return LoadedRun(Path("."), "synthetic", tuple(records))


def test_a_percentile_line_stops_at_the_percentile_its_samples_support():
    samples = np.random.default_rng(1).lognormal(10, 0.3, 150)
    qs, us = percentile_spectrum(samples)
    assert 99.0 in qs and qs.max() < 99.9  # 150 samples: p99 yes (100 needed), p99.9 no (1000 needed)
    assert us[-1] <= samples.max() / 1e3 and np.all(np.diff(us) >= 0)
    run = _run([_record("rpc", {"transport": "tcp_nodelay", "mode": "pingpong", "codec": "raw",
                                "payload_bytes": 256}, samples)])
    drawn = plot_rpc_percentiles([run])
    (ax,) = drawn.figure.axes
    line = ax.get_lines()[0]
    end = line.get_xdata()[-1]  # the axis is 1/(1-p): p99 is 100, p99.9 is 1000
    assert 100 <= end < 1000
    assert "p99 needs 100 samples, p99.9 1000" in drawn.caption


def test_transports_are_grouped_into_panels_of_few_lines():
    transports = ["grpc_unary", "http_keepalive", "shm", "tcp_nagle", "tcp_nodelay", "tcp_nodelay_split",
                  "tcp_nagle_cork", "tcp_nagle_split", "tcp_nodelay_newconn", "uds", "zmq_reqrep_tcp", "quic"]
    panels = rpc_panels(transports)
    assert [t for _, members in panels for t in members] and all(len(m) <= 5 for _, m in panels)
    titles = [title for title, _ in panels]
    assert titles[0].startswith("kernel sockets") and titles[-1] == "quic transports"
    assert sorted(t for _, m in panels for t in m) == sorted(transports)
    assert all(len(m) <= 3 for _, m in rpc_panels(transports, runs=2))  # two runs: two lines per transport


SIZES = [1 << k for k in range(4, 20, 2)]  # 16 B .. 256 KiB


def _leads_of(factors, seed: int, runs: int = 4) -> crossover.Crossover:
    """ring / tree latency ratio per size (< 1: ring faster) in each of ``runs`` runs, 2 % apart."""
    ratios = np.log(factors) + np.random.default_rng(seed).normal(0, 0.02, (runs, len(SIZES)))
    group = crossover.Group("node-a", "float32", 2, "gloo")
    return crossover.crossover_of_runs(group, [f"r{k}" for k in range(runs)], SIZES, ratios)


def test_a_tie_at_the_largest_size_does_not_hide_a_clear_crossover():
    """Tree 2x faster up to 1 KiB, ring 2x faster from 4 KiB, a tie at 256 KiB: one crossover,
    between 1 KiB and 4 KiB (a rule that compared only the end sizes called it noise)."""
    c = _leads_of([2, 2, 2, 2, 0.5, 0.5, 0.5, 1.0], 11)
    assert c.leads[-1] == "neither"
    [change] = c.changes
    assert (change.below_bytes, change.above_bytes, change.faster_below) == (1024, 4096, "tree")


def test_two_real_crossings_are_both_reported():
    """Tree 2x faster only in the middle sizes: two crossovers, each in its own bracket."""
    c = _leads_of([0.5, 0.5, 0.5, 2, 2, 0.5, 0.5, 0.5], 5)
    assert [(ch.below_bytes, ch.above_bytes, ch.faster_below) for ch in c.changes] == [
        (256, 1024, "ring"), (4096, 16384, "tree")]
    assert all(ch.below_bytes <= ch.low_bytes <= ch.high_bytes <= ch.above_bytes for ch in c.changes)


def test_rounded_zeros_are_left_out_and_counted(tmp_path):
    # A real log: nccl-tests prints busbw 0.00 for its six smallest sizes.
    run_dir = tmp_path / "gcp"
    assert main(["import-nccl-tests", str(PUBLIC / "gcp_a3mega_allreduce_16rank_2node.txt"), "--out", str(run_dir)]) == 0
    run = load_run(run_dir)
    zeros = sum(r.metrics["busbw_gbps"] <= 0 for r in run.of("allreduce"))
    assert zeros == 6
    drawn = plot_allreduce_busbw([run])
    (ax,) = drawn.figure.axes
    ys = np.concatenate([line.get_ydata() for line in ax.get_lines()])
    assert len(ys) == len(run.of("allreduce")) - zeros and ys.min() > 0
    assert drawn.caption.startswith("6 points with busbw of 0 or less")


@pytest.mark.parametrize("family_plot", ["moe_rank_load", "moe_step_by_mitigation"])
def test_moe_plots_draw_whole_ranks_and_the_tables_mean(family_plot):
    loads = [{"recv_rows_mean": v} for v in (1000.0, 300.0, 350.0, 350.0)]
    steps = np.random.default_rng(5).normal(20_000_000, 1_000_000, 50)
    base = {"workload": "hot", "skew": 17.0, "mitigation": "none", "seed": 0}
    records = [_record("moe_a2a", base, steps, rank_reports=loads),
               _record("moe_a2a", {**base, "workload": "uniform", "skew": 0.0}, steps * 0.7, rank_reports=loads)]
    spec = next(s for s in registry.get("moe_a2a").plots if s.name == family_plot)
    ax = spec.draw([_run(records)]).figure.axes[0]
    if family_plot == "moe_rank_load":
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2", "3"]
    else:
        widths = sorted(p.get_width() for p in ax.patches)
        assert widths == pytest.approx(sorted([steps.mean() / 1e3, 0.7 * steps.mean() / 1e3]))


def test_the_moe_interval_widens_for_correlated_steps():
    """Steps that drift together (AR(1), rho 0.8) get a wider interval than the independent-steps
    formula gives; independent steps get about the same."""
    from harness.moe_a2a.plots import _mean_interval_us

    rng = np.random.default_rng(4)
    noise = rng.normal(0, 1000, 400)
    drift = np.empty_like(noise)
    drift[0] = noise[0]
    for i in range(1, noise.size):
        drift[i] = 0.8 * drift[i - 1] + noise[i]
    for steps, low, high in ((20_000 + drift, 1.8, 6.0), (20_000 + noise, 0.6, 1.6)):
        mean, half = _mean_interval_us(_record("moe_a2a", {"workload": "uniform"}, steps * 1e3))
        naive = 1.96 * np.std(steps, ddof=1) / np.sqrt(steps.size)
        assert mean == pytest.approx(steps.mean(), rel=1e-6)
        assert low < half / naive < high, half / naive
