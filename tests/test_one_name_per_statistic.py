"""One statistic, one name: every reader of a statistic (``--statistic``, a gate or compare config,
a baseline table, an acceptance profile, a baselines claim) refuses a second spelling of a
percentile, saying which to write, so a check keyed on the name (a baseline table's "listed twice")
sees one statistic once."""
from __future__ import annotations

import pytest

from harness.cli import main
from harness.core.figures import statistic_fault
from test_bounded_inputs import NOOP, PROFILE
from test_gate_refusals import _run

# (written, the one spelling to write instead)
SECOND_NAMES = [("p99.0_ns", "p99_ns"), ("p50.0000_ns", "p50_ns"), ("p99.90_ns", "p999_ns"), ("p99._ns", "p99_ns"),
                ("p0.50_us", "p0.5_us"), ("p99.9_ns", "p999_ns"), ("p99.99_us", "p9999_us"), ("p995_ns", "p99.5_ns"),
                ("p9990_ns", "p999_ns"), ("p99.90_over_mean", "p999_over_mean"), ("rtt_p99.9_us", "rtt_p999_us")]


@pytest.mark.parametrize("written, write", SECOND_NAMES)
def test_a_second_spelling_of_a_percentile_is_refused_saying_which_to_write(written, write):
    fault = statistic_fault(written)
    assert fault is not None and f"({write!r}), the one spelling of each percentile" in fault


@pytest.mark.parametrize("name", ["p99_ns", "p999_ns", "p9999_us", "p99.5_ns", "p0.5_ns", "p12.345_ms", "p99.9999_ns",
                                  "p999_over_mean", "rtt_p999_us", "p2p_busbw_gbps"])
def test_the_one_spelling_of_each_percentile_is_accepted(name):
    assert statistic_fault(name) is None


@pytest.mark.parametrize("digits, one", [("99.0", "99"), ("99.90", "999"), ("99.9", "999"), ("995", "99.5"),
                                         ("50.0000", "50"), ("0.0100", "0.01"), ("999", "999"), ("12.345", "12.345")])
def test_canonical_percentile_is_the_one_spelling(digits, one):
    from harness.core.figures import canonical_percentile

    assert canonical_percentile(digits) == one


@pytest.mark.parametrize("written, write", [("p99.0_ns", "p99_ns"), ("p50.0000_ns", "p50_ns"),
                                            ("p99.90_ns", "p999_ns"), ("p99.9_ns", "p999_ns")])
def test_compare_refuses_a_second_spelling_of_a_statistic(tmp_path, capsys, written, write):
    base, cand = _run(tmp_path / "r1", "r-1"), _run(tmp_path / "r2", "r-2", seed=1)
    with pytest.raises(SystemExit) as refused:
        main(["compare", str(base), str(cand), "--statistic", written, "--out", str(tmp_path / "out")])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "argument --statistic: " in err and f"write {write.partition('_')[0]} ({write!r})" in err
    assert not (tmp_path / "out").exists()


def test_a_baseline_table_cannot_give_one_percentile_under_two_names(tmp_path):
    from harness.gate.config import ConfigError, load_baselines

    table = tmp_path / "T.yaml"
    entries = "".join(f'  - case_id: "{NOOP}"\n    statistic: {name}\n    value: {value}\n'
                      for name, value in (("p99_ns", 100), ("p99.0_ns", 200), ("p999_ns", 300), ("p99.9_ns", 400)))
    table.write_text("baselines:\n" + entries)
    with pytest.raises(ConfigError, match=rf"^{table}:6: field baselines\[1\]\.statistic: .*write p99 \('p99_ns'\)"):
        load_baselines(table)
    table.write_text("baselines:\n" + entries.replace("p99.0_ns", "p90_ns"))
    with pytest.raises(ConfigError, match=rf"^{table}:12: field baselines\[3\]\.statistic: .*write p999 \('p999_ns'\)"):
        load_baselines(table)
    # each name well spelt: then one case under four statistics, refused as a table gives a case once
    table.write_text("baselines:\n" + entries.replace("p99.0_ns", "p90_ns").replace("p99.9_ns", "p50_ns"))
    with pytest.raises(ConfigError, match=rf"^{table}:5: field baselines\[1\]: .*one statistic per case"):
        load_baselines(table)


def test_an_acceptance_check_refuses_a_second_spelling_of_its_statistic(tmp_path):
    from harness.accept.profile import ProfileError, load_profile

    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE.format(case=NOOP, bound="max: 5").replace("p50_us", "p50.0_us"))
    with pytest.raises(ProfileError, match=rf"^{path}:7: field checks.0.statistic: .*write p50 \('p50_us'\)"):
        load_profile(path)
