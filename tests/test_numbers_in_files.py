"""Numbers read from critpath's files (YAML tags, baselines, gate config, model profile, diagnose
criteria, fingerprints, records) held to harness.core.numbers: finite, typed, in a declared range,
and refused naming the file and field."""
from __future__ import annotations

import re

import pytest

from harness.core import yamlfile

# -- YAML: an explicit !!int or !!float tag is held to the 1.2 grammar -----------------------------

@pytest.mark.parametrize("text", ["!!float 1:20", "!!int 1:20", "!!int 0b11", "!!int 1_000", "!!float 1_000.5",
                                  "!!int ٣", "!!float ٣", "!!int -0x10", "!!float 0x10", '!!float "5\\n"',
                                  "!!int [1]", "!!float {a: 1}"])
def test_an_explicit_number_tag_outside_yaml_1_2_is_refused_naming_file_and_line(tmp_path, text):
    path = tmp_path / "t.yaml"
    path.write_text(f"x: 1\na: {text}\n")  # !!float 1:20 was 80, !!int 1_000 was 1000, !!int ٣ was 3
    tag = text.split()[0]
    with pytest.raises(yamlfile.YamlFileError, match=rf"^{re.escape(str(path))}:2: {tag} .* is not an? .* by YAML 1.2's core schema"):
        yamlfile.load(path)


@pytest.mark.parametrize("text,value", [("!!int 5", 5), ('!!int "5"', 5), ("!!int +5", 5), ("!!int 0x1F", 31),
                                        ("!!int 0o17", 15), ("!!float 5", 5.0), ("!!float 1.5e3", 1500.0),
                                        ("!!float -.INF", float("-inf")), ('!!float "2.5"', 2.5)])
def test_an_explicit_number_tag_in_yaml_1_2_reads_as_the_untagged_number(tmp_path, text, value):
    path = tmp_path / "t.yaml"
    path.write_text(f"a: {text}\n")
    assert yamlfile.load(path)[0] == {"a": value}


def test_an_explicit_int_tag_keeps_the_leading_zero_refusal(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("a: !!int 017\n")
    with pytest.raises(yamlfile.YamlFileError, match=rf"^{re.escape(str(path))}:1: '017': a number with a leading zero is refused"):
        yamlfile.load(path)
