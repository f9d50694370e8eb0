"""What a directory given as a new run's ``--out`` already holds, said in the refusal of it.

``critpath run`` and ``critpath import-nccl-tests`` each refuse an --out that holds a run. A run or
an import that was killed leaves run.json in the state it was written in first (``running``,
``importing``) and the records it got to; "already holds a run" then read as though the directory
held a finished one, and the retry into it gave no hint that what is there is unfinished and may be
removed. The refusal says the writer, the state and how many records, from one rule for both.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional, Sequence

from harness.core.runfiles import FINGERPRINT, RESULTS, RUN_META, run_files
from harness.core.runmeta import is_import
from harness.core.store import ResultsFileError, read_meta

# The states a writer leaves a run that is whole in: any other (running, importing, interrupted,
# aborted) is a run that did not finish.
FINISHED_STATES = ("finished", "imported")
_CHUNK_BYTES = 1 << 20


def refusal(path: Path, contents: Sequence[Path] = (), option: str = "--out") -> str:
    """Why ``path`` cannot take a new run ("" when it can): it holds a run's files, said with the
    state run.json gives and the records there, or (``contents``, for a writer that needs the
    directory empty) anything else."""
    path = Path(path)
    taken = run_files(path)
    if not taken:
        if not contents:
            return ""
        return f"{path} is not empty ({contents[0]}); choose another {option}"
    if (path / FINGERPRINT) in taken and not (path / RUN_META).exists():
        return (f"{path} holds a run killed before it wrote {RUN_META} (only {FINGERPRINT}): choose another "
                f"{option}, or remove it")
    try:
        meta = read_meta(path / RUN_META)
    except ResultsFileError:
        meta = {}  # a run.json that does not read says nothing of the state: the plain refusal
    state = meta.get("state")  # read_meta holds it to the states a writer gives
    if not isinstance(state, str) or state in FINISHED_STATES:
        return f"{path} already holds a run ({taken[0]}); choose another {option}"
    what = "an import" if is_import(meta) else "a run"
    records = _records(path / RESULTS)
    counted = "" if records is None else f", {records} record{'' if records == 1 else 's'}"
    return (f"{path} holds {what} that did not finish ({RUN_META} state {state}{counted}): "
            f"choose another {option}, or remove it")


def _records(results: Path) -> Optional[int]:
    """How many whole records ``results`` holds (one a line; a killed append leaves none half
    written), None when it is not a regular file that can be read: a link is not followed."""
    try:
        fd = os.open(results, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        count = 0
        while chunk := f.read(_CHUNK_BYTES):
            count += chunk.count(b"\n")
        return count
