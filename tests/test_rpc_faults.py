"""Bad frames, vanished clients, killed servers and the fault-injection proxy, as docs/rpc.md says."""
from __future__ import annotations

import random
import socket
import statistics
import time

import pytest

from harness.rpc.faults import FaultSpec, start_proxy
from harness.rpc.framing import (HEADER, KIND_ERROR, MAGIC, MAX_FRAME_BYTES, VERSION, ConnectionClosed, FrameReader,
                                 RpcError, ServerError, encode)
from harness.rpc.server import ServerGone, ServerProcess, ServerStartError
from harness.rpc.shm import SLOT_HEADER, ShmClient
from harness.rpc.stream import StreamClient, StreamServerConfig
from harness.rpc.transports import open_endpoint

pytestmark = pytest.mark.integration


def wait_for(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture(scope="module")
def tcp_server():
    with ServerProcess("harness.rpc.stream:serve", StreamServerConfig()) as server:
        yield server


def raw_connect(server) -> socket.socket:
    return socket.create_connection(server.address, timeout=5)


def test_malformed_frame_gets_error_reply_and_close_others_served(tcp_server):
    good = StreamClient(tcp_server.address)
    before = tcp_server.counters.snapshot()["malformed"]
    bad = raw_connect(tcp_server)
    bad.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    reader = FrameReader(bad)
    frame = reader.read()
    assert frame.kind == KIND_ERROR and b"bad frame header" in frame.body
    with pytest.raises(ConnectionClosed):
        reader.read()  # the server closed this connection
    bad.close()
    assert wait_for(lambda: tcp_server.counters.snapshot()["malformed"] == before + 1)
    assert good.request(b"still here") == b"still here"
    good.close()


def test_oversized_frame_gets_error_reply_and_is_counted(tcp_server):
    before = tcp_server.counters.snapshot()["oversized"]
    sock = raw_connect(tcp_server)
    sock.sendall(HEADER.pack(MAGIC, VERSION, 0, MAX_FRAME_BYTES + 1))
    with pytest.raises(ServerError, match="exceeds the maximum"):
        FrameReader(sock).read_reply()
    sock.close()
    assert wait_for(lambda: tcp_server.counters.snapshot()["oversized"] == before + 1)
    client = StreamClient(tcp_server.address)
    assert client.request(b"x" * MAX_FRAME_BYTES) == b"x" * MAX_FRAME_BYTES  # the limit itself is fine
    client.close()


def test_client_vanishing_mid_frame_is_counted_server_keeps_serving(tcp_server):
    before = tcp_server.counters.snapshot()["truncated"]
    sock = raw_connect(tcp_server)
    sock.sendall(encode(b"x" * 100)[:50])
    sock.close()
    assert wait_for(lambda: tcp_server.counters.snapshot()["truncated"] == before + 1)
    client = StreamClient(tcp_server.address)
    assert client.request(b"after") == b"after"
    client.close()


def test_http_oversized_body_gets_413_and_is_counted():
    endpoint = open_endpoint("http_keepalive_nodelay")
    try:
        with pytest.raises(ServerError, match="HTTP 413"):
            endpoint.client.request(b"x" * (MAX_FRAME_BYTES + 1))
        assert endpoint.counters()["server"]["oversized"] == 1
    finally:
        endpoint.close()


def test_server_killed_mid_run_raises_instead_of_hanging():
    endpoint = open_endpoint("tcp_nodelay")
    try:
        assert endpoint.client.request(b"ping") == b"ping"
        endpoint.server.process.kill()
        endpoint.server.process.join(5)
        t0 = time.monotonic()
        with pytest.raises((RpcError, OSError)):
            endpoint.client.request(b"ping")
        assert time.monotonic() - t0 < 5
    finally:
        endpoint.close()
    assert endpoint.server.stopped_by in ("clean", "terminated", "killed")


def test_shm_server_killed_mid_run_raises_server_gone():
    endpoint = open_endpoint("shm")
    try:
        assert endpoint.client.request(b"ping") == b"ping"
        endpoint.server.process.kill()
        endpoint.server.process.join(5)
        with pytest.raises(ServerGone):
            endpoint.client.request(b"ping")
    finally:
        endpoint.close()


def test_shm_corrupt_slot_gets_error_reply_and_ring_stays_in_step():
    client = ShmClient(max_bytes=1024)
    with ServerProcess("harness.rpc.shm:serve", client.config()) as server:
        client.on_idle = server.check_alive
        ring = client.requests
        # Hand-write a slot whose length field exceeds the bound (as a buggy producer would).
        slot = ring.slots_at + (ring.head % ring.nslots) * ring.slot_bytes
        SLOT_HEADER.pack_into(ring.buf, slot, 10_000, 0)
        ring.head += 1
        ring.buf[ring.head_at : ring.head_at + 8] = ring.head.to_bytes(8, "little")
        with pytest.raises(ServerError, match="exceeds the maximum"):
            client.recv()
        assert client.request(b"next") == b"next"
        assert server.counters.snapshot()["oversized"] == 1
    client.close()


def test_server_that_fails_to_start_says_why():
    with pytest.raises(ServerStartError, match="needs a path"):
        ServerProcess("harness.rpc.stream:serve", StreamServerConfig(family="unix", path="")).start()


def test_bounded_stop_of_a_server_ignoring_the_stop_event():
    server = ServerProcess("harness.rpc.stream:serve", StreamServerConfig())
    server.start()
    server.process.terminate = lambda: None  # pretend SIGTERM is ignored: SIGKILL must follow
    import os, signal
    os.kill(server.pid, signal.SIGSTOP)  # a frozen server never sees the stop event
    t0 = time.monotonic()
    how = server.stop(timeout_s=0.3)
    assert how == "killed" and time.monotonic() - t0 < 3.5


# ---------------------------------------------------------------- fault-injection proxy

def median_rtt_us(client, n=15, body=b"x" * 256) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        assert client.request(body) == body
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(samples)


def test_proxy_adds_its_delay(tcp_server):
    delay_us = 5000
    plain = start_proxy(tcp_server.address)
    slow = start_proxy(tcp_server.address, FaultSpec(delay_us=delay_us))
    try:
        a, b = StreamClient(plain.address), StreamClient(slow.address)
        base, delayed = median_rtt_us(a), median_rtt_us(b)
        a.close(), b.close()
    finally:
        plain.stop(), slow.stop()
    # time.sleep never returns early, so the lower bound is firm; the upper one is generous.
    assert delayed >= delay_us
    assert delay_us * 0.8 < delayed - base < delay_us * 10


def test_proxy_stalls_every_nth_request(tcp_server):
    proxy = start_proxy(tcp_server.address, FaultSpec(stall_every=5, stall_us=20000))
    try:
        client = StreamClient(proxy.address)
        samples = []
        for _ in range(10):
            t0 = time.perf_counter_ns()
            client.request(b"abc")
            samples.append(time.perf_counter_ns() - t0)
        client.close()
        assert wait_for(lambda: proxy.counters.snapshot()["stalls"] == 2)
    finally:
        proxy.stop()
    slowest = sorted(range(10), key=lambda i: samples[i])[-2:]
    assert sorted(slowest) == [4, 9]  # the 5th and the 10th requests
    assert min(samples[4], samples[9]) >= 20_000_000


def test_proxy_drops_connections_as_its_seed_predicts(tcp_server):
    spec = FaultSpec(drop_rate=0.3, seed=11)
    proxy = start_proxy(tcp_server.address, spec)
    try:
        # Connection index 0 uses Random(seed + 0): one draw per request decides a drop.
        rng = random.Random(spec.seed)
        expected_first_drop = next(i for i in range(1000) if rng.random() < spec.drop_rate)
        client = StreamClient(proxy.address)
        served = 0
        with pytest.raises(ConnectionClosed):
            while True:
                client.request(b"abc")
                served += 1
        client.close()
        assert served == expected_first_drop
        assert wait_for(lambda: proxy.counters.snapshot()["drops"] == 1)
    finally:
        proxy.stop()


def test_fault_spec_rejects_bad_values():
    with pytest.raises(ValueError, match="drop_rate"):
        FaultSpec(drop_rate=1.5)
    with pytest.raises(ValueError, match="delay_us"):
        FaultSpec(delay_us=-1)


def test_servers_bound_their_connections_and_cut_off_silent_peers():
    from harness.rpc.http_echo import HttpServerConfig

    config = StreamServerConfig(max_connections=4, idle_timeout_s=0.5)
    with ServerProcess("harness.rpc.stream:serve", config) as server:
        peers = [socket.create_connection(server.address, timeout=5) for _ in range(8)]
        assert wait_for(lambda: server.counters.snapshot()["refused"] == 4)  # the fifth and later
        assert wait_for(lambda: server.counters.snapshot()["idle"] == 4)  # the four served, silent
        for peer in peers:
            assert peer.recv(1) == b""  # every one was closed by the server
            peer.close()
    # HTTP: a body cut short by a disconnect is counted, and not answered with 200.
    with ServerProcess("harness.rpc.http_echo:serve", HttpServerConfig(idle_timeout_s=0.5)) as http:
        peer = socket.create_connection(tuple(http.address), timeout=5)
        peer.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        peer.shutdown(socket.SHUT_WR)
        assert peer.recv(100) == b""
        peer.close()
        assert wait_for(lambda: http.counters.snapshot()["truncated"] == 1)
        assert http.counters.snapshot()["frames"] == 0
