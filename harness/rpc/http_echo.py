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

PATH = "/echo"


@dataclass(frozen=True)
class HttpServerConfig:
    nodelay: bool = False
    max_bytes: int = MAX_FRAME_BYTES
    host: str = "127.0.0.1"


class EchoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

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


def serve(config: HttpServerConfig, control: Control) -> None:
    handler = type("EchoHandlerConfigured", (EchoHandler,), {"disable_nagle_algorithm": config.nodelay})
    server = ThreadingHTTPServer((config.host, 0), handler)
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
