"""Text given to critpath is bounded by its grammar where that grammar is declared: a statistic's
percentile digits (``harness.core.figures``) and a run's label (``harness.core.labels``)."""
from __future__ import annotations

from fractions import Fraction

import pytest

from harness.cli import main
from harness.core.figures import samples_needed
from harness.core.scale import MAX_SAMPLES
from test_bounded_inputs import PROFILE, NOOP
from test_gate_refusals import _run

THOUSANDS = "p99." + "9" * 5000 + "_ns"
TWENTY = "p99.99999999999999999_ns"


# -- a percentile has at most QUANTILE_DECIMALS decimals -------------------------------------------

def test_the_finest_percentile_the_grammar_admits_is_one_a_record_can_give():
    from harness.core.figures import QUANTILE_DECIMALS
    from harness.gate.values import validate_statistic

    finest = "9" * QUANTILE_DECIMALS
    for name in (f"p99.{finest}_ns", f"p0.{'0' * (QUANTILE_DECIMALS - 1)}1_us"):
        assert validate_statistic(name) == name
        assert samples_needed(Fraction(name[1:-3])) == MAX_SAMPLES
    with pytest.raises(ValueError, match=f"to {QUANTILE_DECIMALS + 1} decimals; a percentile has at most "
                                         f"{QUANTILE_DECIMALS} decimals"):
        validate_statistic(f"p99.{finest}9_ns")


@pytest.mark.parametrize("statistic", [THOUSANDS, TWENTY, "p" + "9" * 5000 + "_us"])
def test_compare_refuses_a_percentile_of_too_many_digits_naming_the_option(tmp_path, capsys, statistic):
    base, cand = _run(tmp_path / "r1", "r-1"), _run(tmp_path / "r2", "r-2", seed=1)
    with pytest.raises(SystemExit) as refused:
        main(["compare", str(base), str(cand), "--statistic", statistic, "--out", str(tmp_path / "out")])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "argument --statistic: statistic" in err and "a percentile has at most 4 decimals" in err
    assert len(err) < 1000 and not (tmp_path / "out").exists()


def test_a_compare_config_statistic_of_thousands_of_digits_is_refused_naming_file_line_field(tmp_path, capsys):
    base, cand = _run(tmp_path / "r1", "r-1"), _run(tmp_path / "r2", "r-2", seed=1)
    config = tmp_path / "gate.yaml"
    config.write_text(f"alpha: 0.05\nstatistic: {THOUSANDS}\n")
    assert main(["compare", str(base), str(cand), "--config", str(config), "--out", str(tmp_path / "out")]) == 2
    assert f"{config}:2: field statistic: statistic " in capsys.readouterr().err


def test_a_gate_baseline_table_statistic_of_too_many_digits_is_refused_naming_its_line(tmp_path):
    from harness.gate.config import ConfigError, load_baselines

    table = tmp_path / "T.yaml"
    table.write_text(f'baselines:\n  - case_id: "{NOOP}"\n    statistic: {TWENTY}\n    value: 110\n')
    with pytest.raises(ConfigError, match=rf"^{table}:3: .*to 17 decimals"):
        load_baselines(table)


def test_an_acceptance_check_statistic_of_thousands_of_digits_is_refused_at_load(tmp_path):
    from harness.accept.profile import ProfileError, load_profile

    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE.format(case=NOOP, bound="max: 5").replace("p50_us", THOUSANDS.replace("_ns", "_us")))
    with pytest.raises(ProfileError, match=rf"^{path}:7: field checks.0.statistic: .*to 5000 decimals"):
        load_profile(path)


# -- p0 and p100 alike: min and max, said so ---------------------------------------------------------

@pytest.mark.parametrize("name, write", [("p0_ns", "min_ns"), ("p100_ns", "max_ns"), ("p0.0_us", "min_us"),
                                         ("p100.00_ms", "max_ms"), ("p00_ns", "min_ns")])
def test_p0_and_p100_are_refused_alike_saying_to_write_min_or_max(name, write):
    from harness.core.figures import is_sample_statistic
    from harness.gate.values import validate_statistic

    assert not is_sample_statistic(name)
    with pytest.raises(ValueError, match=rf"write {write!r}$"):
        validate_statistic(name)


def test_p0_of_a_declared_figure_says_to_write_the_min_figure_the_family_declares():
    from harness.gate.values import validate_statistic

    with pytest.raises(ValueError, match="write the max figure the family declares, if it declares one"):
        validate_statistic("rtt_p100_us")


def test_a_statistic_name_is_bounded_in_length():
    from harness.gate.values import validate_statistic

    with pytest.raises(ValueError, match="a statistic name is at most 64 characters"):
        validate_statistic("x" * 100_000)


# -- --label: one grammar for show and report ------------------------------------------------------

BAD_LABELS = ["", "   ", "x" * 100_000, "a\nb", "a\tb", "\x1b]0;pwned\x07", "a\u202eb"]


@pytest.mark.parametrize("command", ["show", "report"])
@pytest.mark.parametrize("label", BAD_LABELS, ids=["empty", "blank", "100k", "newline", "tab", "escape", "bidi"])
def test_a_label_that_is_empty_too_long_or_holds_a_control_character_is_refused(tmp_path, capsys, command, label):
    run = _run(tmp_path / "r1", "r-1")
    argv = [command, str(run), "--label", label] + (["--out", str(tmp_path / "rep")] if command == "report" else [])
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "argument --label: " in err and "a label is 1 to 128 characters" in err and len(err) < 1000
    assert not (tmp_path / "rep").exists()


def test_a_label_of_the_most_characters_in_any_script_is_shown(tmp_path, capsys):
    one, two = _run(tmp_path / "r1", "r-1"), _run(tmp_path / "r2", "r-2", seed=1)
    from harness.core.labels import MAX_LABEL_CHARS

    longest = "é" * MAX_LABEL_CHARS
    main(["show", str(one), str(two), "--label", longest, "--label", "before fix"])
    assert "before fix" in capsys.readouterr().out


UNSEEN_LABELS = {"zero-width-space": "\u200b", "bom": "\ufeff", "trailing-space": "x ", "leading-space": " x",
                 "line-separator": "a\u2028b", "paragraph-separator": "a\u2029b", "joiner": "a\u200db",
                 "soft-hyphen": "a\u00adb", "nbsp-end": "x\u00a0"}


@pytest.mark.parametrize("label", UNSEEN_LABELS.values(), ids=UNSEEN_LABELS.keys())
def test_a_label_that_shows_as_nothing_or_as_another_is_refused_naming_the_option(tmp_path, capsys, label):
    run = _run(tmp_path / "r1", "r-1")
    with pytest.raises(SystemExit) as refused:
        main(["show", str(run), "--label", label])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "argument --label: " in err and "shows as nothing" in err and "no control or format character" in err


def test_spaces_inside_a_label_and_letters_of_any_script_are_labels():
    from harness.core.labels import label_fault

    for label in ("before fix", "a  b", "präzise Läufe", "基线 运行", "x\u00a0y", "ε"):
        assert label_fault(label) is None, label
