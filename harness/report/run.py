"""A stored run as the report reads it: records, fingerprint and run metadata, nothing else."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from harness.records import Record
from harness.store import FINGERPRINT, RUN_META, ResultsFileError, load_records


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


def _json(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ResultsFileError(f"{path}: not UTF-8 (offset {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise ResultsFileError(f"{path}: nested too deep to be a critpath file") from None
    if not isinstance(data, dict):
        raise ResultsFileError(f"{path}:1: expected a JSON object, got {type(data).__name__}")
    return data


def load_run(path: Path, label: Optional[str] = None) -> RunData:
    path = Path(path)
    if not path.is_dir():
        raise ResultsFileError(f"{path}: not a run directory")
    records = tuple(load_records(path))
    meta = _json(path / RUN_META)
    run_id = meta.get("run_id") or (records[0].run_id if records else path.name)
    return RunData(path, label or run_id, records, _json(path / FINGERPRINT), meta)
