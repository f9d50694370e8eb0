"""Versioned result records: one per case, immutable, validated on write and on read.

A record keeps the raw per-iteration samples in nanoseconds; its summary is derived from them and
checked against them when read back, so a hand-edited percentile is caught.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from typing import Any, Mapping, Optional

import jsonschema
import numpy as np

from harness.core import registry
from harness.core.contention import Contention, Verdict, check_summary, evidence_problem, judge, uneven_column
from harness.core.echo import shown
from harness.core.family import CheckResult
from harness.core.numbers import NumberError, check_float, check_int
from harness.core.options import CannotRun
from harness.core.runid import run_id_fault
from harness.core.runmeta import UNKNOWN_TIME
from harness.core.schema import strict_validator
from harness.core.scale import MAX_SAMPLES, MAX_WORLD
from harness.core.stats import Summary

SCHEMA_ID = "critpath.record/1"
STATUSES = ("ok", "failed", "timeout")
# How ranks' samples became one per iteration: nccl-tests' rule for collectives, or one rank's own.
MAX_OVER_RANKS, SINGLE_RANK = "max_over_ranks", "single_rank"
# The clocks the driver's timers write into a record's timer (harness.run.driver.time_iterations):
# the host's, CUDA events on a GPU, or a family's own loop (``family_owned_timer``). An import's
# timer is its source's (harness.core.imported.IMPORTED_TIMER); a record that never timed has "".
HOST_TIMER, CUDA_TIMER = "perf_counter_ns", "cuda_event"
# ErrorInfo.kind of a case that ran and whose correctness check found wrong results.
CHECK_FAILED = "check"


# started_at of a record whose start no source gave: a text log of nccl-tests prints none, and its
# JSON prints local time without a zone, which is no instant.
UNKNOWN_START = UNKNOWN_TIME  # the same word run.json writes for such a start
# ISO 8601 with its offset, as utc_now_iso writes it: "2024-05-01T12:00:00.123+00:00". Python's
# fromisoformat alone also takes "2024-05-01", "20240501T1200" and times without a zone.
_STARTED_AT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?[+-][0-9]{2}:[0-9]{2}",
                         re.ASCII)


def is_started_at(text: Any) -> bool:
    """Whether ``text`` is an instant as critpath writes one (ISO 8601 with its offset), a real date and time."""
    if not isinstance(text, str) or not _STARTED_AT.fullmatch(text):
        return False
    try:
        _dt.datetime.fromisoformat(text)
    except ValueError:  # month 13, hour 25, offset +99:00
        return False
    return True


def utc_now_iso(timespec: str = "milliseconds") -> str:
    """Now, in UTC, as ISO 8601: every timestamp critpath writes."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec=timespec)


def reduction_for(world: int) -> str:
    return MAX_OVER_RANKS if world > 1 else SINGLE_RANK


def family_owned_timer(family: str) -> str:
    """The timer of a record whose family timed its own loop (``Family.iterate``)."""
    return f"family-owned loop ({family})"


class RecordError(CannotRun):
    """A record that does not validate; ``where`` names the file and line when known."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where


def _schema() -> dict:
    text = resources.files("harness").joinpath("schemas/record-1.json").read_text()
    return json.loads(text)


def _without_sample_items(schema: dict) -> dict:
    """The schema with ``samples_ns.items`` left to ``_check_samples``: jsonschema checks an array
    one element at a time in Python, about 15 us each, which made reading or writing a record of
    36,000 samples take a fifth of a second (the gate reads hundreds). The rule is the schema's."""
    fast = json.loads(json.dumps(schema))
    fast["properties"]["samples_ns"] = {k: v for k, v in fast["properties"]["samples_ns"].items() if k != "items"}
    return fast


_SAMPLE_ITEMS = _schema()["properties"]["samples_ns"]["items"]
# The fields of a record, as the schema declares them: any other top-level key is refused.
_FIELDS = tuple(_schema()["properties"])
_VALIDATOR = strict_validator(_without_sample_items(_schema()))


def _check_samples(samples: Any, where: str) -> None:
    """``samples_ns.items`` of the schema (integers >= its minimum), checked in bulk."""
    if not isinstance(samples, list):
        return  # the schema's type check reports it
    for i, x in enumerate(samples):
        if type(x) is not int:  # bool and float are not JSON integers here
            raise RecordError(f"field samples_ns.{i}: {x!r} is not of type 'integer'", where)
    low = _SAMPLE_ITEMS["minimum"]
    if samples and min(samples) < low:
        i = next(i for i, x in enumerate(samples) if x < low)
        raise RecordError(f"field samples_ns.{i}: {samples[i]} is less than the minimum of {low}", where)


