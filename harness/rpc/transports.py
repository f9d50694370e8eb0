"""Transport names the family uses, and how to open one: servers (own processes) plus a client.

An ``Endpoint`` is what a case holds between setup and teardown. Opening one starts the server
(and any proxies in front of it), waits until each reports ready, then connects the client;
closing it closes the client and stops every process with a bounded shutdown, last started first.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from harness.rpc.faults import FaultSpec, ProxyConfig
from harness.rpc.framing import MAX_FRAME_BYTES, RpcError
from harness.rpc.http_echo import HttpClient, HttpServerConfig
from harness.rpc.server import ServerProcess
from harness.rpc.shm import ShmClient
from harness.rpc.stream import StreamClient, StreamClientOptions, StreamServerConfig


@dataclass(frozen=True)
class TransportInfo:
    name: str
    doc: str
    kind: str  # stream, shm, http, grpc, zmq
    pipelines: bool  # the client has send/recv and may keep several requests in flight
    proxiable: bool  # framed stream: hops and fault injection can sit in front of it


def _t(name: str, doc: str, kind: str, pipelines: bool, proxiable: bool = False) -> TransportInfo:
    return TransportInfo(name, doc, kind, pipelines, proxiable)


TRANSPORTS: dict[str, TransportInfo] = {t.name: t for t in (
    _t("tcp_nodelay", "TCP, TCP_NODELAY on, one write per message, kept connection", "stream", True, True),
    _t("tcp_nagle", "TCP, Nagle on, one write per message, kept connection", "stream", True, True),
    _t("tcp_nodelay_split", "TCP, TCP_NODELAY on, header then body (write-write-read)", "stream", True, True),
    _t("tcp_nagle_split", "TCP, Nagle on, header then body (write-write-read): the delayed-ACK stall", "stream", True, True),
    _t("tcp_nagle_cork", "TCP, Nagle on, header then body inside TCP_CORK: one segment, no stall", "stream", True, True),
    _t("tcp_nodelay_newconn", "TCP, TCP_NODELAY on, a new connection per request", "stream", False, True),
    _t("uds", "Unix domain stream socket, kept connection", "stream", True, True),
    _t("shm", "shared-memory ring between processes, busy-poll with bounded back-off", "shm", True),
    _t("http_keepalive", "HTTP/1.1 stdlib server as it comes (Nagle on), keep-alive", "http", False),
    _t("http_keepalive_nodelay", "HTTP/1.1 stdlib server with Nagle off, keep-alive", "http", False),
    _t("http_newconn", "HTTP/1.1 stdlib server (Nagle on), new connection per request", "http", False),
    _t("http_newconn_nodelay", "HTTP/1.1 stdlib server with Nagle off, new connection per request", "http", False),
    _t("grpc_unary", "gRPC unary on a reused channel", "grpc", False),
    _t("grpc_newchannel", "gRPC unary on a new channel per call", "grpc", False),
    _t("grpc_bidi", "gRPC bidirectional stream, one reply per message", "grpc", True),
    _t("zmq_reqrep_tcp", "ZeroMQ REQ/REP over tcp", "zmq", False),
    _t("zmq_reqrep_ipc", "ZeroMQ REQ/REP over ipc", "zmq", False),
    _t("zmq_dealer_tcp", "ZeroMQ DEALER/ROUTER over tcp", "zmq", True),
    _t("zmq_dealer_ipc", "ZeroMQ DEALER/ROUTER over ipc", "zmq", True),
)}

_TCP_OPTIONS = {
    "tcp_nodelay": StreamClientOptions(nodelay=True),
    "tcp_nagle": StreamClientOptions(nodelay=False),
    "tcp_nodelay_split": StreamClientOptions(nodelay=True, split_write=True),
    "tcp_nagle_split": StreamClientOptions(nodelay=False, split_write=True),
    "tcp_nagle_cork": StreamClientOptions(nodelay=False, split_write=True, cork=True),
    "tcp_nodelay_newconn": StreamClientOptions(nodelay=True, new_connection=True),
    "uds": StreamClientOptions(),
}


def info(name: str) -> TransportInfo:
    try:
        return TRANSPORTS[name]
    except KeyError:
        raise ValueError(f"unknown transport {name!r}; known: {', '.join(TRANSPORTS)}") from None


@dataclass
class Endpoint:
    transport: TransportInfo
    client: Any
    server: ServerProcess
    proxies: list[ServerProcess] = field(default_factory=list)
    workdir: Optional[str] = None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def processes(self) -> list[ServerProcess]:
        return [self.server, *self.proxies]

    def counters(self) -> dict[str, dict[str, int]]:
        out = {"server": self.server.counters.snapshot()}
        for i, proxy in enumerate(self.proxies):
            out[f"proxy{i}"] = proxy.counters.snapshot()
        return out

    def close(self, timeout_s: float = 3.0) -> dict[str, str]:
        """Close the client, stop every process (bounded); returns how each one ended."""
        how: dict[str, str] = {}
        try:
            if self.client is not None:
                self.client.close()
        except (OSError, RpcError):
            pass
        for i, proxy in reversed(list(enumerate(self.proxies))):
            how[f"proxy{i}"] = proxy.stop(timeout_s)
        how["server"] = self.server.stop(timeout_s)
        for closer in self.closers:
            closer()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return how


def open_endpoint(name: str, hops: int = 0, faults: Optional[FaultSpec] = None,
                  max_bytes: int = MAX_FRAME_BYTES) -> Endpoint:
    """Start ``name``'s server (plus ``hops`` forwarding proxies, plus one fault proxy when
    ``faults`` is given, nearest the client) and connect a client to the outermost one."""
    t = info(name)
    if (hops or faults is not None) and not t.proxiable:
        raise ValueError(f"transport {name!r} cannot sit behind a proxy (framed TCP/Unix transports only)")
    workdir = tempfile.mkdtemp(prefix="critpath-rpc-")
    started: list[ServerProcess] = []
    try:
        return _open(t, hops, faults, max_bytes, workdir, started)
    except BaseException:
        for proc in reversed(started):
            proc.stop(1.0)
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def _start(started: list[ServerProcess], target: str, config: Any) -> ServerProcess:
    proc = ServerProcess(target, config)
    started.append(proc)
    proc.start()
    return proc


def _open(t: TransportInfo, hops: int, faults: Optional[FaultSpec], max_bytes: int, workdir: str,
          started: list[ServerProcess]) -> Endpoint:
    if t.kind == "stream":
        options = _TCP_OPTIONS[t.name]
        options = StreamClientOptions(options.nodelay, options.split_write, options.new_connection, max_bytes,
                                      options.cork)
        family = "unix" if t.name == "uds" else "tcp"

        def stream_config(label: str) -> StreamServerConfig:
            path = os.path.join(workdir, f"{label}.sock") if family == "unix" else ""
            return StreamServerConfig(family=family, path=path, nodelay=options.nodelay, max_frame_bytes=max_bytes)

        server = _start(started, "harness.rpc.stream:serve", stream_config("server"))
        upstream, proxies = server.address, []
        chain = [FaultSpec()] * hops + ([faults] if faults is not None else [])
        for i, spec in enumerate(chain):
            proxy = _start(started, "harness.rpc.faults:serve",
                           ProxyConfig(upstream, spec, stream_config(f"proxy{i}"), max_bytes))
            proxies.append(proxy)
            upstream = proxy.address
        return Endpoint(t, StreamClient(upstream, options), server, proxies, workdir)
    if t.kind == "shm":
        client = ShmClient(max_bytes=max_bytes, workdir=workdir)
        try:
            server = _start(started, "harness.rpc.shm:serve", client.config())
        except BaseException:
            client.close()
            raise
        client.on_idle = server.check_alive
        return Endpoint(t, client, server, workdir=workdir)
    if t.kind == "http":
        server = _start(started, "harness.rpc.http_echo:serve",
                        HttpServerConfig(nodelay=t.name.endswith("_nodelay"), max_bytes=max_bytes))
        keep = t.name.startswith("http_keepalive")
        return Endpoint(t, HttpClient(server.address, keep_alive=keep), server, workdir=workdir)
    if t.kind == "grpc":
        from harness.rpc.grpc_echo import GrpcClient, GrpcServerConfig  # grpc: 80 ms, paid by its cases alone

        server = _start(started, "harness.rpc.grpc_echo:serve", GrpcServerConfig(max_bytes=max_bytes))
        mode = t.name.split("_", 1)[1]
        return Endpoint(t, GrpcClient(server.address, mode, max_bytes), server, workdir=workdir)
    if t.kind == "zmq":
        from harness.rpc.zmq_echo import ZmqClient, ZmqServerConfig  # pyzmq: 30 ms, paid by its cases alone

        _, pattern, over = t.name.split("_")
        endpoint = f"ipc://{os.path.join(workdir, 'zmq.ipc')}" if over == "ipc" else "tcp://127.0.0.1:*"
        server = _start(started, "harness.rpc.zmq_echo:serve", ZmqServerConfig(pattern, endpoint, max_bytes))
        return Endpoint(t, ZmqClient(server.address, pattern), server, workdir=workdir)
    raise ValueError(f"transport kind {t.kind!r} has no opener")
