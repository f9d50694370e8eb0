"""Echo over gRPC (grpcio) with generic handlers on raw bytes: no .proto, no codegen.

Methods of service ``critpath.rpc.Echo``: ``Unary`` (request -> the same bytes) and ``Bidi``
(a bidirectional stream that answers each message with the same bytes). Clients: unary on one
reused channel, a new channel per call (its own connection: TCP connect + HTTP/2 handshake each time), and one long-lived
bidirectional stream fed through a queue. Message size bounds are gRPC's own options
(``grpc.max_receive_message_length``): an oversized message fails with RESOURCE_EXHAUSTED.
"""
from __future__ import annotations

import queue
from concurrent import futures
from dataclasses import dataclass

import grpc

from harness.rpc.framing import MAX_FRAME_BYTES, ServerError
from harness.rpc.server import Control

SERVICE = "critpath.rpc.Echo"
UNARY = f"/{SERVICE}/Unary"
BIDI = f"/{SERVICE}/Bidi"
READY_TIMEOUT_S = 10.0


def _options(max_bytes: int) -> list:
    return [("grpc.max_receive_message_length", max_bytes), ("grpc.max_send_message_length", max_bytes)]


@dataclass(frozen=True)
class GrpcServerConfig:
    max_bytes: int = MAX_FRAME_BYTES
    host: str = "127.0.0.1"
    workers: int = 4


def serve(config: GrpcServerConfig, control: Control) -> None:
    counters = control.counters

    def unary(request: bytes, context) -> bytes:
        counters.add("frames")
        return request

    def bidi(requests, context):
        counters.add("connections")
        for request in requests:
            counters.add("frames")
            yield request

    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=config.workers), options=_options(config.max_bytes))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(f"{config.host}:0")
    if port == 0:
        raise RuntimeError(f"gRPC could not bind {config.host}")
    server.start()
    control.ready((config.host, port))
    control.stop.wait()
    server.stop(grace=0.5).wait(2.0)


def _channel(address: tuple, max_bytes: int) -> grpc.Channel:
    channel = grpc.insecure_channel(f"{address[0]}:{address[1]}", options=_options(max_bytes))
    grpc.channel_ready_future(channel).result(timeout=READY_TIMEOUT_S)
    return channel


def _unwrap(exc: grpc.RpcError) -> ServerError:
    return ServerError(f"gRPC {exc.code().name}: {exc.details()}")


class GrpcClient:
    """``mode``: "unary" (reused channel), "newchannel", or "bidi"."""

    def __init__(self, address: tuple, mode: str = "unary", max_bytes: int = MAX_FRAME_BYTES) -> None:
        if mode not in ("unary", "newchannel", "bidi"):
            raise ValueError(f"gRPC client mode must be unary, newchannel or bidi, got {mode!r}")
        self.address, self.mode, self.max_bytes = address, mode, max_bytes
        self.channel = None if mode == "newchannel" else _channel(address, max_bytes)
        if mode == "unary":
            self.call = self.channel.unary_unary(UNARY)
        elif mode == "bidi":
            self.outbox: queue.SimpleQueue = queue.SimpleQueue()
            self.stream = self.channel.stream_stream(BIDI)(iter(self.outbox.get, None))

    def send(self, body: bytes) -> None:
        self.outbox.put(body)

    def recv(self) -> bytes:
        try:
            return next(self.stream)
        except grpc.RpcError as exc:
            raise _unwrap(exc) from None

    def request(self, body: bytes) -> bytes:
        try:
            if self.mode == "unary":
                return self.call(body)
            if self.mode == "bidi":
                self.outbox.put(body)
                return next(self.stream)
            # A local subchannel pool, or the new channel would reuse the last one's connection.
            options = _options(self.max_bytes) + [("grpc.use_local_subchannel_pool", 1)]
            with grpc.insecure_channel(f"{self.address[0]}:{self.address[1]}", options=options) as channel:
                return channel.unary_unary(UNARY)(body, wait_for_ready=True, timeout=READY_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise _unwrap(exc) from None

    def close(self) -> None:
        if self.mode == "bidi":
            self.outbox.put(None)
            self.stream.cancel()
        if self.channel is not None:
            self.channel.close()