@dataclass(frozen=True)
class ErrorInfo:
    kind: str  # exception type, "timeout", "exit" or CHECK_FAILED
    message: str
    rank: Optional[int] = None
    traceback: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "rank": self.rank, "traceback": self.traceback}


@dataclass(frozen=True)
class Record:
    run_id: str
    case_id: str
    family: str
    family_version: int
    params: Mapping[str, Any]
    status: str
    backend: str
    world: int
    started_at: str  # ISO 8601, UTC
    wall_s: float  # set-up to check, on rank 0
    samples_ns: tuple[int, ...] = ()
    plan: Optional[Mapping[str, int]] = None
    timer: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)
    check: Optional[CheckResult] = None
    error: Optional[ErrorInfo] = None
    # How ranks' samples became one per iteration; "" for the driver's rule at this world
    # (``reduction_for``: the max over ranks, nccl-tests' rule, or one rank's own).
    reduction: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)  # family-specific, JSON-able context
    # What the timed loop suffered, per rank (harness.core.contention); None: no evidence recorded.
    contention: Optional[Contention] = None
    # Figure -> why it could not be recomputed when the record was read (harness.core.verify); derived
    # on read, never written.
    unverifiable: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.reduction:
            object.__setattr__(self, "reduction", reduction_for(self.world))

    @property
    def ok(self) -> bool:
        return self.status == "ok" and (self.check is None or self.check.passed)

    @property
    def label(self) -> str:
        """The record's outcome in one word, the same in every table: ok, failed, timeout, or wrong
        (it ran, and its check found wrong results)."""
        if self.ok:
            return "ok"
        return self.status if self.status != "ok" else "wrong"

    @cached_property
    def contention_verdict(self) -> Verdict:
        """The contention rule on this record's evidence, by today's thresholds (None: no evidence)."""
        return judge(self.contention, self.samples_ns)

    @property
    def summary(self) -> Optional[Summary]:
        return Summary.of(self.samples_ns) if self.samples_ns else None

    def to_dict(self) -> dict:
        summary = self.summary
        return {
            "schema": SCHEMA_ID,
            "run_id": self.run_id,
            "case_id": self.case_id,
            "family": self.family,
            "family_version": self.family_version,
            "params": dict(self.params),
            "status": self.status,
            "backend": self.backend,
            "world": self.world,
            "started_at": self.started_at,
            "wall_s": self.wall_s,
            "plan": dict(self.plan) if self.plan else None,
            "timer": self.timer,
            "reduction": self.reduction,
            "samples_ns": [int(x) for x in self.samples_ns],
            "summary": summary.to_dict() if summary else None,
            "metrics": {k: float(v) for k, v in self.metrics.items()},
            "check": self.check.to_dict() if self.check else None,
            "error": self.error.to_dict() if self.error else None,
            "extra": dict(self.extra),
            # written only where evidence was sampled: an import or a failure has none, and says nothing
            **({"contention": self.contention.to_dict(self.samples_ns)} if self.contention else {}),
        }

    def to_json(self) -> str:
        data = self.to_dict()
        validate(data)
        # allow_nan=False: NaN is not JSON; a metric that came out NaN is a bug to surface.
        return json.dumps(data, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "") -> "Record":
        validate(data, where)
        samples = tuple(int(x) for x in data["samples_ns"])
        stored = data.get("summary")
        if samples and stored:
            derived = Summary.of(samples).to_dict()
            for key, value in derived.items():
                if not math.isclose(float(stored[key]), value, rel_tol=1e-9, abs_tol=1e-6):
                    raise RecordError(
                        f"summary.{key} is {stored[key]} but the samples give {value}", where
                    )
        check = data.get("check")
        error = data.get("error")
        contention = _contention(data, samples, where)
        return cls(
            run_id=data["run_id"],
            case_id=data["case_id"],
            family=data["family"],
            family_version=data["family_version"],
            params=data["params"],
            status=data["status"],
            backend=data["backend"],
            world=data["world"],
            started_at=data["started_at"],
            wall_s=data["wall_s"],
            samples_ns=samples,
            plan=data.get("plan"),
            timer=data.get("timer", ""),
            metrics=data.get("metrics", {}),
            check=CheckResult(check["wrong"], check["checked"], check.get("detail", "")) if check else None,
            error=ErrorInfo(error["kind"], error["message"], error.get("rank"), error.get("traceback", ""))
            if error
            else None,
            reduction=data.get("reduction", ""),
            extra=data.get("extra", {}),
            contention=contention,
        )

    def with_run_id(self, run_id: str) -> "Record":
        return replace(self, run_id=run_id)

    @classmethod
    def failure(cls, case: Any, run_id: str, error: ErrorInfo, backend: str, started_at: str,
                wall_s: float = 0.0) -> "Record":
        """The record of a case that failed or timed out: the one constructor for every place
        that turns a failure into a record (a rank, the supervisor, a gate worker)."""
        return cls(
            run_id=run_id, case_id=case.id, family=case.family, family_version=registry.get(case.family).version,
            params=dict(case.params), status="timeout" if error.kind == "timeout" else "failed", backend=backend,
            world=case.world, started_at=started_at, wall_s=wall_s, error=error,
        )


