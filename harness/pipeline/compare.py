"""``critpath pipeline-compare RUN_DIR``: sync vs async (and GPipe vs 1F1B) from one run's records.

Cases that differ only in ``schedule`` are paired. For each pair it prints the measured throughput
ratio (from the p50 steps, and from each case's fastest step, the iteration least disturbed by other
work on the host), the model's ratio for the same M, the model's steady-state sync efficiency (the articles'
arithmetic, compute / (compute + exposed round trips)) and, for the named scenarios, the figure the
article reports. The verdict holds the measured ratio against the model at the same M (within
AGREE_WITHIN); the model's steady state is the article's arithmetic. A pair measured with
oversubscribed cores or stretched compute is marked, and gets no verdict.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Iterable, Optional

from rich.table import Table

from harness.core.options import CannotRun, path_option
from harness.core.records import Record
from harness.core.store import load_whole
from harness.pipeline.scenarios import SCENARIOS, STRETCH_WARN
from harness.tables.terminal import wide_console

PAIRS = (("sync", "async"), ("1f1b", "gpipe"))
AGREE_WITHIN = 0.05  # |measured - model| throughput ratio taken as agreement


@dataclass(frozen=True)
class Comparison:
    scenario: str
    compute: str
    microbatches: int
    first: str  # the slower-by-design schedule (sync, 1f1b)
    second: str
    throughput_ratio: float  # first / second, measured (microbatches per second)
    throughput_ratio_model: float
    throughput_ratio_best: float  # from each case's fastest step: the least disturbed iteration
    sync_efficiency_steady_model: Optional[float]
    claim: str
    claim_efficiency: Optional[float]
    distorted: str  # why the figures are not clean, "" when they are

    @property
    def verdict(self) -> str:
        """Does this machine reproduce the mechanism behind the article's figure? The article's
        figure is steady state; the model at the same M (fill and drain included) is what the
        measurement can be held against, and the model's steady state against the article."""
        if self.claim_efficiency is None:
            return "-"
        if self.distorted:
            return "not clean here"
        close = abs(self.throughput_ratio - self.throughput_ratio_model) <= AGREE_WITHIN
        return "confirms" if close else "contradicts"


def _key(record: Record) -> tuple:
    return tuple(sorted((k, v) for k, v in record.params.items() if k != "schedule"))


def compare(records: Iterable[Record]) -> list[Comparison]:
    # A case repeated in one run (A B A B) gives one row per repetition, paired in run order.
    by_key: dict[tuple, dict[str, list[Record]]] = {}
    for record in records:
        if record.family == "pipeline" and record.ok:
            by_key.setdefault(_key(record), {}).setdefault(record.params["schedule"], []).append(record)
    out = []
    for group in by_key.values():
        for first, second in PAIRS:
            for a, b in zip(group.get(first, []), group.get(second, [])):
                out.append(_comparison(first, second, a, b, SCENARIOS, STRETCH_WARN))
    return out


def _comparison(first: str, second: str, a: Record, b: Record, scenarios, stretch_warn: float) -> Comparison:
    scenario = scenarios.get(a.params["scenario"])
    reasons = []
    for r in (a, b):
        if r.metrics.get("oversubscribed"):
            reasons.append(f"{r.params['schedule']}: oversubscribed")
        if r.metrics.get("compute_stretch", 1.0) > stretch_warn:
            reasons.append(f"{r.params['schedule']}: compute x{r.metrics['compute_stretch']:.2f}")
    claimed = scenario is not None and bool(scenario.claim) and first == "sync"
    return Comparison(
        scenario=a.params["scenario"], compute=a.params["compute"], microbatches=a.params["microbatches"],
        first=first, second=second,
        throughput_ratio=a.metrics["microbatches_per_s"] / b.metrics["microbatches_per_s"],
        throughput_ratio_model=b.metrics["step_model_us"] / a.metrics["step_model_us"],
        throughput_ratio_best=b.summary.min_ns / a.summary.min_ns,
        sync_efficiency_steady_model=a.metrics.get("sync_efficiency_steady_model"),
        claim=scenario.claim if claimed else "",
        claim_efficiency=scenario.claim_efficiency if claimed else None,
        distorted="; ".join(reasons),
    )


def table(comparisons: list[Comparison]) -> Table:
    t = Table(title="pipeline: throughput of one schedule relative to the other (same case otherwise)",
              title_justify="left")
    for header in ("scenario", "compute", "M", "pair", "measured (p50)", "fastest steps", "model (same M)", "model steady",
                   "article", "verdict", "not clean because"):
        t.add_column(header, justify="right")
    for c in comparisons:
        t.add_row(
            c.scenario, c.compute, str(c.microbatches), f"{c.first}/{c.second}", f"{c.throughput_ratio:.3f}",
            f"{c.throughput_ratio_best:.3f}",
            f"{c.throughput_ratio_model:.3f}",
            "-" if c.sync_efficiency_steady_model is None else f"{c.sync_efficiency_steady_model:.3f}",
            "-" if c.claim_efficiency is None else f"{c.claim_efficiency:.2f} ({c.claim})",
            c.verdict, c.distorted,
        )
    return t


def cmd_compare(args) -> int:
    comparisons = compare(list(load_whole(args.run_dir).records))
    if not comparisons:  # a run without the records asked about is input it cannot read, not a failed case
        raise CannotRun(f"{args.run_dir}: no pair of ok pipeline records differing only in schedule")
    wide_console().print(table(comparisons))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pipeline-compare", help="sync vs async and GPipe vs 1F1B from a run's pipeline records")
    p.add_argument("run_dir", type=path_option)
    p.set_defaults(func=cmd_compare)
