"""Text from outside (a case's error message, a host name, a path) made safe for where it goes:
one function per sink.

A message can hold anything a process wrote: an escape sequence that retitles the terminal
(``\\x1b]0;...\\x07``), a NUL, a lone surrogate (``\\ud800``, which no UTF-8 file can hold), markup.
Each sink gets it escaped visibly, so the reader still sees that something odd was there and
what, and the sink stays well-formed:

- ``for_terminal``: C0 and C1 controls (ESC, BEL, NUL, CR...), DEL and the bidirectional overrides
  as ``\\x1b``, ``\\u202e``; newline and tab kept;
- ``for_xml``: what XML 1.0 does not allow (most C0 controls, surrogates, U+FFFE/U+FFFF) and the
  bidirectional overrides as ``\\x00``, ``\\u202e``; the XML writer then escapes ``<&"``;
- ``for_markdown``: inline text that stays text: a ``<`` that could open a tag, comment or
  autolink (CommonMark: ``<`` then a letter, ``/``, ``!`` or ``?``) as ``&lt;``, a ``&`` that would
  make an entity as ``&amp;``; a backslash before each character that can open inline markup (a
  backtick, ``* [ ]``, ``~`` when there are two, a ``\\`` before punctuation, a ``_`` at a word's
  edge, and a ``#``, ``>``, ``+``, ``-``, ``=`` or ``|`` that starts the text), so no link, image,
  emphasis or code span opens; a newline as a visible ``\\n``, so no text starts a block of its
  own. ``<= 0.2 ms``, ``1 -> 2``, ``~15 KiB``, ``p50_ns``, ``(x)`` and ``\\x1b`` read as they are
  in the file. ``for_markdown_cell`` also escapes ``|`` and folds newlines, in a table row;
- ``for_code_span``: text as a code span whose fence is longer than any run of backticks in it;
- ``for_html``: HTML-escaped, controls visible;
- ``for_file``: lone surrogates visible, so the text encodes as UTF-8 (exports, the records frame);
- ``for_csv``: as for the terminal, where a CSV file is read as often as in a spreadsheet, and a
  cell that a spreadsheet would run as a formula (``= + - @``, tab, CR first) behind a ``'``.
"""
from __future__ import annotations

import html
import re

# Lone surrogates: what a str can hold and UTF-8 cannot.
SURROGATES = r"\ud800-\udfff"
# The bidirectional overrides and isolates: invisible, they reorder what a reader sees.
BIDI_CONTROLS = r"\u202a-\u202e\u2066-\u2069"
_TERMINAL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI_CONTROLS}{SURROGATES}]")
# XML 1.0 Char: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]; C1 are legal
# but a terminal showing the file would act on them, so they are escaped too.
_XML = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{BIDI_CONTROLS}{SURROGATES}\ufffe\uffff]")
_FILE = re.compile(f"[{SURROGATES}]")
_MARKDOWN_LT = re.compile(r"<(?=[A-Za-z/!?])")
_MARKDOWN_AMP = re.compile(r"&(?=#?\w+;)")
# What opens inline markup anywhere in a line: an escape, a code span, emphasis, a link or image
# (``![t](u)`` is an image only with its ``[``), strikethrough. A ``_`` inside a word opens nothing
# (CommonMark's flanking rules), so ``p50_ns`` stays as it reads.
# A backslash is one only before ASCII punctuation (or the end, where the caller's text follows), so
# ``\x1b`` keeps reading as it does on the terminal.
_MARKDOWN_INLINE = re.compile(r"[`*\[\]]|\\(?=[!-/:-@\[-`{-~]|$)|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# What opens a block only where a line starts: a heading, a quote, a list item, a setext underline,
# a table row.
_MARKDOWN_LINE_START = re.compile(r"^[#>+\-=|]")
_NEWLINE = re.compile(r"\r\n|[\n\r]")
_BACKTICKS = re.compile(r"`+")
# OWASP's CSV injection list: what a spreadsheet reads as the start of a formula.
_CSV_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _visible(match: re.Match) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def for_terminal(text: object) -> str:
    return _TERMINAL.sub(_visible, str(text))


def for_xml(text: object) -> str:
    return _XML.sub(_visible, str(text))


def for_file(text: object) -> str:
    return _FILE.sub(_visible, str(text))


def for_csv(text: object) -> object:
    """A cell of a CSV file: text escaped, and one a spreadsheet would run as a formula behind a
    ``'``; a number is a number (``-1.5`` stays negative)."""
    if not isinstance(text, str):
        return text
    return ("'" if text.startswith(_CSV_FORMULA) else "") + for_terminal(text)


def for_markdown(text: object) -> str:
    """Text from outside as a markdown paragraph, heading, caption or alt text: it renders as the
    same characters, never as markup, HTML or a new block."""
    return _MARKDOWN_LINE_START.sub(lambda m: "\\" + m.group(0), _visible_newlines(_inline(text)))


def for_markdown_cell(text: object) -> str:
    """As ``for_markdown``, for a table cell: no line starts there, a ``|`` would end it, and a
    newline is a space (a header's two lines read as one)."""
    return _NEWLINE.sub(" ", _inline(text)).replace("|", "\\|")


def _inline(text: object) -> str:
    text = for_terminal(text)
    text = _MARKDOWN_LT.sub("&lt;", _MARKDOWN_AMP.sub("&amp;", text))
    text = _MARKDOWN_INLINE.sub(lambda m: "\\" + m.group(0), text)
    if text.count("~") > 1:  # strikethrough needs a pair (GitHub's takes single tildes), "~15 KiB" is none
        text = text.replace("~", "\\~")
    return text


def _visible_newlines(text: str) -> str:
    return _NEWLINE.sub(lambda m: "\\n" if m.group(0) == "\n" else "\\r", text)


def for_code_span(text: object, in_table: bool = False) -> str:
    """``text`` as a code span: inside one nothing is markup, so only the fence can end it, and the
    fence here is one backtick longer than the longest run inside (CommonMark). Newlines are
    visible, as in ``for_markdown``; in a table row a ``|`` is escaped (GFM strips the backslash)."""
    text = _visible_newlines(for_terminal(text))
    if in_table:
        text = text.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    # A space each side when the text starts or ends with a backtick (or a space, which the
    # renderer would strip): CommonMark removes exactly one space each side.
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def for_html(text: object, quote: bool = True) -> str:
    return html.escape(for_terminal(text), quote=quote)
