"""The files that make a directory a run's, and the rule that only the run writes them.

A run directory is its records (``results.jsonl``), its ``run.json`` and its ``fingerprint.json``;
every reader judges the run from them (``harness.core.store``). Their one writer is the run's own
(``store.RunDir``: a run, an import, a gate's worker). Any other output of one of their names in a
directory that holds any of them is refused (``harness.core.atomic.check_target``): `export --out
RUN/results.jsonl`, `diagnose --json RUN/run.json` and `moe-sim --json RUN/fingerprint.json` each
replaced another finished run's records, state or machine without a word.

A gate's directory is held the same way: its result (``gate.json``, ``gate.xml``, ``gate.md``)
beside the ``base/`` and ``candidate/`` it measured, and each generation's ``gen-NNN/gate-id``, are
what ``compare GATE/base GATE/candidate`` reads back (``harness.gate.recheck.whole_gate``). Their
one writer is that gate: `compare A B --out GATE` and `export --out GATE/gate.json` replaced a
finished gate's result, after which the gate could no longer be rechecked.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

RESULTS = "results.jsonl"
RUN_META = "run.json"
FINGERPRINT = "fingerprint.json"
RUN_FILES = (RESULTS, RUN_META, FINGERPRINT)

GATE_SIDES = ("base", "candidate")  # a gate's two sides, each a directory of its --out
GATE_RESULT_FILES = ("gate.json", "gate.xml", "gate.md")  # a gate's result, beside its sides
GATE_ID_FILE = "gate-id"  # in each generation's directory: the ID of the gate that measured it
GENERATION_DIR = re.compile(r"gen-\d{3,}")  # a generation's directory on a side: gen-000, gen-001, ...


def run_files(path: Path) -> list[Path]:
    """The files that make ``path`` a run directory (a failed start's temporaries do not): any
    entry of one of their names, a symbolic link to nothing too, which a writer would follow."""
    return [Path(path) / name for name in RUN_FILES if os.path.lexists(Path(path) / name)]


def holds_gate(path: Path) -> bool:
    """Whether ``path`` is a gate's directory: it holds both of a gate's sides."""
    return all(os.path.isdir(Path(path) / side) for side in GATE_SIDES)


def run_file_refusal(path: Path) -> str:
    """Why an output that is not its owner's may not be written at ``path`` ("" when it may): it
    is named as a run's file, in a directory that holds one; as a gate's result, in a gate's
    directory; or as a generation's gate ID."""
    path = Path(path)
    if path.name in RUN_FILES and run_files(path.parent):
        return (f"{path} is the {path.name} of the run in {path.parent}, which only that run writes; "
                "choose another output path")
    if path.name in GATE_RESULT_FILES and holds_gate(path.parent):
        return (f"{path} is the {path.name} of the gate in {path.parent}, which only that gate writes; "
                "choose another output path")
    if path.name == GATE_ID_FILE and GENERATION_DIR.fullmatch(path.parent.name):
        return (f"{path} is the gate ID of the generation {path.parent}, which only the gate that measured it "
                "writes; choose another output path")
    return ""
