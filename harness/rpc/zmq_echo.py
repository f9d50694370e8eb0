"""Echo over ZeroMQ (pyzmq): REQ/REP and DEALER/ROUTER, over tcp (127.0.0.1) or ipc.

REQ/REP enforces strict send/receive alternation; DEALER/ROUTER does not (so it can pipeline).
The size bound is libzmq's ``MAXMSGSIZE`` on the server socket: a peer that sends a bigger
message is disconnected by libzmq itself (not counted by the harness; ZeroMQ does not say).
Clients set ``RCVTIMEO`` so a dead server gives an error instead of a wait forever (ZeroMQ
reconnects silently and would otherwise block).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import zmq

from harness.rpc.framing import MAX_FRAME_BYTES, RpcError
from harness.rpc.server import POLL_S, Control

RECV_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class ZmqServerConfig:
    pattern: str = "reqrep"  # or "dealer"
    endpoint: str = "tcp://127.0.0.1:*"  # or ipc:///path
    max_bytes: int = MAX_FRAME_BYTES


def serve(config: ZmqServerConfig, control: Control) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REP if config.pattern == "reqrep" else zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, config.max_bytes)
    sock.bind(config.endpoint)
    control.ready(sock.getsockopt_string(zmq.LAST_ENDPOINT))
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    served = 0
    try:
        while not control.stopping():
            if not poller.poll(POLL_S * 1000):
                continue
            # Drain what is there before polling again: one poll per burst, not per message.
            while True:
                try:
                    parts = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                sock.send_multipart(parts)
                served += 1
                if served == 256:
                    control.counters.add("frames", served)
                    served = 0
    finally:
        control.counters.add("frames", served)
        sock.close(0)
        ctx.term()
        if config.endpoint.startswith("ipc://"):
            path = config.endpoint[len("ipc://"):]
            if os.path.exists(path):
                os.unlink(path)


class ZmqClient:
    def __init__(self, endpoint: str, pattern: str = "reqrep") -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.REQ if pattern == "reqrep" else zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
        self.sock.connect(endpoint)

    def send(self, body: bytes) -> None:
        self.sock.send(body, copy=True)

    def recv(self) -> bytes:
        try:
            return self.sock.recv(copy=True)
        except zmq.Again:
            raise RpcError(f"no reply within {RECV_TIMEOUT_MS} ms (server gone or message dropped)") from None

    def request(self, body: bytes) -> bytes:
        self.sock.send(body, copy=True)
        return self.recv()

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()
