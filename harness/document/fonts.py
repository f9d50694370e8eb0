"""The CJK glyphs a page's HTML needs, embedded so the articles' original titles render anywhere.

The baselines cite Chinese articles by their original titles. A browser without a CJK font draws
those as boxes, so the HTML embeds a subset of Noto Sans CJK SC (SIL Open Font License 1.1, see
``harness/data/fonts/``) holding only the characters the baselines use: under 100 KB, not the full font's 16 MB.
The @font-face declares the CJK blocks as its unicode-range and comes first in the page's font
stack: Latin text keeps the reader's own font, and the browser loads the subset before it lays out
CJK text (listed after the system fonts instead, Chromium drew the page's first CJK line as boxes).

The subset is rebuilt from the baselines by ``python -m harness.report.fonts SOURCE.ttc``.
"""
from __future__ import annotations

import base64
import io
from functools import lru_cache
from importlib import resources

SUBSET_FILE = "data/fonts/critpath-cjk-subset.woff"
FAMILY = "critpath CJK subset"


# The blocks only a CJK font draws: radicals, CJK punctuation, kana, bopomofo, ideographs (and
# extension A), hangul, compatibility ideographs and forms, fullwidth forms (， ： ？). The schema's
# "english" pattern refuses the same blocks (a test holds the two together).
CJK_RANGES = ((0x2E80, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF), (0xFE30, 0xFE4F), (0xFF00, 0xFFEF))


def needs_cjk_font(char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in CJK_RANGES)


@lru_cache(maxsize=1)
def subset_bytes() -> bytes:
    return resources.files("harness").joinpath(SUBSET_FILE).read_bytes()


def font_face_css() -> str:
    data = base64.b64encode(subset_bytes()).decode("ascii")
    ranges = ",".join(f"U+{low:04X}-{high:04X}" for low, high in CJK_RANGES)
    return (f"@font-face{{font-family:'{FAMILY}';font-style:normal;font-weight:400;unicode-range:{ranges};"
            f"src:url(data:font/woff;base64,{data}) format('woff')}}")


FONT_STACK = f"'{FAMILY}',system-ui,sans-serif"


def subset_characters() -> set[str]:
    """The characters the embedded subset draws (its cmap; fontTools ships with matplotlib)."""
    from fontTools.ttLib import TTFont  # 40 ms that rendering a report never needs: only a test reads the cmap

    return {chr(code) for code in TTFont(io.BytesIO(subset_bytes())).getBestCmap()}


def undrawable(page: str) -> set[str]:
    """The CJK characters of an HTML page that would render as boxes where no CJK font is installed:
    all of them when the page does not embed the subset, else those the subset lacks."""
    cjk = {c for c in page if c > "\u10ff" and needs_cjk_font(c)}
    if f"font-family:'{FAMILY}'" not in page or FONT_STACK not in page:
        return cjk
    return cjk - subset_characters()
