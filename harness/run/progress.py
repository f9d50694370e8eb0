"""A progress bar on a terminal, plain lines in a CI log: the one way long commands show progress."""
from __future__ import annotations

from rich.progress import Progress

from harness.core.console import Console
from harness.core.escape import for_terminal


class LiveProgress:
    """A rich ``Progress`` that is only drawn on a terminal; ``line`` prints above the bar there,
    and as a plain line everywhere else (CI logs keep every line, no control codes)."""

    def __init__(self, console: Console, *columns) -> None:
        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(*columns, console=console, transient=True)

    def __enter__(self):
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.progress.stop()

    def line(self, text: str) -> None:
        target = self.progress.console if self.live else self.console
        target.print(for_terminal(text), markup=False, highlight=False, soft_wrap=True)
