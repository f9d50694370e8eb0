"""A worker serves each round number once, in increasing order, and the gate takes a worker's reply
only for the round it asked: a round served twice would be counted as two pairs."""
from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from conftest import derived_record
from harness.core.store import RESULTS, append_record
from harness.run import rounds

NOOP = "selftest/fault_rank=0,mode=noop,world=1"


def _round(number: int) -> str:
    return json.dumps({"cmd": "round", "round": number, "cases": [{"id": NOOP, "iters": 5}], "warmup": 1}) + "\n"


def _serve(out: Path, text: str) -> tuple[int, list[dict]]:
    replies = io.StringIO()
    code = rounds.serve(out, "gloo", 30.0, io.StringIO(text), replies)
    return code, [json.loads(line) for line in replies.getvalue().splitlines()]


def _lines(path: Path) -> int:
    return len([ln for ln in path.read_text().splitlines() if ln.strip()])


@pytest.mark.parametrize("numbers, said", [
    ((0, 0), "field round: round 0 was served already; the last round served was 0"),
    ((0, 1, 1), "field round: round 1 was served already; the last round served was 1"),
    ((0, 2, 1), "field round: round 1 is out of order; the last round served was 2"),
])
def test_a_round_number_served_already_or_below_the_last_is_a_protocol_error(tmp_path, numbers, said):
    # Before: every request was served; round 0 twice appended a second record to round-000.
    out = tmp_path / "w"
    code, replies = _serve(out, "".join(_round(n) for n in numbers))
    assert code == 2, replies
    assert [r["event"] for r in replies] == ["ready"] + ["round"] * (len(numbers) - 1) + ["error"]
    assert replies[-1]["message"].startswith(said), replies[-1]["message"]
    for number in sorted(set(numbers[:-1])):
        assert _lines(out / rounds.ROUND_DIR.format(number) / RESULTS) == 1  # served once, recorded once


def test_rounds_numbered_upward_are_all_served(tmp_path):
    code, replies = _serve(tmp_path / "w", _round(0) + _round(1) + _round(3) + json.dumps({"cmd": "stop"}) + "\n")
    assert code == 0, replies
    assert [r.get("round") for r in replies if r["event"] == "round"] == [0, 1, 3]


class _Tree:
    def __init__(self, path: Path) -> None:
        self.path = path

    def env(self) -> dict:
        return dict(os.environ)


@pytest.mark.parametrize("answered", ["0", "True", "None"])
def test_the_gate_refuses_a_workers_reply_for_another_round_than_it_asked(tmp_path, answered):
    # Before: any "round" event was taken as the asked round's, and the round directory's records counted.
    from harness.gate.sides import RoundCase, WorkerSide

    script = tmp_path / "worker.py"
    script.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      "print(json.dumps({'event': 'ready', 'protocol': 1}), flush=True)\n"
                      "for line in sys.stdin:\n"
                      "    ask = json.loads(line)\n"
                      "    if ask['cmd'] == 'stop':\n"
                      "        print(json.dumps({'event': 'bye'}), flush=True); break\n"
                      f"    print(json.dumps({{'event': 'round', 'round': {answered}, 'records': []}}), flush=True)\n")
    os.chmod(script, 0o755)
    out = tmp_path / "gen-000"
    side = WorkerSide(_Tree(tmp_path), "candidate", 0, out, {"timeout_s": 5}, python=str(script))
    side.start()
    try:
        side.await_ready(30)
        # A record in the round's directory, as a worker serving an earlier round again would leave it.
        (out / "round-001").mkdir()
        append_record(out / "round-001" / RESULTS, derived_record(NOOP, range(1000, 1100)))
        result = side.run_round(1, [RoundCase(NOOP, 5)], 30)
    finally:
        side.stop()
    assert result.error.startswith(f"candidate worker answered round {answered} where round 1 was asked"), result.error
    assert result.records == {}
