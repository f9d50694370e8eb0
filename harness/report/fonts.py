"""The CJK glyphs a report's HTML needs, embedded so the articles' original titles render anywhere.

The baselines cite Chinese articles by their original titles. A browser without a CJK font draws
those as boxes, so the HTML embeds a subset of Noto Sans CJK SC (SIL Open Font License 1.1, see
``harness/data/fonts/``) holding only the characters the baselines use: under 100 KB, not the full font's 16 MB.
The @font-face declares the CJK blocks as its unicode-range and comes first in the page's font
stack: Latin text keeps the reader's own font, and the browser loads the subset before it lays out
CJK text (listed after the system fonts instead, Chromium drew the page's first CJK line as boxes).

A baselines edit that brings a new character needs a new subset; a test says so. Rebuild it from
the Debian package fonts-noto-cjk (or the upstream release) with::

    python -m harness.report.fonts /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc
"""
from __future__ import annotations

import argparse
import base64
import sys
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Iterable

SUBSET_FILE = "data/fonts/critpath-cjk-subset.woff"
FAMILY = "critpath CJK subset"
# Noto Sans CJK's collection holds JP, KR, SC, TC, HK in that order; the articles are Simplified Chinese.
SC_FONT_NUMBER = 2


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
    import io

    from fontTools.ttLib import TTFont

    return {chr(code) for code in TTFont(io.BytesIO(subset_bytes())).getBestCmap()}


def undrawable(page: str) -> set[str]:
    """The CJK characters of an HTML page that would render as boxes where no CJK font is installed:
    all of them when the page does not embed the subset, else those the subset lacks."""
    cjk = {c for c in page if c > "\u10ff" and needs_cjk_font(c)}
    if f"font-family:'{FAMILY}'" not in page or FONT_STACK not in page:
        return cjk
    return cjk - subset_characters()


def baselines_characters(directory: Path) -> set[str]:
    """Every non-ASCII character in the string values of the baselines files: what a report may show."""
    from harness.core import yamlfile

    chars: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            chars.update(c for c in value if ord(c) > 127)

    for path in sorted(Path(directory).glob("*.yaml")):
        walk(yamlfile.load(path)[0])
    return chars


def build_subset(source: Path, chars: Iterable[str], out: Path) -> int:
    """Write the WOFF subset of ``source`` (a Noto Sans CJK .ttc or .otf) holding ``chars``; its size."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    # recalcTimestamp off: the same source and characters give the same bytes.
    font = TTFont(source, fontNumber=SC_FONT_NUMBER if str(source).endswith(".ttc") else -1, recalcTimestamp=False)
    options = subset.Options()
    options.flavor = "woff"
    options.hinting = False  # screen text at body sizes; hints cost a third of the bytes
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 7, 13, 14]  # keep the copyright, licence and trademark notices
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=sorted(ord(c) for c in chars))
    subsetter.subset(font)
    # A modified font is renamed (the OFL asks that a modified version not go by the original's name).
    for record in font["name"].names:
        if record.nameID in (1, 4, 16):
            record.string = FAMILY
        elif record.nameID == 6:
            record.string = FAMILY.replace(" ", "-")
    font.flavor = "woff"
    out.parent.mkdir(parents=True, exist_ok=True)
    font.save(out)
    return out.stat().st_size


def main(argv=None) -> int:
    from harness.claims.baselines import DEFAULT_DIR

    p = argparse.ArgumentParser(prog="python -m harness.report.fonts",
                                description="rebuild the embedded CJK font subset from the baselines' characters")
    p.add_argument("source", type=Path, help="NotoSansCJK-Regular.ttc (Debian fonts-noto-cjk) or NotoSansCJKsc-Regular.otf")
    p.add_argument("--baselines", type=Path, default=DEFAULT_DIR)
    p.add_argument("--out", type=Path, default=Path(str(resources.files("harness").joinpath(SUBSET_FILE))))
    args = p.parse_args(argv)
    if not args.source.is_file():
        print(f"fonts: error: {args.source}: no such font file", file=sys.stderr)
        return 2
    chars = baselines_characters(args.baselines)
    size = build_subset(args.source, chars, args.out)
    print(f"{args.out}: {len(chars)} characters, {size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
