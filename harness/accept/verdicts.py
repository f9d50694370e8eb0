"""Acceptance's three verdicts and the one line each judgement prints.

pass / fail / could not verify, exit 0 / 1 / 2. Something that could not be judged (a pin the
fingerprint did not record, a case the run does not hold, a statistic its records cannot give) is
"could not verify", never a failure: a failure is a measured value or a recorded property that
misses what the profile asks. Any failure fails acceptance; else anything unverified leaves it
unverified; else it passes.

Every line says what was judged (statistic or fact), in which unit, against what bound, and where
the bound comes from.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Optional, Union

PASS, FAIL, UNVERIFIED = "pass", "fail", "could not verify"
EXIT_PASS, EXIT_FAIL, EXIT_UNVERIFIED = 0, 1, 2
_EXIT = {PASS: EXIT_PASS, FAIL: EXIT_FAIL, UNVERIFIED: EXIT_UNVERIFIED}
_WORD = {EXIT_PASS: "PASS", EXIT_FAIL: "FAIL", EXIT_UNVERIFIED: "COULD NOT VERIFY"}
# Units a number is shown bare with: the statistic's name says what is counted (gpu_count 8,
# pcie_gen_max 5); the unit stays in acceptance.json.
_BARE = ("", "count", "flag", "bitmask", "ratio", "fraction", "index", "PCIe gen")


@dataclass(frozen=True)
class Outcome:
    """One judgement: a check on records, a pin on the machine's identity, or a node fact."""

    kind: str  # "check", "pin" or "fact"
    name: str
    verdict: str  # PASS, FAIL or UNVERIFIED
    statistic: str  # what was read: busbw_gbps, p99_us, pcie_gen_max, ecc_uncorrected_volatile
    unit: str  # GB/s, us, count, PCIe gen ... ("" where nothing declares one)
    measured: Union[float, str, None]  # the deciding value (worst record, worst GPU); None when unverified
    op: str  # "<=", ">=" or "=="
    bound: Union[float, str]  # in ``unit``
    margin_pct: Optional[float]  # headroom in % of the bound: positive passes, negative fails
    detail: str  # which record or GPU decided, or why it could not be judged
    source: str  # where the threshold comes from

    @property
    def threshold(self) -> str:
        """``<= 100 us``, ``>= 296 GB/s``, ``== 5``."""
        bound = float(self.bound) if isinstance(self.bound, (int, float)) else self.bound
        return f"{self.op} {show_value(bound, self.unit)}"

    def to_dict(self) -> dict:
        return {**asdict(self), "threshold": self.threshold}


def exit_code(verdicts: Iterable[str]) -> int:
    codes = {_EXIT[v] for v in verdicts}
    if EXIT_FAIL in codes:
        return EXIT_FAIL
    return EXIT_UNVERIFIED if EXIT_UNVERIFIED in codes else EXIT_PASS


def word(code: int) -> str:
    return _WORD[code]


def show_value(value: Union[float, str, None], unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        text = str(int(value)) if value.is_integer() and abs(value) < 1e9 else f"{value:.4g}"
    else:
        text = str(value)
    return text if unit in _BARE else f"{text} {unit}"


def line(o: Outcome) -> str:
    """``PASS  allreduce 1 GiB busbw: busbw_gbps 446 GB/s >= 296 GB/s (margin +51 %; case; threshold: source)``."""
    head = f"{word(_EXIT[o.verdict]):16}  {o.kind} {o.name}: {o.statistic}"
    if o.verdict == UNVERIFIED:
        return f"{head} {o.threshold}: {o.detail} (threshold: {o.source})"
    margin = "" if o.margin_pct is None else f"margin {o.margin_pct:+.1f} %; "
    return f"{head} {show_value(o.measured, o.unit)} {o.threshold} ({margin}{o.detail}; threshold: {o.source})"
