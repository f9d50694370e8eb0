"""Reports from a fixed fixture run: golden markdown, plots present, absent families named."""
from __future__ import annotations

import base64
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import another_run

from harness.claims.baselines import load_dir
from harness.cli import main
from harness.families import allreduce
from harness.report.build import build
from harness.report.cli import make_report
from harness.document.blocks import to_markdown
from harness.collectives.crossover import crossover_bytes
from harness.core.store import load_run

FIXTURES = Path(__file__).parent / "fixtures"
RUN = FIXTURES / "run_mixed"
GOLDEN = FIXTURES / "report_mixed.md"


# The golden report sees a fixed set of families, so families registered later (whose columns and
# descriptions would change the tables) do not change it.
FAMILIES = {"allreduce": allreduce.FAMILY}


@pytest.fixture(scope="module")
def report():
    return make_report([RUN], families=FAMILIES)


def test_markdown_matches_the_golden_file(report):
    text = to_markdown(report.blocks)
    if os.environ.get("CRITPATH_REGEN_GOLDEN") == "1":  # deliberate update: review the diff, commit it
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "after a deliberate change: CRITPATH_REGEN_GOLDEN=1 pytest tests/test_report.py"


def test_markdown_is_deterministic(report):
    assert to_markdown(make_report([RUN], families=FAMILIES).blocks) == to_markdown(report.blocks)


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_html_and_every_plot_are_the_same_bytes_every_build(tmp_path):
    """A published report rebuilt from the same run is the same file (fixed bootstrap seed, no
    timestamps in the PNGs or the page)."""
    outs = []
    for name in ("a", "b"):
        assert main(["report", str(RUN), "--out", str(tmp_path / name)]) == 0
        outs.append({p.relative_to(tmp_path / name): p.read_bytes() for p in sorted((tmp_path / name).rglob("*"))
                     if p.is_file()})
    assert outs[0] == outs[1] and any(str(p).endswith(".png") for p in outs[0])


def test_every_family_plot_is_drawn(report):
    names = {b.name for b in report.blocks if hasattr(b, "png")}
    assert names == {"allreduce_latency", "allreduce_busbw", "rpc_percentiles", "pipeline_bubble", "moe_rank_load",
                     "moe_step_by_mitigation", "kv_fragmentation"}
    for b in report.blocks:
        if hasattr(b, "png"):
            assert b.png.startswith(b"\x89PNG"), b.name


