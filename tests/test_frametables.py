"""Tables built from the records frame: runs side by side, imports as nccl-tests printed them,
and `critpath show` and the report reading the same rows."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import another_run

import harness
from harness.core import registry
from harness.cli import main
from harness.core.figures import N_TOO_SMALL
from harness.tables.family import (DEFINITION_RATIO, FLAGGED, MISSING, ROUNDED_RATIO, ZERO_RATIO, Compared,
                                   comparison_table)
from harness.nccltests.importer import import_file
from harness.report.cli import make_report
from harness.document.blocks import to_markdown

FIXTURES = Path(__file__).parent / "fixtures"
MIXED = FIXTURES / "run_mixed"
PUBLIC = FIXTURES / "nccl_tests" / "public"
GH200 = PUBLIC / "cscs_gh200_allreduce_8rank_2node_indented.txt"


def _family(df, name):
    return df[df["family"] == name]


@pytest.fixture(scope="module")
def two_runs():
    """The fixture run twice, the second with every p50 doubled, one case dropped from each."""
    base = _family(harness.frame(MIXED), "allreduce")
    other = base.copy()
    other["p50_us"] = other["p50_us"] * 2
    only_in_other, only_in_base = base["case_id"].iloc[0], base["case_id"].iloc[1]
    base = base[base["case_id"] != only_in_other]
    other = other[other["case_id"] != only_in_base]
    return base, other, only_in_base, only_in_other


def _cells(table, case_id):
    """The row of a case: named by the parameters that tell it from the table's other cases."""
    params = set(case_id.split("/", 1)[1].split(","))
    [row] = [r for r in table.rows if set(r[0].split(",")) <= params]
    return dict(zip(table.headers, row))


def test_comparison_has_a_column_per_run_a_ratio_column_and_keeps_a_case_of_one_run(two_runs):
    base, other, only_in_base, only_in_other = two_runs
    table = comparison_table([base, other], ["a", "b"], registry.get("allreduce"))
    assert [h for h in table.headers if h.startswith("p50")] == ["p50 (us) a", "p50 (us) b", "p50 (us) b / a"]
    assert "busbw (GB/s) b / a" in table.headers and table.headers[-2:] == ["status a", "status b"]
    # one row per case ID in either run, none dropped
    assert len(table.rows) == len(set(base["case_id"]) | set(other["case_id"])) == len(base) + 1
    row = base.iloc[3]
    cells = _cells(table, row["case_id"])
    assert cells["p50 (us) a"] == f"{row['p50_us']:.2f}" and cells["p50 (us) b"] == f"{2 * row['p50_us']:.2f}"
    assert cells["p50 (us) b / a"] == "2.00" and cells["busbw (GB/s) b / a"] == "1.00"
    # busbw 0.002 GB/s, which the family's {:.3f} leaves one digit of, to three beside its ratio
    assert row["busbw_gbps"] < 0.01 and cells["busbw (GB/s) a"] == f"{row['busbw_gbps']:.3g}"
    missing = _cells(table, only_in_other)
    assert missing["p50 (us) a"] == MISSING and missing["status a"] == MISSING and missing["status b"] == "ok"
    assert missing["p50 (us) b / a"] == MISSING and missing["p50 (us) b"] != MISSING
    assert _cells(table, only_in_base)["status b"] == MISSING
    assert "a lacks 1 of the 21 cases; b lacks 1 of the 21 cases" in " ".join(table.notes)
    assert "each run / a (the first run)" in table.notes[0]
    # what every case shares is said once, and the case column names what tells them apart
    assert "Every case here has backend=gloo, dtype=float32, world=2." in table.notes
    assert {r[0].split(",")[0].split("=")[0] for r in table.rows} == {"algo"}


def test_no_ratio_of_an_unsupported_percentile(two_runs):
    base, other, *_ = two_runs
    other = other.copy()
    case = other["case_id"].iloc[2]
    other.loc[other["case_id"] == case, "n_samples"] = 1  # one sample: no median
    cells = _cells(comparison_table([base, other], ["a", "b"], registry.get("allreduce")), case)
    assert cells["p50 (us) b"] == N_TOO_SMALL and cells["p50 (us) b / a"] == N_TOO_SMALL
    assert cells["busbw (GB/s) b / a"] == "1.00"  # busbw reads no percentile


