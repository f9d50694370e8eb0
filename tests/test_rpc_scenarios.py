"""The named scenarios: Nagle + delayed ACK stalls, and coordinated omission in open-loop load."""
from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from harness.rpc import openloop
from harness.rpc.faults import FaultSpec
from harness.rpc.transports import open_endpoint


def median_rtt_ns(client, n: int, body: bytes = b"x" * 256) -> float:
    client.request(body)  # first exchange: Linux acks quickly on a fresh connection
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        client.request(body)
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples)


@pytest.mark.integration
@pytest.mark.parametrize("stalled,fixes", [
    # TCP_NODELAY, one write per message, or TCP_CORK around the two writes each remove it.
    ("tcp_nagle_split", ("tcp_nodelay_split", "tcp_nagle", "tcp_nagle_cork")),
    ("http_keepalive", ("http_keepalive_nodelay",)),
])
def test_nagle_with_delayed_ack_stalls_each_round_trip(stalled, fixes):
    rtts = {}
    for name in (stalled, *fixes):
        endpoint = open_endpoint(name)
        try:
            rtts[name] = median_rtt_ns(endpoint.client, 5)
        finally:
            endpoint.close()
    # ~40 ms (Linux delayed-ACK minimum) against well under a millisecond: a ratio of 10 is
    # generous on a loaded machine and still far from what noise alone produces.
    for fixed in fixes:
        assert rtts[stalled] / rtts[fixed] > 10, rtts
    assert rtts[stalled] > 10e6, rtts  # tens of milliseconds, not a slow microsecond path


class FakeClock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns

    def wait(self, deadline_ns: int) -> None:
        self.now_ns = max(self.now_ns, deadline_ns)


def test_open_loop_counts_a_stall_for_every_request_it_delayed():
    clock = FakeClock()
    calls = {"n": 0}

    def send(n: int) -> None:
        calls["n"] += 1
        clock.now_ns += 50_000_000 if calls["n"] == 100 else 100_000  # one 50 ms stall, else 100 us

    result = openloop.run(send, 1000, rate_hz=1000, clock=clock, wait=clock.wait)
    corrected, uncorrected = result.corrected_ns, result.uncorrected_ns
    assert (corrected >= uncorrected).all()
    # Closed-loop view: one slow request in 1000. Open-loop view: ~50 requests were due during it.
    assert np.percentile(uncorrected, 99) == pytest.approx(100_000)
    assert np.percentile(corrected, 99) > 10_000_000
    assert (corrected > 1_000_000).sum() >= 45
    assert np.percentile(corrected, 50) == pytest.approx(100_000)


def test_open_loop_coalescing_window_batches_and_charges_the_wait():
    clock = FakeClock()
    sizes = []

    def send(n: int) -> None:
        sizes.append(n)
        clock.now_ns += 10_000

    result = openloop.run(send, 64, rate_hz=10_000, clock=clock, wait=clock.wait, batch=8, window_ns=1_000_000)
    assert sizes == [8] * 8  # 8 due within the window (every 100 us) -> always full batches
    # The first of each batch waited for the other seven (700 us) plus the send.
    assert result.corrected_ns[0] == 700_000 + 10_000
    assert result.corrected_ns[7] == 10_000


@pytest.mark.integration
def test_open_loop_through_a_stalling_proxy_corrected_exceeds_uncorrected():
    endpoint = open_endpoint("tcp_nodelay", faults=FaultSpec(stall_every=100, stall_us=20000))
    try:
        body = b"x" * 256
        endpoint.client.request(body)
        result = openloop.run(lambda n: endpoint.client.request(body), 400, rate_hz=2000)
    finally:
        endpoint.close()
    corrected_p90 = np.percentile(result.corrected_ns, 90)
    uncorrected_p90 = np.percentile(result.uncorrected_ns, 90)
    # 4 stalls of 20 ms at 2 kHz delay ~40 requests each: a tenth or more of all requests.
    assert corrected_p90 > 2 * uncorrected_p90
    assert corrected_p90 > 1_000_000
