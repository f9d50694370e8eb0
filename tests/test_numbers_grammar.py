"""The one grammar of a number read from text, and the one check of a number read from a file."""
import math

import pytest

from harness.core.numbers import INT64_MAX, NumberError, check_float, check_int, parse_float, parse_int


@pytest.mark.parametrize("text", ["٣", "３", "1_000", " 5", "5 ", "+5", "08", "-08", "0x10", "", "1.0", "1e3",
                                  "9" * 65, "nan", "inf", "\n5"])
def test_an_integer_in_any_other_spelling_is_refused_naming_its_source(text):
    with pytest.raises(NumberError, match=r"^--ranks: "):
        parse_int(text, "--ranks")


def test_an_integer_is_held_to_its_range_and_to_64_bits():
    assert parse_int("0", "k") == 0 and parse_int("-7", "k") == -7 and parse_int("120", "k", 1, 120) == 120
    with pytest.raises(NumberError, match=r"k: 121 is outside the range it may take \(from 1 to 120\)"):
        parse_int("121", "k", 1, 120)
    with pytest.raises(NumberError, match="outside"):
        parse_int(str(INT64_MAX + 1), "k")


@pytest.mark.parametrize("text", ["1e400", "-1e400", "nan", "inf", "Infinity", "1_0.5", "٣.5", " 1", "+1", "1,5", ""])
def test_a_number_that_is_not_finite_or_not_ascii_is_refused(text):
    with pytest.raises(NumberError, match=r"^criterion x: "):
        parse_float(text, "criterion x")


def test_a_number_in_its_grammar_reads_as_python_reads_it():
    assert parse_float("12", "x") == 12.0 and parse_float("-0.5", "x") == -0.5 and parse_float("1e-6", "x") == 1e-6
    assert parse_float(".5", "x") == 0.5 and parse_float("3.", "x") == 3.0
    with pytest.raises(NumberError, match=r"x: 2.0 is outside the range it may take \(from 0 to 1\)"):
        parse_float("2", "x", 0.0, 1.0)


@pytest.mark.parametrize("value", [True, False, 100.9, 1.0, "5", None, [5], INT64_MAX + 1])
def test_a_parsed_integer_field_refuses_bools_floats_and_text(value):
    with pytest.raises(NumberError, match=r"^gate.yaml: n_resamples: "):
        check_int(value, "gate.yaml: n_resamples")


@pytest.mark.parametrize("value", [True, math.nan, math.inf, -math.inf, "1", None, 10**30])
def test_a_parsed_number_field_refuses_bools_non_finite_and_text(value):
    with pytest.raises(NumberError, match=r"^wall_s: "):
        check_float(value, "wall_s")


def test_a_parsed_number_in_range_is_returned_as_a_float():
    assert check_float(3, "x", 0, 5) == 3.0 and isinstance(check_float(3, "x"), float)
    assert check_int(7, "x", 0, 10) == 7
    with pytest.raises(NumberError, match="outside"):
        check_float(-1e-9, "x", 0.0)
