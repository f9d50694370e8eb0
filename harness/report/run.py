"""A stored run as the report reads it: records, fingerprint and run metadata, nothing else."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from harness.core.records import Record
from harness.core.store import FINGERPRINT, RUN_META, ResultsFileError, load_records, read_json


@dataclass(frozen=True)
class RunData:
    path: Path
    label: str
    records: tuple[Record, ...]
    fingerprint: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def families(self) -> list[str]:
        seen: list[str] = []
        for r in self.records:
            if r.family not in seen:
                seen.append(r.family)
        return seen

    def of(self, family: str) -> list[Record]:
        return [r for r in self.records if r.family == family]


def load_run(path: Path, label: Optional[str] = None) -> RunData:
    path = Path(path)
    if not path.is_dir():
        raise ResultsFileError(f"{path}: not a run directory")
    records = tuple(load_records(path))
    meta = read_json(path / RUN_META)
    run_id = meta.get("run_id") or (records[0].run_id if records else path.name)
    return RunData(path, label or run_id, records, read_json(path / FINGERPRINT), meta)
