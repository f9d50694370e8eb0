"""Every transport round-trips bytes exactly through a real server process, and stops cleanly."""
from __future__ import annotations

import pytest

from harness.rpc.codecs import every_byte_value, pattern_bytes
from harness.rpc.framing import MAX_FRAME_BYTES
from harness.rpc.transports import TRANSPORTS, open_endpoint

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", list(TRANSPORTS))
def test_round_trip_exact(name):
    endpoint = open_endpoint(name)
    try:
        payloads = [pattern_bytes(64), every_byte_value(512), pattern_bytes(4096, 3), pattern_bytes(MAX_FRAME_BYTES, 9)]
        for body in payloads:
            assert endpoint.client.request(body) == body
        if endpoint.transport.pipelines:
            bodies = [pattern_bytes(256, salt) for salt in range(4)]
            for body in bodies:
                endpoint.client.send(body)
            assert [endpoint.client.recv() for _ in bodies] == bodies
    finally:
        how = endpoint.close()
    assert how["server"] == "clean", how
    counters = endpoint.counters()["server"]
    assert counters["malformed"] == counters["oversized"] == counters["errors"] == 0


def test_chain_of_two_hops_round_trips():
    endpoint = open_endpoint("uds", hops=2)
    try:
        assert len(endpoint.proxies) == 2
        body = every_byte_value(1024)
        assert endpoint.client.request(body) == body
    finally:
        endpoint.close()
    assert all(c["frames"] >= 1 for c in endpoint.counters().values())
