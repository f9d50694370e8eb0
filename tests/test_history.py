"""History from asv results: series per tracked figure, the article's figure as reference."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.claims.baselines import load_dir
from harness.cli import main
from harness.history.view import HistoryError, history_blocks, load_history, reference_for

ASV = Path(__file__).parent / "fixtures" / "asv_results"


def test_series_are_ordered_by_commit_date():
    series = load_history(ASV)
    assert len(series) == 6
    rpc = next(s for s in series if s.case_id == "rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=tcp_nodelay")
    assert [p.commit[:8] for p in rpc.points] == ["11111111", "22222222", "33333333"]
    assert [p.value for p in rpc.points] == pytest.approx([120.0, 122.4, 162.0])


def test_reference_line_converts_the_claims_unit():
    claims = load_dir()
    series = {s.case_id + s.benchmark: s for s in load_history(ASV)}
    tcp = series["rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=tcp_nodelay" + "bench_families.Rpc.track_p50_us"]
    ref = reference_for(tcp, claims)
    assert ref.claim_id == "A0.fixed_cost" and ref.value == pytest.approx(200.0)  # 0.2 ms in us
    uds = series["rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=uds" + "bench_families.Rpc.track_p50_us"]
    assert reference_for(uds, claims) is None


def test_a_reference_reads_any_percentile_in_the_figure_grammar():
    # p95 is a sample statistic like p50 (harness.core.figures): a p95 claim in ms draws on a p95 series in us.
    from dataclasses import replace

    from harness.history.view import Series

    claim = next(c for c in load_dir() if c.id == "A0.fixed_cost")
    p95 = replace(claim, measure=replace(claim.measure, statistic="p95_ms"))
    case = "rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=tcp_nodelay"
    ref = reference_for(Series("m", "bench_families.Rpc.track_p95_us", case, []), [p95])
    assert ref.claim_id == "A0.fixed_cost" and ref.value == pytest.approx(200.0)
    assert reference_for(Series("m", "bench_families.Rpc.track_p50_us", case, []), [p95]) is None


def test_history_blocks_table_and_plots():
    blocks = history_blocks(ASV, load_dir())
    images = [b for b in blocks if hasattr(b, "png")]
    assert len(images) == 3
    table = next(b for b in blocks if hasattr(b, "rows"))
    row = next(r for r in table.rows if r[2] == "rpc/codec=raw,mode=pingpong,payload_bytes=256,transport=tcp_nodelay")
    assert row[7] == "x1.32" and row[9] == "0.81"


def test_missing_results_directory_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(HistoryError):
        load_history(tmp_path / "nope")
    run = Path(__file__).parent / "fixtures" / "run_mixed"
    assert main(["report", str(run), "--asv-results", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "no asv results directory" in capsys.readouterr().err
