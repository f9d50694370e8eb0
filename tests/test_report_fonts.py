"""The HTML report draws the articles' original (Chinese) titles with the CJK subset it embeds:
no character of the baselines, and no CJK character of a report page, renders as a box."""
from __future__ import annotations

import json
import re
from importlib import resources

from harness.claims.baselines import DEFAULT_DIR, load_dir
from harness.document import fonts
from harness.report.build import _sources
from harness.report.fonts import baselines_characters
from harness.document.blocks import Para, to_html

REBUILD = "python -m harness.report.fonts NotoSansCJK-Regular.ttc"


def test_every_non_ascii_character_of_the_baselines_is_in_the_subset():
    wanted = baselines_characters(DEFAULT_DIR)
    assert any(fonts.needs_cjk_font(c) for c in wanted)  # the titles are Chinese: a subset is needed at all
    missing = wanted - fonts.subset_characters()
    assert not missing, f"the CJK subset lacks {''.join(sorted(missing))!r}: rebuild it ({REBUILD})"


def test_the_subset_stays_small():
    assert len(fonts.subset_bytes()) < 100_000


def test_the_sources_section_renders_with_the_embedded_font():
    page = to_html(_sources(load_dir()), "sources")
    assert "几百字节消息为何拖慢大模型推理" in page  # the original title is on the page ...
    assert "@font-face{font-family:'critpath CJK subset'" in page  # ... with the font that draws it
    assert fonts.undrawable(page) == set()


def test_a_character_outside_the_subset_is_caught():
    page = to_html([Para("未收录的字：龘")], "t")
    assert "龘" not in fonts.subset_characters()
    assert "龘" in fonts.undrawable(page)


def test_a_page_without_the_font_has_every_cjk_character_undrawable():
    page = "<html><body><p>第二步：通信优化的血泪教训</p></body></html>"
    assert fonts.undrawable(page) == set("第二步：通信优化的血泪教训")


def test_a_page_with_no_cjk_text_carries_no_font():
    page = to_html([Para("latency p99 1.2 us, 5 × faster")], "t")
    assert "@font-face" not in page and fonts.undrawable(page) == set()


def test_the_schema_refuses_in_english_fields_what_the_font_covers():
    # One set of blocks in two languages: the JSON Schema's "english" pattern and fonts.CJK_RANGES.
    schema = json.loads(resources.files("harness").joinpath("schemas/baselines-1.json").read_text())
    pattern = schema["$defs"]["english"]["pattern"]
    ranges = [(int(a, 16), int(b, 16)) for a, b in re.findall(r"\\u([0-9a-f]{4})-\\u([0-9a-f]{4})", pattern)]
    assert tuple(ranges) == fonts.CJK_RANGES
