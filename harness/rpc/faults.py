"""A fault-injection proxy on loopback: known slowdowns and failures, for the gate and the tests.

It sits between a client and a framed stream server (TCP or Unix socket), forwards one request
frame at a time and its reply, and on the way can add:

- ``delay_us``: fixed latency added to every round trip (applied once, before forwarding the
  request);
- ``jitter_us``: plus a uniform random extra in [0, jitter_us);
- ``stall_every`` / ``stall_us``: every Nth request of a connection waits ``stall_us`` more (a GC
  pause, a page fault storm, a noisy neighbour);
- ``drop_rate``: each request closes both connections with this probability instead of being
  forwarded (a crashing gateway, a load balancer resetting idle connections).

Random choices come from ``random.Random(seed + connection index)``, so a test can predict
exactly which requests are dropped. With every knob at zero the proxy is a plain synchronous
forwarding hop (the family's ``hops`` chain: client -> proxy -> proxy -> server).
Counters: ``frames`` forwarded, ``stalls`` injected, ``drops`` done.
"""
from __future__ import annotations

import random
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from harness.rpc.framing import (MAX_FRAME_BYTES, ConnectionClosed, FrameError, FrameReader, MalformedFrame,
                                 OversizedFrame, encode)
from harness.rpc.server import Control, ServerProcess
from harness.rpc.stream import ConnectionSlots, StreamServerConfig, _send_error, listen, set_nodelay


@dataclass(frozen=True)
class FaultSpec:
    delay_us: int = 0
    jitter_us: int = 0
    stall_every: int = 0
    stall_us: int = 0
    drop_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("delay_us", "jitter_us", "stall_every", "stall_us"):
            if getattr(self, name) < 0:
                raise ValueError(f"FaultSpec.{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.drop_rate <= 1.0:
            raise ValueError(f"FaultSpec.drop_rate must be in [0, 1], got {self.drop_rate}")

    def extra_s(self, index: int, rng: random.Random) -> float:
        """Delay for the request with 1-based ``index`` on a connection."""
        extra_us = self.delay_us
        if self.jitter_us:
            extra_us += rng.random() * self.jitter_us
        if self.stall_every and index % self.stall_every == 0:
            extra_us += self.stall_us
        return extra_us / 1e6


@dataclass(frozen=True)
class ProxyConfig:
    upstream: Any  # (host, port) or a Unix socket path
    faults: FaultSpec = field(default_factory=FaultSpec)
    listen: StreamServerConfig = field(default_factory=StreamServerConfig)
    max_frame_bytes: int = MAX_FRAME_BYTES


def _connect(address: Any) -> socket.socket:
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.connect(address)
    set_nodelay(sock, True)
    return sock


def _relay(conn: socket.socket, index: int, config: ProxyConfig, control: Control) -> None:
    counters, faults = control.counters, config.faults
    rng = random.Random(faults.seed + index)
    upstream = None
    try:
        upstream = _connect(config.upstream)
        from_client = FrameReader(conn, config.max_frame_bytes)
        from_server = FrameReader(upstream, config.max_frame_bytes)
        n = 0
        while True:
            try:
                frame = from_client.read()
            except (MalformedFrame, OversizedFrame) as exc:
                counters.add("malformed" if isinstance(exc, MalformedFrame) else "oversized")
                _send_error(conn, str(exc))
                return
            except ConnectionClosed as exc:
                counters.add("truncated" if exc.mid_frame else "closed")
                return
            n += 1
            # Draw in a fixed order (drop, then jitter) so a seed gives the same schedule always.
            if faults.drop_rate and rng.random() < faults.drop_rate:
                counters.add("drops")
                return
            delay_s = faults.extra_s(n, rng)
            if faults.stall_every and n % faults.stall_every == 0:
                counters.add("stalls")
            if delay_s > 0:
                time.sleep(delay_s)
            upstream.sendall(encode(frame.body, frame.kind))
            reply = from_server.read()
            conn.sendall(encode(reply.body, reply.kind))
            counters.add("frames")
    except (OSError, FrameError):
        counters.add("errors")
    finally:
        conn.close()
        if upstream is not None:
            upstream.close()


def serve(config: ProxyConfig, control: Control) -> None:
    sock, address = listen(config.listen)
    control.ready(address)
    index = 0
    slots = ConnectionSlots(config.listen.max_connections, config.listen.idle_timeout_s)
    try:
        while not control.stopping():
            try:
                conn, _ = sock.accept()
            except socket.timeout:
                continue
            set_nodelay(conn, True)
            control.counters.add("connections")
            slots.serve(conn, control, _relay, index, config, control)
            index += 1
    finally:
        sock.close()


def start_proxy(upstream: Any, faults: FaultSpec = FaultSpec(), listen_config: StreamServerConfig = StreamServerConfig()) -> ServerProcess:
    """Start a proxy in its own process in front of ``upstream``; its ``address`` is where to
    connect. Stop it with ``.stop()`` (bounded)."""
    proxy = ServerProcess("harness.rpc.faults:serve", ProxyConfig(upstream, faults, listen_config))
    proxy.start()
    return proxy
