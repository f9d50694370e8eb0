"""The files that make a directory a run's, and the rule that only the run writes them.

A run directory is its records (``results.jsonl``), its ``run.json`` and its ``fingerprint.json``;
every reader judges the run from them (``harness.core.store``). Their one writer is the run's own
(``store.RunDir``: a run, an import, a gate's worker). Any other output of one of their names in a
directory that holds any of them is refused (``harness.core.atomic.check_target``): `export --out
RUN/results.jsonl`, `diagnose --json RUN/run.json` and `moe-sim --json RUN/fingerprint.json` each
replaced another finished run's records, state or machine without a word.
"""
from __future__ import annotations

import os
from pathlib import Path

RESULTS = "results.jsonl"
RUN_META = "run.json"
FINGERPRINT = "fingerprint.json"
RUN_FILES = (RESULTS, RUN_META, FINGERPRINT)


def run_files(path: Path) -> list[Path]:
    """The files that make ``path`` a run directory (a failed start's temporaries do not): any
    entry of one of their names, a symbolic link to nothing too, which a writer would follow."""
    return [Path(path) / name for name in RUN_FILES if os.path.lexists(Path(path) / name)]


def run_file_refusal(path: Path) -> str:
    """Why an output that is not the run's own may not be written at ``path`` ("" when it may):
    it is named as a run's file, in a directory that holds one."""
    path = Path(path)
    if path.name not in RUN_FILES or not run_files(path.parent):
        return ""
    return (f"{path} is the {path.name} of the run in {path.parent}, which only that run writes; "
            "choose another output path")