def test_long_labels_are_named_once_and_headers_say_run_k(two_runs):
    base, other, *_ = two_runs
    labels = ["20261201-180553-vm-a44d", "20261201-193520-vm-b183"]
    table = comparison_table([base, other], labels, registry.get("allreduce"))
    assert "p50 (us) run 2 / run 1" in table.headers
    assert "run 1: 20261201-180553-vm-a44d; run 2: 20261201-193520-vm-b183" in table.notes[0]


def _log_row(path: Path, size: int) -> list[str]:
    line = next(l for l in path.read_text().splitlines() if re.match(rf"\s*{size}\s", l))
    return line.split()


@pytest.fixture(scope="module")
def gh200(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gh200") / "run"
    import_file(GH200, out)
    return out


def _md_row(text: str, first: str) -> list[str]:
    line = next(l for l in text.splitlines() if l.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def _md_headers(text: str, first: str) -> list[str]:
    lines = text.splitlines()
    i = next(i for i, l in enumerate(lines) if l.startswith(f"| {first} |"))
    header = next(lines[j] for j in range(i, -1, -1) if lines[j + 1].startswith("|---"))
    return [c.strip() for c in header.strip("|").split("|")]


def test_an_import_keeps_the_nccl_tests_columns_of_both_sides(gh200):
    text = to_markdown(make_report([gh200]).blocks)
    headers = _md_headers(text, "256K")
    assert headers[:5] == ["size", "count", "type", "redop", "root"]
    assert headers[5:13] == [f"{h} {side}" for side in ("out-of-place", "in-place")
                             for h in ("time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong")]
    # the log's own cells, out-of-place then in-place, digits as printed (127.0, not 127)
    for size, first in ((262144, "256K"), (8, "8")):
        log = _log_row(GH200, size)
        row = _md_row(text, first)
        assert row[1:5] == log[1:5]  # count, type, redop, root
        assert row[5:13] == log[5:13], size
    assert _md_row(text, "8")[6:8] == ["0.00", "0.00"]  # a rounded zero stays nccl-tests' 0.00
    assert _md_row(text, "256K")[-2:] == ["mean only", "ok"]
    assert text.count("| 256K |") == 1  # the mean is printed once, in its side's time column


def test_an_old_log_says_error_not_wrong(tmp_path):
    path = PUBLIC / "sheffield_v100_allreduce_4gpu_ancient_error_col_indented.txt"
    import_file(path, tmp_path / "run")
    text = to_markdown(make_report([tmp_path / "run"]).blocks)
    headers = _md_headers(text, "8")
    assert "error out-of-place" in headers and not any("#wrong" in h for h in headers)
    assert _md_row(text, "8")[8] == _log_row(path, 8)[7] == "1e-07"


def test_comparison_of_two_imports_is_side_by_side_in_nccl_tests_figures(gh200, tmp_path):
    rtx = tmp_path / "rtx"
    import_file(PUBLIC / "rtx5090_allreduce_8gpu_1proc_v2.18.2_notrailer.txt", rtx)
    text = to_markdown(make_report([gh200, rtx], ["gh200", "rtx"]).blocks)
    headers = _md_headers(text, "256K")
    row = dict(zip(headers, _md_row(text, "256K")))
    assert row["time (us) out-of-place gh200"] == "127.0" and row["time (us) out-of-place rtx"] == "45.87"
    assert row["time (us) out-of-place rtx / gh200"] == f"{45.87 / 127.0:#.3g}"
    assert dict(zip(headers, _md_row(text, "8")))["busbw (GB/s) in-place rtx / gh200"] == ZERO_RATIO
    # busbw printed 0.01 on both sides beside a time ratio of 1.31: one digit holds no ratio
    row128 = dict(zip(headers, _md_row(text, "128")))
    assert row128["busbw (GB/s) out-of-place gh200"] == "0.01" and row128["time (us) out-of-place rtx / gh200"] == "1.31"
    assert row128["busbw (GB/s) out-of-place rtx / gh200"] == ROUNDED_RATIO
    assert "### " not in text.split("## Family allreduce")[1].split("## ")[0]  # not one table per run


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_show_and_report_read_the_same_row(capsys):
    assert main(["show", str(MIXED)]) == 1  # the fixture holds a failed case
    out = capsys.readouterr().out
    shown = next(l for l in out.splitlines() if "tcp_nodelay_split" in l and "raw" in l)
    shown_cells = [c.strip() for c in shown.strip("│ ").split("│")]
    text = to_markdown(make_report([MIXED]).blocks)
    reported = _md_row(text, "tcp_nodelay_split")
    assert shown_cells == reported
    assert reported[4:7] == ["60.5", "77.6", "82.0"]  # p50, p99, p999 of 1,000 samples


@pytest.mark.slow  # seconds of real processes: the slow tier keeps the quick one under 5 minutes
def test_show_of_two_runs_is_side_by_side(tmp_path, capsys):
    second = another_run(MIXED, tmp_path / "second", "second")  # another run, not a copy
    assert main(["show", str(MIXED), str(second), "--label", "a", "--label", "b"]) == 1
    out = capsys.readouterr().out
    assert "p50 (us) b / a" in out and "each run / a (the first run)" in out
    assert main(["show", str(MIXED), str(second), "--label", "a"]) == 2
    assert "--label given 1 times for 2 runs" in capsys.readouterr().err


def test_runs_that_share_no_case_say_which_parameter_keeps_them_apart(gh200, tmp_path):
    """A 16-rank and an 8-rank import pair no case: said, with the world sizes, not paired by guess."""
    gcp = tmp_path / "gcp"
    import_file(PUBLIC / "gcp_a3mega_allreduce_16rank_2node.txt", gcp)
    text = to_markdown(make_report([gcp, gh200], ["gcp", "gh200"]).blocks)
    assert "gh200 shares no case with gcp: world 16 vs 8." in text
    assert dict(zip(_md_headers(text, "256K"), _md_row(text, "256K")))["time (us) out-of-place gh200"] == MISSING


def _one_case_set(two_runs, column: str, value: str):
    """The comparison of the two runs with ``column`` of one case of the second run set to ``value``."""
    base, other, *_ = two_runs
    other = other.copy()
    case = other["case_id"].iloc[2]
    other.loc[other["case_id"] == case, column] = value
    return comparison_table([base, other], ["a", "b"], registry.get("allreduce")), case, other


def test_records_of_different_definitions_get_no_ratio(two_runs):
    """Another timer (an nccl-tests import's CUDA events against critpath's clock) is not compared."""
    table, case, other = _one_case_set(two_runs, "timer", "nccl-tests (CUDA events)")
    cells = _cells(table, case)
    assert cells["p50 (us) b / a"] == DEFINITION_RATIO and cells["busbw (GB/s) b / a"] == DEFINITION_RATIO
    assert cells["p50 (us) b"] != MISSING  # the figures are shown, only the ratio is refused
    note = next(n for n in table.notes if n.startswith(DEFINITION_RATIO))
    assert "1 case(s)" in note and "timer 'perf_counter_ns' vs 'nccl-tests (CUDA events)'" in note
    assert _cells(table, other["case_id"].iloc[3])["p50 (us) b / a"] == "2.00"


def test_a_flagged_record_says_so_in_its_status_and_a_note(two_runs):
    table, case, _ = _one_case_set(two_runs, "flags", "OVERSUBSCRIBED 4 spinning/2 cores")
    assert _cells(table, case)["status b"] == f"ok, {FLAGGED}" and _cells(table, case)["status a"] == "ok"
    assert any("OVERSUBSCRIBED 4 spinning/2 cores" in n and n.startswith(f"Status '{FLAGGED}'") for n in table.notes)


def test_a_run_without_the_family_is_said_once(two_runs):
    base, *_ = two_runs
    table = comparison_table([base, base.iloc[0:0]], ["a", "b"], registry.get("allreduce"))
    assert "No records of this family in b: its columns read -." in table.notes
    assert not any("shares no case" in n or "lacks" in n for n in table.notes)
    assert all(_cells(table, c)["status b"] == MISSING for c in base["case_id"])


def test_small_figures_and_percentages_keep_three_digits_beside_their_ratio():
    share = Compared("vs uniform", "paired_rel_throughput", "higher", "{:.0%}")
    assert share.cell({"paired_rel_throughput": 0.6674, "n_samples": 50}) == "66.7%"
    busbw = Compared("busbw", "busbw_gbps", "higher", "{:.3f}")
    assert busbw.cell({"busbw_gbps": 0.0019953, "n_samples": 200}) == "0.00200"
    assert busbw.cell({"busbw_gbps": 1.25, "n_samples": 200}) == "1.250"
