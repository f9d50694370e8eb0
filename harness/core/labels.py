"""What a run's label may be (``--label`` of ``show`` and ``report``): one grammar, declared once.

A label stands where the run's ID would (a table's column, a plot's legend, a report's headings),
so it gets the run ID's room, MAX_RUN_ID_CHARS: a 100,000-character label kept ``report`` drawing
past 60 s and made ``show`` print a column as wide. Unlike a run ID it is text a person reads, so
spaces, punctuation and any script are welcome; but not an empty or blank one (a column named by
nothing), no control character (a newline breaks a table's row, an escape sequence drives the
terminal, a bidirectional override reorders what is read), and nothing that shows as nothing: a
format character (a zero-width space, a BOM), a line or paragraph separator, or white space at
either end. Each of those made a label that reads as no label, or as another one (``x`` and
``x ``, two columns that look alike).
"""
from __future__ import annotations

import re
import unicodedata
from typing import Optional

from harness.core.echo import shown
from harness.core.escape import BIDI_CONTROLS, SURROGATES
from harness.core.runid import MAX_RUN_ID_CHARS

MAX_LABEL_CHARS = MAX_RUN_ID_CHARS
# C0 (tab and newline included), DEL, C1, the bidirectional controls and lone surrogates.
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{BIDI_CONTROLS}{SURROGATES}]")
# Unicode's format characters (Cf: zero-width space and joiners, BOM, soft hyphen) and its line and
# paragraph separators (Zl, Zp): nothing to see, or a line break only some readers make.
_UNSEEN_CATEGORIES = {"Cf": "format character", "Zl": "line separator", "Zp": "paragraph separator"}
LABEL_RULE = (f"a label is 1 to {MAX_LABEL_CHARS} characters of text, not blank, with no white space at either end "
              "and no control or format character")


def label_fault(text: str) -> Optional[str]:
    """Why ``text`` is no label, or None when it is one."""
    if len(text) > MAX_LABEL_CHARS:
        return f"a label of {len(text)} characters is more than {MAX_LABEL_CHARS} ({LABEL_RULE})"
    if not text.strip():
        return f"{shown(text)} is blank ({LABEL_RULE})"
    if control := _CONTROL.search(text):
        return f"{shown(text)} holds the control character {control.group()!r} ({LABEL_RULE})"
    for char in text:
        if what := _UNSEEN_CATEGORIES.get(unicodedata.category(char)):
            return f"{shown(text)} holds the {what} U+{ord(char):04X}, which shows as nothing ({LABEL_RULE})"
    if text != text.strip():
        return f"{shown(text)} has white space at an end, which shows as nothing ({LABEL_RULE})"
    return None
