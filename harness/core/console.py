"""rich's Console for critpath: the text it draws is escaped, its own colours and cursor moves are
not.

A ``Console`` here escapes each segment of text with ``for_terminal`` when it renders, after
markup has been read and before styles are applied, and writes through the stream's ``trusted``
side (``harness.core.streams``), so a host name holding ``\\x1b]0;...\\x07`` prints as those
characters while a progress bar still redraws in place. Markup is another matter: a string given
to ``print`` or to a table cell is read as rich markup, so a caller passes text from outside
through ``rich.markup.escape`` (or ``markup=False``), as ``[bold]`` in a host name is no error.
Emoji shortcodes are off in every console: ``:smiley:`` in a label or a case's error printed as 😃.
"""
from __future__ import annotations

from typing import Iterable

import rich.console
from rich.segment import Segment

from harness.core.escape import for_terminal


class Console(rich.console.Console):
    def __init__(self, *args, **kwargs) -> None:
        # rich reads `:name:` in every string it prints as an emoji; critpath's own text has none,
        # so any there came from outside and is text.
        super().__init__(*args, **{**kwargs, "emoji": False})

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
