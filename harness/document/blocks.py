"""A document (a report, a history, an acceptance) as a list of blocks, rendered to markdown and to
self-contained HTML from the same content, so the two never disagree."""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Sequence, Union

from harness.core.escape import for_html, for_markdown, for_markdown_cell
from harness.document import fonts


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Table:
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]


@dataclass(frozen=True)
class Image:
    name: str  # file stem under plots/
    title: str
    png: bytes = field(repr=False)
    caption: str = ""


Block = Union[Heading, Para, Table, Image]


PLOTS_DIR = "plots"  # where a document's images are, beside its markdown


def to_markdown(blocks: Sequence[Block], plots_dir: str = PLOTS_DIR) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + for_markdown(b.text), ""]
        elif isinstance(b, Para):
            out += [for_markdown(b.text), ""]
        elif isinstance(b, Table):
            out.append("| " + " | ".join(for_markdown_cell(h) for h in b.headers) + " |")
            out.append("|" + "|".join("---" for _ in b.headers) + "|")
            out += ["| " + " | ".join(for_markdown_cell(c) for c in row) + " |" for row in b.rows]
            out.append("")
        elif isinstance(b, Image):
            out += [f"![{for_markdown_cell(b.title)}]({plots_dir}/{b.name}.png)", ""]
            if b.caption:
                out += [f"*{for_markdown(b.caption)}*", ""]
    return "\n".join(out).rstrip() + "\n"


_CSS = """
body{font-family:FONT_STACK;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:0.9em}
.table{overflow-x:auto;margin:1em 0}
th,td{border:1px solid #ccc;padding:0.25em 0.5em;text-align:left;vertical-align:top}
th{background:#f3f3f3} figure{margin:1em 0} img{max-width:100%}
figcaption{font-size:0.9em;color:#555}
.confirmed{color:#17692d}.contradicted{color:#b3261e}
""".replace("FONT_STACK", fonts.FONT_STACK)


# A case ID in a note ("pipeline/act_bytes=65536,backend=gloo,...") has no space to wrap at, and
# its width set the column's: the claims table ran past the page and hid its source column.
_LONG_TOKEN = re.compile(r"\S{25,}")


def _html_cell(text: str) -> str:
    escaped = for_html(text)
    if text in ("confirmed", "contradicted"):
        return f'<span class="{text}">{escaped}</span>'
    return _LONG_TOKEN.sub(lambda m: m.group(0).replace(",", ",<wbr>"), escaped)


def _text(blocks: Sequence[Block]) -> str:
    """The words of the blocks (not their images)."""
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, (Heading, Para)):
            parts.append(b.text)
        elif isinstance(b, Table):
            parts += [str(h) for h in b.headers] + [str(c) for row in b.rows for c in row]
        elif isinstance(b, Image):
            parts += [b.title, b.caption]
    return "".join(parts)


def to_html(blocks: Sequence[Block], title: str) -> str:
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            body.append(f"<h{b.level}>{for_html(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            body.append(f"<p>{for_html(b.text)}</p>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{for_html(str(h))}</th>" for h in b.headers)
            rows = "".join("<tr>" + "".join(f"<td>{_html_cell(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            # A wide table (rpc has 14 columns) scrolls inside its box instead of running off the page.
            body.append(f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>')
        elif isinstance(b, Image):
            data = base64.b64encode(b.png).decode("ascii")
            caption = f"<figcaption>{for_html(b.caption)}</figcaption>" if b.caption else ""
            body.append(
                f'<figure data-plot="{for_html(b.name)}"><img alt="{for_html(b.title)}" '
                f'src="data:image/png;base64,{data}">{caption}</figure>'
            )
    # No scripts, no external resources: the file opens anywhere and prints no console errors. The
    # CJK subset travels with the page only when the page has text that needs it.
    css = _CSS
    if any(fonts.needs_cjk_font(c) for c in title + _text(blocks) if c > "\u10ff"):
        css = fonts.font_face_css() + css
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{for_html(title)}</title><style>{css}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
