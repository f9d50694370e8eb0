"""Echo over a byte stream: TCP on 127.0.0.1 or a Unix domain socket, length-prefixed frames.

Server: one thread per connection (blocking I/O, the shape of most Python control-plane
servers), so a connection that sends garbage or vanishes is answered and closed while the others
keep being served. Client: blocking socket, and the three TCP choices the family compares:

- ``nodelay``: TCP_NODELAY on (Nagle off) or off;
- ``split_write``: header and body as two ``send`` calls (write-write-read) instead of one;
- ``cork``: the same two writes between TCP_CORK on and off, so the kernel sends one segment;
- ``new_connection``: connect, one request, close, instead of a kept connection.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

from harness.rpc.framing import (KIND_ERROR, KIND_REPLY, MAX_FRAME_BYTES, ConnectionClosed, FrameReader, MalformedFrame,
                                 OversizedFrame, encode, header)
from harness.rpc.server import POLL_S, Control

LOOPBACK = "127.0.0.1"
FLUSH_EVERY = 256  # frames counted locally, published in batches (a shared lock per frame costs ~1 us)


# Bounds a server keeps whatever its peers do: connections open at once (each costs a thread) and
# how long a peer may stay silent. A timed case keeps one to a few connections busy.
MAX_CONNECTIONS = 64
IDLE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class StreamServerConfig:
    family: str = "tcp"  # "tcp" or "unix"
    path: str = ""  # Unix socket path (family "unix")
    host: str = LOOPBACK
    nodelay: bool = True
    max_frame_bytes: int = MAX_FRAME_BYTES
    max_connections: int = MAX_CONNECTIONS
    idle_timeout_s: float = IDLE_TIMEOUT_S


def listen(config: StreamServerConfig) -> tuple[socket.socket, Any]:
    if config.family == "tcp":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((config.host, 0))
    elif config.family == "unix":
        if not config.path:
            raise ValueError("a Unix socket server needs a path")
        if os.path.exists(config.path):
            os.unlink(config.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(config.path)
    else:
        raise ValueError(f"stream family must be tcp or unix, got {config.family!r}")
    sock.listen(128)
    sock.settimeout(POLL_S)  # accept wakes up to notice the stop event
    return sock, sock.getsockname()


def set_nodelay(sock: socket.socket, on: bool) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if on else 0)


class ConnectionSlots:
    """At most ``limit`` connections served at once; the rest are refused and counted."""

    def __init__(self, limit: int = MAX_CONNECTIONS, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self._free = threading.BoundedSemaphore(limit)
        self.idle_timeout_s = idle_timeout_s

    def serve(self, conn: socket.socket, control: Control, target, *args) -> Optional[threading.Thread]:
        """Serve ``conn`` with ``target(conn, *args)`` in a thread of its own, or refuse it."""
        if not self._free.acquire(blocking=False):
            control.counters.add("refused")
            conn.close()
            return None
        conn.settimeout(self.idle_timeout_s)

        def run() -> None:
            try:
                target(conn, *args)
            finally:
                self._free.release()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread


def serve_connection(conn: socket.socket, config: StreamServerConfig, control: Control) -> None:
    counters = control.counters
    reader = FrameReader(conn, config.max_frame_bytes)
    sendall = conn.sendall
    served = 0
    try:
        while True:
            try:
                frame = reader.read()
            except MalformedFrame as exc:
                counters.add("malformed")
                _send_error(conn, str(exc))
                return
            except OversizedFrame as exc:
                counters.add("oversized")
                _send_error(conn, str(exc))
                return
            except ConnectionClosed as exc:
                counters.add("truncated" if exc.mid_frame else "closed")
                return
            sendall(encode(frame.body, KIND_REPLY))
            served += 1
            if served == FLUSH_EVERY:
                counters.add("frames", served)
                served = 0
    except TimeoutError:  # socket.timeout: the peer went silent past IDLE_TIMEOUT_S
        counters.add("idle")
    except OSError:
        counters.add("errors")
    finally:
        if served:
            counters.add("frames", served)
        conn.close()


def _send_error(conn: socket.socket, message: str) -> None:
    try:
        conn.sendall(encode(message.encode(), KIND_ERROR))
    except OSError:
        pass


def serve(config: StreamServerConfig, control: Control) -> None:
    sock, address = listen(config)
    control.ready(address)
    threads: list[threading.Thread] = []
    slots = ConnectionSlots(config.max_connections, config.idle_timeout_s)
    try:
        while not control.stopping():
            try:
                conn, _ = sock.accept()
            except socket.timeout:
                continue
            set_nodelay(conn, config.nodelay)
            control.counters.add("connections")
            thread = slots.serve(conn, control, serve_connection, config, control)
            threads = [t for t in threads if t.is_alive()] + ([thread] if thread else [])
    finally:
        sock.close()
        # Let connections that are closing publish their counters; ones still open are cut off.
        deadline = time.monotonic() + 0.2
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if config.family == "unix" and os.path.exists(config.path):
            os.unlink(config.path)


@dataclass(frozen=True)
class StreamClientOptions:
    nodelay: bool = True
    split_write: bool = False
    new_connection: bool = False
    max_frame_bytes: int = MAX_FRAME_BYTES
    cork: bool = False  # with split_write: TCP_CORK around the two writes (Linux), one segment out


class StreamClient:
    """Blocking client. ``request`` is one round trip; ``send``/``recv`` allow several in flight."""

    def __init__(self, address: Any, options: StreamClientOptions = StreamClientOptions()) -> None:
        self.address = address
        self.options = options
        self.sock: Optional[socket.socket] = None
        self.reader: Optional[FrameReader] = None
        if not options.new_connection:
            self.connect()

    def connect(self) -> None:
        family = socket.AF_UNIX if isinstance(self.address, str) else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.connect(self.address)
        set_nodelay(sock, self.options.nodelay)
        self.sock = sock
        self.reader = FrameReader(sock, self.options.max_frame_bytes)

    def send(self, body: bytes) -> None:
        if self.options.cork:
            sock = self.sock
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            sock.sendall(header(len(body)))
            sock.sendall(body)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)  # uncork: flush now
        elif self.options.split_write:
            self.sock.sendall(header(len(body)))
            self.sock.sendall(body)
        else:
            self.sock.sendall(encode(body))

    def recv(self) -> bytes:
        return self.reader.read_reply()

    def request(self, body: bytes) -> bytes:
        if self.options.new_connection:
            self.connect()
            try:
                self.send(body)
                return self.reader.read_reply()
            finally:
                self.close()
        self.send(body)
        return self.reader.read_reply()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
