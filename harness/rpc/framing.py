"""Length-prefixed frames for the stream transports (TCP, Unix socket, fault proxy).

A frame is an 8-byte header then the body::

    magic b"CP" | version u8 | kind u8 | body length u32 (big-endian)

The magic and version let a server tell a stray or corrupt stream from a frame (``MalformedFrame``);
the length is checked against a maximum before anything is read into memory (``OversizedFrame``),
so a hostile or buggy peer cannot make the server allocate gigabytes. A byte stream cannot be
resynchronised after either error, so the server answers with an error frame and closes that
connection only; other connections are untouched.
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

HEADER = struct.Struct("!2sBBI")
HEADER_BYTES = HEADER.size
MAGIC = b"CP"
VERSION = 1
KIND_REQUEST = 0
KIND_REPLY = 1
KIND_ERROR = 2
# Control messages are small; 64 KiB bounds the buffers and is far above every preset.
MAX_FRAME_BYTES = 64 * 1024
RECV_CHUNK_BYTES = 256 * 1024


class RpcError(RuntimeError):
    """Base of every error this package raises about a peer or a frame."""


class FrameError(RpcError):
    """A frame that breaks the protocol; the connection cannot continue."""


class MalformedFrame(FrameError):
    pass


class OversizedFrame(FrameError):
    def __init__(self, length: int, max_bytes: int) -> None:
        super().__init__(f"frame body of {length} bytes exceeds the maximum of {max_bytes} bytes")
        self.length = length
        self.max_bytes = max_bytes


class ConnectionClosed(RpcError):
    """The peer closed the connection (``mid_frame``: with a partial frame unread)."""

    def __init__(self, mid_frame: bool) -> None:
        super().__init__("peer closed the connection" + (" in the middle of a frame" if mid_frame else ""))
        self.mid_frame = mid_frame


class ServerError(RpcError):
    """The server answered with an error frame (its text is the message)."""


def encode(body: bytes, kind: int = KIND_REQUEST) -> bytes:
    return HEADER.pack(MAGIC, VERSION, kind, len(body)) + body


def header(length: int, kind: int = KIND_REQUEST) -> bytes:
    return HEADER.pack(MAGIC, VERSION, kind, length)


@dataclass(frozen=True)
class Frame:
    kind: int
    body: bytes


class FrameReader:
    """Reads whole frames from a blocking socket.

    One ``recv`` usually returns a whole small frame, so a round trip costs one send and one
    receive system call; bytes beyond the frame (pipelined replies) are kept for the next read.
    """

    def __init__(self, sock: socket.socket, max_bytes: int = MAX_FRAME_BYTES) -> None:
        self.sock = sock
        self.max_bytes = max_bytes
        self.buf = bytearray()

    def read(self) -> Frame:
        buf = self.buf
        recv = self.sock.recv
        while True:
            if len(buf) >= HEADER_BYTES:
                magic, version, kind, length = HEADER.unpack_from(buf)
                if magic != MAGIC or version != VERSION:
                    raise MalformedFrame(f"bad frame header {bytes(buf[:HEADER_BYTES])!r}")
                if length > self.max_bytes:
                    raise OversizedFrame(length, self.max_bytes)
                end = HEADER_BYTES + length
                if len(buf) >= end:
                    body = bytes(buf[HEADER_BYTES:end])
                    del buf[:end]
                    return Frame(kind, body)
            chunk = recv(RECV_CHUNK_BYTES)
            if not chunk:
                raise ConnectionClosed(mid_frame=len(buf) > 0)
            buf += chunk

    def read_reply(self) -> bytes:
        frame = self.read()
        if frame.kind == KIND_ERROR:
            raise ServerError(frame.body.decode("utf-8", "replace"))
        return frame.body


def pack_batch(messages: list[bytes]) -> bytes:
    """k messages in one body: each prefixed by its u32 length (used by batched sends)."""
    return b"".join(struct.pack("!I", len(m)) + m for m in messages)


def unpack_batch(body: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(body):
        if pos + 4 > len(body):
            raise MalformedFrame("batch ends inside a length prefix")
        (n,) = struct.unpack_from("!I", body, pos)
        pos += 4
        if pos + n > len(body):
            raise MalformedFrame("batch item runs past the end of the body")
        out.append(body[pos : pos + n])
        pos += n
    return out
