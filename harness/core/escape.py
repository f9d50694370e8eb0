"""Text from outside (a case's error message, a host name, a path) made safe for where it goes:
one function per sink.

A message can hold anything a process wrote: an escape sequence that retitles the terminal
(``\\x1b]0;...\\x07``), a NUL, a lone surrogate (``\\ud800``, which no UTF-8 file can hold), markup.
Each sink gets it escaped visibly, so the reader still sees that something odd was there and
what, and the sink stays well-formed:

- ``for_terminal``: C0 and C1 controls (ESC, BEL, NUL, CR...), DEL and the bidirectional overrides
  as ``\\x1b``, ``\\u202e``; newline and tab kept;
- ``for_xml``: what XML 1.0 does not allow (most C0 controls, surrogates, U+FFFE/U+FFFF) as
  ``\\x00``; the XML writer then escapes ``<&"``;
- ``for_markdown``: a ``<`` that could open a tag, comment or autolink (CommonMark: ``<`` then a
  letter, ``/``, ``!`` or ``?``) as ``&lt;``, a ``&`` that would make an entity as ``&amp;``, so no
  raw HTML reaches a renderer while ``<= 0.2 ms`` and ``1 -> 2`` read as they are in the file;
  ``for_markdown_cell`` also escapes ``|`` and newlines, inside a table row;
- ``for_html``: HTML-escaped, controls visible;
- ``for_file``: lone surrogates visible, so the text encodes as UTF-8 (exports, the records frame);
- ``for_csv``: as for the terminal, where a CSV file is read as often as in a spreadsheet.
"""
from __future__ import annotations

import html
import re

# Lone surrogates: what a str can hold and UTF-8 cannot.
_SURROGATES = r"\ud800-\udfff"
_BIDI = r"\u202a-\u202e\u2066-\u2069"
_TERMINAL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}{_SURROGATES}]")
# XML 1.0 Char: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]; C1 are legal
# but a terminal showing the file would act on them, so they are escaped too.
_XML = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_SURROGATES}\ufffe\uffff]")
_FILE = re.compile(f"[{_SURROGATES}]")
_MARKDOWN_LT = re.compile(r"<(?=[A-Za-z/!?])")
_MARKDOWN_AMP = re.compile(r"&(?=#?\w+;)")


def _visible(match: re.Match) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def for_terminal(text: object) -> str:
    return _TERMINAL.sub(_visible, str(text))


def for_xml(text: object) -> str:
    return _XML.sub(_visible, str(text))


def for_file(text: object) -> str:
    return _FILE.sub(_visible, str(text))


def for_csv(text: object) -> str:
    return for_terminal(text)


def for_markdown(text: object) -> str:
    """Text of a markdown paragraph or heading: markup the caller wrote stays (``**``, backticks),
    HTML does not."""
    return _MARKDOWN_LT.sub("&lt;", _MARKDOWN_AMP.sub("&amp;", for_terminal(text)))


def for_markdown_cell(text: object) -> str:
    return for_markdown(text).replace("|", "\\|").replace("\n", " ")


def for_html(text: object, quote: bool = True) -> str:
    return html.escape(for_terminal(text), quote=quote)