def _contention(data: Mapping[str, Any], samples: tuple[int, ...], where: str) -> Optional[Contention]:
    """A validated record's contention evidence, once its summary is what the evidence gives."""
    block = data.get("contention")
    if not block:
        return None
    uneven = uneven_column(block, data["world"])
    if uneven:
        raise RecordError(f"field contention.ranks.{uneven}: {len(block['ranks'][uneven])} ranks' evidence in a "
                          f"record of world {data['world']}", where)
    contention = Contention.from_dict(block)
    why = evidence_problem(contention) or check_summary(contention, samples, block["summary"])
    if why:
        raise RecordError(f"field contention.{why}", where)
    return contention


def validate(data: Mapping[str, Any], where: str = "") -> None:
    """Validate against the JSON schema; the error names the offending field path."""
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(data))
    if error is not None:
        path = ".".join(str(p) for p in error.absolute_path) or "(record)"
        raise RecordError(f"field {path}: {error.message}", where)
    unknown = [key for key in data if key not in _FIELDS]
    if unknown:
        raise RecordError(f"field {shown(unknown[0])}: not a field of a record ({SCHEMA_ID} has {', '.join(_FIELDS)})",
                          where)
    if why := run_id_fault(data["run_id"]):
        raise RecordError(f"field run_id: {why}", where)
    if data["started_at"] != UNKNOWN_START and not is_started_at(data["started_at"]):
        raise RecordError(f"field started_at: {shown(data['started_at'])} is not an instant as critpath writes one "
                          f"(ISO 8601 with its offset, 2024-05-01T12:00:00.123+00:00), nor {UNKNOWN_START!r}", where)
    _check_samples(data["samples_ns"], where)
    if data["status"] == "ok" and not data["samples_ns"]:
        raise RecordError("field samples_ns: an ok record must carry its samples", where)
    if data["status"] != "ok" and not data.get("error"):
        raise RecordError(f"field error: a {data['status']} record must say why", where)
    check = data.get("check")
    if check and check["passed"] is not (check["wrong"] == 0):  # from_dict derives it again from wrong
        raise RecordError(f"field check.passed: {check['passed']} but field check.wrong is {check['wrong']}", where)
    try:
        _check_numbers(data)
    except NumberError as exc:
        raise RecordError(str(exc), where) from None


def _check_numbers(data: Mapping[str, Any]) -> None:
    """The numbers the schema types but cannot hold to what a record means: JSON's Infinity and NaN
    parse, and its 'number' admits them (wall_s: Infinity was read); its 'integer' admits 2.0; and
    no run asks for more iterations than a record holds (MAX_SAMPLES, the bound of --iters and
    --warmup), where plan.iters of 10**18 was read. Samples and metrics have their own checks
    (``_check_samples``, harness.core.verify)."""
    check_int(data["family_version"], "field family_version", 1)
    check_int(data["world"], "field world", 1, MAX_WORLD)
    check_float(data["wall_s"], "field wall_s", 0)
    for key, value in data["params"].items():
        if not isinstance(value, str):
            check_float(value, f"field params.{key}")
    plan = data.get("plan")
    if plan:
        check_int(plan["warmup"], "field plan.warmup", 0, MAX_SAMPLES)
        check_int(plan["iters"], "field plan.iters", 1, MAX_SAMPLES)
    for key, value in (data.get("summary") or {}).items():
        # n counts samples: 20.0 is no count (the schema's 'number' admits it)
        (check_int if key == "n" else check_float)(value, f"field summary.{key}", 0)
    check = data.get("check")
    if check:
        check_int(check["wrong"], "field check.wrong", 0)
        check_int(check["checked"], "field check.checked", 0)
    error = data.get("error")
    if error and error.get("rank") is not None:
        check_int(error["rank"], "field error.rank", 0, MAX_WORLD - 1)


def samples_array(record: Record) -> np.ndarray:
    return np.asarray(record.samples_ns, dtype=np.int64)
