"""Echo over HTTP/1.1 with the standard library on both ends.

Server: ``http.server.ThreadingHTTPServer`` with a ``BaseHTTPRequestHandler`` as it comes,
except ``protocol_version = "HTTP/1.1"`` (the documented switch for keep-alive; the default
HTTP/1.0 closes every connection). ``nodelay=False`` leaves the handler's Nagle setting as
shipped: the handler writes the status line and headers in one ``send`` and the body in a
second, and with Nagle on that second write waits for the client's delayed ACK (~40 ms on Linux).
``nodelay=True`` sets the handler's own ``disable_nagle_algorithm`` switch.

Client: ``http.client.HTTPConnection`` (which sets TCP_NODELAY on its side), kept across
requests (keep-alive) or a new one per request. Bodies over the bound get 413 and a closed
connection; requests the stdlib cannot parse get 400; both are counted.
"""
from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness.rpc.framing import MAX_FRAME_BYTES, ServerError
from harness.rpc.server import POLL_S, Control
from harness.rpc.stream import IDLE_TIMEOUT_S, MAX_CONNECTIONS

PATH = "/echo"


@dataclass(frozen=True)
class HttpServerConfig:
    nodelay: bool = False
    max_bytes: int = MAX_FRAME_BYTES
    host: str = "127.0.0.1"
    max_connections: int = MAX_CONNECTIONS
    idle_timeout_s: float = IDLE_TIMEOUT_S


class EchoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S  # a silent keep-alive peer is cut off (set per server from its config)

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        control: Control = self.server.control  # type: ignore[attr-defined]
        limit: int = self.server.max_bytes  # type: ignore[attr-defined]
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.send_error(411, "Content-Length required")
            self.close_connection = True
            return
        if length < 0 or length > limit:
            self.send_error(413, f"body of {length} bytes exceeds the maximum of {limit} bytes")
            self.close_connection = True
            return
        body = self.rfile.read(length)
        if len(body) < length:  # the client went away inside the body: no answer, and it counts
            control.counters.add("truncated")
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        control.counters.add("frames")

    def send_error(self, code, message=None, explain=None) -> None:
        counters = self.server.control.counters  # type: ignore[attr-defined]
        if code == 413:
            counters.add("oversized")
        elif code in (400, 411, 501, 505):
            counters.add("malformed")
        super().send_error(code, message, explain)

    def log_message(self, format, *args) -> None:  # noqa: A002 - stdlib signature
        pass  # a line on stderr per request would be the benchmark


class _BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, as the stdlib server does, but at most MAX_CONNECTIONS at once."""

    def __init__(self, address, handler, max_connections: int = MAX_CONNECTIONS) -> None:
        super().__init__(address, handler)
        self._free = threading.BoundedSemaphore(max_connections)

    def process_request(self, request, client_address) -> None:
        if not self._free.acquire(blocking=False):
            self.control.counters.add("refused")  # type: ignore[attr-defined]
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._free.release()


def serve(config: HttpServerConfig, control: Control) -> None:
    handler = type("EchoHandlerConfigured", (EchoHandler,), {"disable_nagle_algorithm": config.nodelay,
                                                           "timeout": config.idle_timeout_s})
    server = _BoundedHTTPServer((config.host, 0), handler, config.max_connections)
    server.daemon_threads = True
    server.control = control  # type: ignore[attr-defined]
    server.max_bytes = config.max_bytes  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True)
    thread.start()
    control.ready(server.server_address[:2])
    control.stop.wait()
    server.shutdown()
    server.server_close()


class HttpClient:
    def __init__(self, address: tuple, keep_alive: bool = True) -> None:
        self.host, self.port = address
        self.keep_alive = keep_alive
        self.conn = http.client.HTTPConnection(self.host, self.port) if keep_alive else None
        self.headers = {"Content-Type": "application/octet-stream"}

    def request(self, body: bytes) -> bytes:
        conn = self.conn or http.client.HTTPConnection(self.host, self.port)
        try:
            conn.request("POST", PATH, body=body, headers=self.headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            if self.conn is None:
                conn.close()
        if resp.status != 200:
            raise ServerError(f"HTTP {resp.status}: {data[:200]!r}")
        return data

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
