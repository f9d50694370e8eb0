"""``critpath run``: the options become a plan, then the ranks run it one of two ways, with one
worker loop (``harness.run.worker.serve``):

- local (default, ``harness.run.local``): this process spawns ``--world`` ranks on 127.0.0.1 and
  supervises them;
- joined (``harness.run.joined``): under torchrun or Slurm every process is one rank and rank 0
  writes.

``harness.run.plan`` holds the options and the plan, ``harness.run.reporter`` what the terminal shows.
"""
from __future__ import annotations

from typing import Optional

from harness.core.console import Console
from harness.run.joined import joined_plan, joined_rank, run_joined
from harness.run.local import local_plan, run_local
from harness.run.plan import RunOptions

__all__ = ["RunOptions", "run"]


def run(opts: RunOptions, console: Optional[Console] = None) -> int:
    """Run what ``opts`` selects; the exit code: 0 every case ran and passed, 1 otherwise."""
    console = console or Console(stderr=True)
    me = joined_rank()
    if me is not None:
        return run_joined(joined_plan(opts, me), me, console)
    return run_local(local_plan(opts), console)
