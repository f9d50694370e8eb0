"""rich's Console for critpath: the text it draws is escaped, its own colours and cursor moves are
not.

A ``Console`` here escapes each segment of text with ``for_terminal`` when it renders, before
styles are applied, and writes through the stream's ``trusted``
side (``harness.core.streams``), so a host name holding ``\\x1b]0;...\\x07`` prints as those
characters while a progress bar still redraws in place.

No string is read as rich markup or emoji, whatever a caller passes: every string critpath prints
holds text from outside (a path, a case ID, a host, an error), and escaping it at each call was
tried and forgotten (``--out 'out[/x]'`` ended ``critpath run`` in a MarkupError, ``b[bold]X``
printed as ``bX``). Colour is given as a style (``print(..., style="red")``, ``Text(s, style=...)``,
``text_column(..., style="bold")``), never inside the text. ``:smiley:`` in a label printed as 😃.
"""
from __future__ import annotations

from typing import Iterable

import rich.console
from rich.progress import TextColumn
from rich.segment import Segment
from rich.text import Text

from harness.core.escape import for_terminal


class Console(rich.console.Console):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **{**kwargs, "emoji": False, "markup": False})

    def render_str(self, text: str, **kwargs) -> Text:
        # Every string rich prints, logs or puts in a table cell or title comes through here; a
        # call's own markup=True or emoji=True is overruled, so no call site can read text as markup.
        # Escaped first: rich's Text drops a BEL, a backspace or a CR, which would print a path
        # that is not the one written (``out\x07`` as ``out``).
        return super().render_str(for_terminal(text), **{**kwargs, "markup": False, "emoji": False})

    @property
    def file(self):
        stream = rich.console.Console.file.fget(self)
        return getattr(stream, "trusted", stream)

    @file.setter
    def file(self, new_file) -> None:
        rich.console.Console.file.fset(self, new_file)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else Segment(for_terminal(segment.text), segment.style, segment.control)
            for segment in buffer)


class _PlainTextColumn(TextColumn):
    def render(self, task) -> Text:
        return Text(for_terminal(self.text_format.format(task=task)), style=self.style, justify=self.justify)


def text_column(template: str, style: str = "none") -> TextColumn:
    """A progress bar's text column whose filled-in template is text, not markup: rich's own
    ``TextColumn`` reads ``{task.description}`` (a case ID) as markup, outside any console, and
    drops the control characters ``for_terminal`` would show."""
    return _PlainTextColumn(template, style=style, markup=False)
