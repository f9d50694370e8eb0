"""Trace loading: the shipped Azure traces, malformed files named by line, the generator."""
from __future__ import annotations

import numpy as np
import pytest

from harness.kv_alloc.traces import TraceFormatError, load_azure, load_csv, synthetic

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD = "2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n"


def write(tmp_path, text):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_shipped_traces_load_with_their_full_length():
    code, conv = load_azure("azure_code"), load_azure("azure_conv")
    assert len(code) == 8819 and len(conv) == 19366
    assert code.prompt_tokens[0] == 4808 and code.output_tokens[0] == 10
    assert np.all(np.diff(conv.arrival_s) >= 0) and conv.arrival_s[0] == 0.0
    assert 3400 < conv.arrival_s[-1] < 3600  # about an hour of requests


def test_good_file_parses_fractional_seconds(tmp_path):
    trace = load_csv(write(tmp_path, HEADER + GOOD))
    assert trace.arrival_s[1] == pytest.approx(0.052, abs=1e-6)


@pytest.mark.parametrize("body, line, words", [
    ("2023-11-16 18:17:03.9799600,4808\n", 2, "expected 3 fields"),
    (GOOD + "2023-11-16 18:17:05.0,abc,3\n", 4, "ContextTokens must be an integer"),
    (GOOD + "2023-11-16 18:17:05.0,12,0\n", 4, r"GeneratedTokens must be in \[1, 1000000000\], got 0"),
    (GOOD + "16/11/2023 18:17,12,3\n", 4, "does not match format"),
    (GOOD + "2023-11-16 18:17:01.0,12,3\n", 4, "goes back in time"),
    (GOOD + "2023-11-16 18:17:05.0,1\x00,2\n", 4, "ContextTokens must be an integer"),
    (GOOD + "2023-11-16 18:17:05.0," + "9" * 400 + ",2\n", 4, r"ContextTokens must be in \[1, 1000000000\]"),
    (GOOD + "99999-11-16 18:17:05.0,12,3\n", 4, "TIMESTAMP"),
    (GOOD + '"' + "x" * 200000 + '",1,2\n', 4, "not CSV: field larger than field limit"),
])
def test_malformed_line_is_named(tmp_path, body, line, words):
    path = write(tmp_path, HEADER + body)
    with pytest.raises(TraceFormatError, match=words) as err:
        load_csv(path)
    assert err.value.line == line
    assert str(err.value).startswith(f"{path}: line {line}: ")


def test_bad_header_and_empty_file(tmp_path):
    with pytest.raises(TraceFormatError, match="line 1: header"):
        load_csv(write(tmp_path, "time,prompt,output\n" + GOOD))
    with pytest.raises(TraceFormatError, match="line 1: empty file"):
        load_csv(write(tmp_path, ""))
    with pytest.raises(TraceFormatError, match="no requests"):
        load_csv(write(tmp_path, HEADER))


def test_synthetic_is_seeded_and_follows_its_parameters():
    a, b = synthetic(4000, rate_per_s=10.0, seed=3), synthetic(4000, rate_per_s=10.0, seed=3)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert 350 < a.arrival_s[-1] < 450  # 4000 arrivals at 10/s
    assert 800 < np.median(a.prompt_tokens) < 1250


def test_a_trace_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_bytes((HEADER + GOOD).encode() + b"2023-11-16 18:17:05.0,caf\xe9,2\n")
    with pytest.raises(TraceFormatError, match=r"line 4: not UTF-8 \(byte 0xe9\)"):
        load_csv(path)