def test_a_run_without_a_family_says_so(tmp_path):
    lines = (RUN / "results.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "results.jsonl").write_text("".join(l for l in lines if '"family":"allreduce"' in l))
    text = to_markdown(make_report([tmp_path]).blocks)
    assert "no records of family rpc in this run" in text
    assert "no records of family kv_alloc in this run" in text
    assert "![RPC round-trip latency by percentile" not in text


def test_claims_table_has_every_claim_with_a_verdict(report):
    ids = (FIXTURES / "claim_ids.txt").read_text().split()
    results = report.claim_results[0]
    assert sorted(r.claim.id for r in results) == sorted(ids)
    verdicts = {r.claim.id: r.verdict for r in results}
    assert verdicts["A0.nagle"] == "confirmed"          # 40 ms stall removed by TCP_NODELAY
    assert verdicts["A2.mean_vs_p999"] == "contradicted"  # the fixture's tail is only ~3x the mean
    assert verdicts["A1.tree"] == "not measurable here"   # world 2 < 24
    assert verdicts["A2.pps"] == "not measurable here"
    assert verdicts["A1.kv_frag"] == "simulated"          # the allocator replay, never a confirmation
    assert verdicts["A0.coalesce"] == "confirmed in direction"  # x0.164 is not 1000 -> 1
    assert verdicts["A0.experiments"] == "not measurable here"  # a count of experiments


def test_crossover_interpolates_on_log_axes():
    # ring slower below, faster above: log-difference crosses zero halfway between 1K and 4K.
    assert crossover_bytes([1024, 4096], [2.0, 1.0], [1.0, 2.0]) == [pytest.approx(2048.0)]
    assert crossover_bytes([1024, 4096], [2.0, 3.0], [1.0, 2.0]) == []


def test_cli_writes_self_contained_html(tmp_path):
    out = tmp_path / "out"
    assert main(["report", str(RUN), "--out", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert "<script" not in html and "http://" not in html and "https://" not in html
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 7
    assert base64.b64decode(images[0]).startswith(b"\x89PNG")
    assert sorted(p.name for p in (out / "plots").iterdir())[0] == "allreduce_busbw.png"


def test_comparison_overlays_runs(tmp_path):
    other = tmp_path / "b"
    shutil.copytree(RUN, other)
    report = build([load_run(RUN, "cluster-a"), load_run(other, "cluster-b")], load_dir())
    text = to_markdown(report.blocks)
    assert text.startswith("# critpath comparison: cluster-a vs cluster-b")
    assert "cluster-a: measured" in text and "cluster-b: verdict" in text
    assert "not an A/B measurement" in text


def test_unreadable_run_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "results.jsonl").write_text('{"schema": "critpath.record/1"}\n')
    assert main(["report", str(tmp_path)]) == 2
    assert "results.jsonl:1" in capsys.readouterr().err


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_cli_comparison_with_labels(tmp_path, capsys):
    second = another_run(RUN, tmp_path / "second", "second")  # another run, not a copy
    out = tmp_path / "cmp"
    assert main(["report", str(RUN), str(second), "--label", "cluster-a", "--label", "cluster-b", "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert text.startswith("# critpath comparison: cluster-a vs cluster-b")
    # Same plots, overlaid: one image per plot, not one per run.
    assert text.count("![AllReduce latency vs message size]") == 1
    assert main(["report", str(RUN), str(second), "--label", "only-one", "--out", str(out)]) == 2
    assert "--label given 1 times for 2 runs" in capsys.readouterr().err


def test_the_html_draws_every_cjk_character_it_shows(report):
    from harness.document import fonts
    from harness.document.blocks import to_html

    page = to_html(report.blocks, report.title)
    assert any(fonts.needs_cjk_font(c) for c in page)  # the Sources section shows the original titles
    assert fonts.undrawable(page) == set()


def test_sources_and_claims_cite_in_english(report):
    text = to_markdown(report.blocks)
    sources = text.split("## Sources", 1)[1].split("## Claims check", 1)[0]
    for title in ("Why do messages of a few hundred bytes slow down LLM inference?",
                  "几百字节消息为何拖慢大模型推理？微通信延迟的排查与优化", "128 servers of 8 H800 GPUs",
                  "third-party article in Chinese"):
        assert title in sources, title
    row = next(line for line in text.splitlines() if line.startswith("| A1.allreduce_share |"))
    assert row.endswith("| 32B inference: Step two: hard-won lessons of communication optimisation |"), row
    claims = text.split("## Claims check", 1)[1]
    assert not any("\u2e80" <= c <= "\u9fff" for c in claims)  # the table cites no heading in Chinese


def test_the_run_times_are_shown_in_utc_as_stored():
    from harness.report.build import _finished, utc_text

    assert utc_text("2026-12-01T20:05:53+02:00") == "2026-12-01 18:05:53 UTC"
    assert utc_text("2026-12-01T18:05:53") == "2026-12-01T18:05:53 (no time zone given: not read as UTC)"
    assert utc_text("unknown") == "unknown" and utc_text(None) is None  # an import whose log gives no time
    meta = {"state": "finished", "started_at": "2026-12-01T18:05:53+00:00", "finished_at": "2026-12-01T18:07:33+00:00"}
    assert _finished(meta) == "2026-12-01 18:07:33 UTC (1 min 40 s after the start)"
    assert _finished({"state": "running", "started_at": meta["started_at"], "finished_at": None}) == "- (run.json says running)"


def test_a_case_id_in_a_cell_may_wrap_at_its_commas():
    # Unbroken, a case ID in the notes set the column's width and pushed the claims table's
    # source column off the page.
    from harness.document.blocks import Table, to_html

    case = "pipeline/act_bytes=65536,backend=gloo,compute=spin"
    page = to_html([Table(["notes"], [[f"1 flagged record: {case}"], ["a, b"]])], "t")
    assert "pipeline/act_bytes=65536,<wbr>backend=gloo,<wbr>compute=spin" in page
    assert "<td>a, b</td>" in page  # ordinary text is left alone


def test_every_claim_is_in_exactly_one_claims_table(report):
    """Checked claims and not-measurable ones are split, never dropped or doubled."""
    from harness.document.blocks import Heading, Table

    blocks = report.blocks
    tables = {}
    for i, b in enumerate(blocks):
        if isinstance(b, Heading) and b.text.startswith(("Claims checked", "Claims not measurable")):
            tables[b.text] = next(x for x in blocks[i + 1:] if isinstance(x, Table))
    ids = [row[0] for table in tables.values() for row in table.rows]
    assert sorted(ids) == sorted(r.claim.id for r in report.claim_results[0])
    unmeasured = next(t for name, t in tables.items() if name.startswith("Claims not measurable"))
    verdicts = {r.claim.id: r.verdict for r in report.claim_results[0]}
    assert all(verdicts[row[0]] == "not measurable here" for row in unmeasured.rows)
    assert len(unmeasured.rows) < len(ids)


def test_an_unverified_figure_is_marked_and_captioned_in_the_report(tmp_path):
    from conftest import run_with_an_unverified_figure

    from harness.tables.family import UNVERIFIED, UNVERIFIED_RATIO

    run = run_with_an_unverified_figure(tmp_path / "run")
    honest, edited = load_run(run).records
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    html = (tmp_path / "out" / "report.html").read_text()
    caption = f"{UNVERIFIED}: figures of 1 of these 2 records could not be recomputed"
    for text in (md, html):
        assert caption in text and edited.unverifiable["busbw_gbps"] in text
        assert f"those of the 1 record(s) marked {UNVERIFIED} in the table above included" in text
    rows = [line for line in md.splitlines() if line.startswith("| ") and " | native | " in line]
    assert len(rows) == 2 and [UNVERIFIED in line for line in rows] == [False, True], rows
    assert f"{edited.metrics['busbw_gbps']:.3f} {UNVERIFIED}" in rows[1]
    # side by side: shown marked in both runs, and no ratio taken of it
    again = run_with_an_unverified_figure(tmp_path / "again", run_id="t2",  # a second run, not a copy
                                          started_at="2026-01-02T00:00:00+00:00")
    text = to_markdown(make_report([run, again], labels=["a", "b"]).blocks)
    edited_row = next(line for line in text.splitlines() if line.startswith("| size_bytes=4096 |"))
    cells = edited_row.split(" | ")
    assert cells.count(f"{edited.metrics['busbw_gbps']:.3f} {UNVERIFIED}") == 2 and UNVERIFIED_RATIO in cells, cells
    assert caption.replace("1 of these 2", "2 of these 4") in text
