"""Request traces: the Azure LLM inference traces 2023 (shipped with the package) and a
synthetic generator.

A trace is what the continuous-batching simulator needs of each request: when it arrives, how
many prompt tokens it brings, how many tokens it generates. The Azure files (CC-BY 4.0, see
``harness/data/azure_llm_2023/``) have the columns ``TIMESTAMP,ContextTokens,GeneratedTokens``.
"""
from __future__ import annotations

import csv
import io
import datetime as _dt
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Union

import numpy as np

from harness.core.inputfile import read_bounded
from harness.core.options import UnknownName

AZURE_TRACES = {"azure_code": "AzureLLMInferenceTrace_code.csv", "azure_conv": "AzureLLMInferenceTrace_conv.csv"}
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class TraceFormatError(ValueError):
    """A malformed trace file; the message names the file and the line."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}: line {line}: {message}")
        self.path, self.line = path, line


@dataclass(frozen=True)
class Trace:
    name: str
    arrival_s: np.ndarray  # seconds since the first request, non-decreasing
    prompt_tokens: np.ndarray  # int64, >= 1
    output_tokens: np.ndarray  # int64, >= 1

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def head(self, n: int) -> "Trace":
        """The first ``n`` requests (quick profiles replay a prefix)."""
        return Trace(f"{self.name}[:{n}]", self.arrival_s[:n], self.prompt_tokens[:n], self.output_tokens[:n])


def _parse_timestamp(text: str) -> float:
    # "2023-11-16 18:17:03.9799600": seven fractional digits, which datetime does not take.
    head, dot, frac = text.strip().partition(".")
    stamp = _dt.datetime.strptime(head, "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.timezone.utc)
    fraction = float("0." + frac) if dot else 0.0
    if dot and not frac.isdigit():
        raise ValueError(f"bad fractional seconds {frac!r}")
    return stamp.timestamp() + fraction


MAX_TOKENS = 10**9  # no request holds more: a bigger count is a corrupt field, not a request
MAX_REQUESTS = 1_000_000  # replayed at once (a prefix, or a synthetic trace): the Azure traces hold about 20,000 each
# Azure's week-long 2023 traces are about 20 MB each; the shipped hour is under 1 MB.
MAX_TRACE_BYTES = 256 << 20


def _positive_int(text: str, column: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise ValueError(f"{column} must be an integer, got {text!r}") from None
    if not 1 <= value <= MAX_TOKENS:
        raise ValueError(f"{column} must be in [1, {MAX_TOKENS}], got {text[:40]}")
    return value


def load_csv(path: Union[str, Path], name: str | None = None) -> Trace:
    """Read an Azure-format CSV; any malformed line raises ``TraceFormatError`` with its number."""
    path = Path(path)
    where = str(path)
    times: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    raw = read_bounded(path, "trace", MAX_TRACE_BYTES)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(where, raw[: exc.start].count(b"\n") + 1,
                               f"not UTF-8 (byte 0x{raw[exc.start]:02x})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        _read_rows(reader, where, times, prompts, outputs)
    except csv.Error as exc:
        raise TraceFormatError(where, reader.line_num, f"not CSV: {exc}") from None
    if not times:
        raise TraceFormatError(where, 2, "no requests after the header")
    arrival = np.asarray(times, dtype=np.float64)
    return Trace(name or path.stem, arrival - arrival[0], np.asarray(prompts, np.int64), np.asarray(outputs, np.int64))


def _read_rows(reader, where: str, times: list, prompts: list, outputs: list) -> None:
    """The rows of an Azure-format CSV into the three lists; a malformed one is a TraceFormatError."""
    try:
        header = next(reader)
    except StopIteration:
        raise TraceFormatError(where, 1, "empty file; expected header " + ",".join(AZURE_COLUMNS)) from None
    if tuple(h.strip() for h in header) != AZURE_COLUMNS:
        raise TraceFormatError(where, 1, f"header is {','.join(header)!r}, expected {','.join(AZURE_COLUMNS)!r}")
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != 3:
            raise TraceFormatError(where, line, f"expected 3 fields, got {len(row)}: {row!r}")
        try:
            t = _parse_timestamp(row[0])
        except (ValueError, OverflowError) as exc:
            raise TraceFormatError(where, line, f"TIMESTAMP: {exc}") from None
        try:
            p = _positive_int(row[1].strip(), "ContextTokens")
            g = _positive_int(row[2].strip(), "GeneratedTokens")
        except ValueError as exc:
            raise TraceFormatError(where, line, str(exc)) from None
        if times and t < times[-1]:
            raise TraceFormatError(where, line, "TIMESTAMP goes back in time; the trace must be sorted")
        times.append(t)
        prompts.append(p)
        outputs.append(g)


def load_azure(name: str) -> Trace:
    """One of the shipped Azure traces: ``azure_code`` or ``azure_conv``."""
    try:
        filename = AZURE_TRACES[name]
    except KeyError:
        raise UnknownName(f"unknown trace {name!r}; known: {', '.join(AZURE_TRACES)}") from None
    ref = resources.files("harness").joinpath("data/azure_llm_2023", filename)
    with resources.as_file(ref) as path:
        return load_csv(path, name)


def synthetic(n_requests: int, rate_per_s: float, prompt_median: float = 1000.0, prompt_sigma: float = 1.0,
              output_median: float = 150.0, output_sigma: float = 1.0, max_tokens: int = 16384,
              seed: int = 0) -> Trace:
    """Poisson arrivals at ``rate_per_s``; log-normal prompt and output lengths (median, sigma of
    the log), clipped to [1, max_tokens]."""
    if n_requests < 1 or rate_per_s <= 0:
        raise ValueError("need n_requests >= 1 and rate_per_s > 0")
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate_per_s, n_requests))
    arrival -= arrival[0]
    prompt = np.clip(np.rint(rng.lognormal(np.log(prompt_median), prompt_sigma, n_requests)), 1, max_tokens)
    output = np.clip(np.rint(rng.lognormal(np.log(output_median), output_sigma, n_requests)), 1, max_tokens)
    return Trace(f"synthetic_seed{seed}", arrival, prompt.astype(np.int64), output.astype(np.int64))
