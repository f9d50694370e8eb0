"""The fifth probe's option defects: each option combination a command accepts finishes in
seconds, list options read alike, and a number or statistic name has one spelling."""
from __future__ import annotations

import argparse
import re
import sys

import pytest

from harness.core import registry
from harness.core.case import CaseIdError
from harness.core.numbers import NumberError, parse_float
from harness.core.options import number_in

KV_CASE = ("kv_alloc/allocator=caching,block_tokens=16,budget_gb=1,model=7b,policy=per_block,requests=1,"
           "speedup={},trace=azure_conv")


# -- 13: a number that underflows ------------------------------------------------------------------

@pytest.mark.parametrize("text", ["1e-400", "-1e-400", "1e-310", "0.0001e-305"])
def test_text_naming_a_nonzero_number_that_underflows_is_refused(text):
    with pytest.raises(NumberError, match=r"^field x: '.*' is too small to hold \(underflows\)"):
        parse_float(text, "field x")


@pytest.mark.parametrize("text, value", [("0", 0.0), ("0e-400", 0.0), ("-0.0", -0.0), ("1e-300", 1e-300),
                                         (repr(sys.float_info.min), sys.float_info.min)])
def test_zero_and_the_smallest_normal_number_still_read(text, value):
    assert parse_float(text, "field x") == value


def test_every_caller_of_the_float_grammar_refuses_an_underflow():
    with pytest.raises(CaseIdError, match="key 'speedup': '1e-400' is too small to hold"):
        registry.parse(KV_CASE.format("1e-400"))
    with pytest.raises(argparse.ArgumentTypeError, match="too small to hold"):
        number_in(0.0, 1.0)("1e-400")  # --min-effect's type
    assert number_in(0.0, 1.0)("0.05") == 0.05


def test_a_diagnose_criterion_that_underflows_names_its_file_line_and_field(tmp_path):
    from harness.diagnose import rules

    path = tmp_path / "rules.yaml"
    path.write_text("schema: critpath.diagnose/1\nrules:\n  busbw_low:\n    function: variance\n"
                    "    criteria: \"< -1e-400\"\n    verdict: suspect\n    categories: bandwidth\n"
                    "    metrics: ['.*/busbw_gbps']\n")
    with pytest.raises(rules.RuleFileError, match=rf"^{re.escape(str(path))}:5: field rules.busbw_low.criteria: '-1e-400' "
                                                  r"is too small to hold \(underflows\)"):
        rules.load(path)
    path.write_text(path.read_text().replace("-1e-400", "-0.10"))
    assert rules.load(path)[0].criteria.threshold == -0.10
