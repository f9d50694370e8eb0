"""Rebuild the CJK font subset that report pages embed (``harness.document.fonts``) from the
characters the baselines use. A baselines edit that brings a new character needs a new subset; a
test says so. Rebuild it from the Debian package fonts-noto-cjk (or the upstream release) with::

    python -m harness.report.fonts /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc
"""
from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path
from typing import Iterable

from fontTools import subset
from fontTools.ttLib import TTFont

from harness.claims.baselines import DEFAULT_DIR
from harness.core import yamlfile
from harness.document.fonts import FAMILY, SUBSET_FILE
from harness.core.options import path_option

# Noto Sans CJK's collection holds JP, KR, SC, TC, HK in that order; the articles are Simplified Chinese.
SC_FONT_NUMBER = 2


def baselines_characters(directory: Path) -> set[str]:
    """Every non-ASCII character in the string values of the baselines files: what a report may show."""
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
    p = argparse.ArgumentParser(prog="python -m harness.report.fonts",
                                description="rebuild the embedded CJK font subset from the baselines' characters")
    p.add_argument("source", type=path_option,
                   help="NotoSansCJK-Regular.ttc (Debian fonts-noto-cjk) or NotoSansCJKsc-Regular.otf")
    p.add_argument("--baselines", type=path_option, default=DEFAULT_DIR)
    p.add_argument("--out", type=path_option, default=Path(str(resources.files("harness").joinpath(SUBSET_FILE))))
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
