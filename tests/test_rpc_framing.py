"""Frames: exact round trips, and the errors a server relies on to reject bad input."""
from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings, strategies as st

from harness.rpc.framing import (HEADER, KIND_ERROR, KIND_REPLY, MAGIC, MAX_FRAME_BYTES, VERSION, ConnectionClosed,
                                 FrameReader, MalformedFrame, OversizedFrame, ServerError, encode, pack_batch,
                                 unpack_batch)


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@settings(max_examples=50, deadline=None)
@given(bodies=st.lists(st.binary(max_size=2048), min_size=1, max_size=5))
def test_frames_round_trip_exactly_even_when_concatenated(bodies):
    a, b = socket.socketpair()
    try:
        a.sendall(b"".join(encode(x) for x in bodies))  # several frames in one read: pipelining
        reader = FrameReader(b)
        assert [reader.read().body for _ in bodies] == bodies
    finally:
        a.close()
        b.close()


def test_every_byte_value_and_max_size(pair):
    a, b = pair
    reader = FrameReader(b)
    for body in (bytes(range(256)), bytes(MAX_FRAME_BYTES)):
        a.sendall(encode(body, KIND_REPLY))
        assert reader.read_reply() == body


def test_bad_magic_is_malformed(pair):
    a, b = pair
    a.sendall(b"GET / HTTP/1.1\r\n\r\n")
    with pytest.raises(MalformedFrame):
        FrameReader(b).read()


def test_oversized_is_rejected_from_the_header_alone(pair):
    a, b = pair
    a.sendall(HEADER.pack(MAGIC, VERSION, 0, MAX_FRAME_BYTES + 1))  # no body follows: must not wait for it
    with pytest.raises(OversizedFrame) as info:
        FrameReader(b).read()
    assert info.value.length == MAX_FRAME_BYTES + 1


def test_close_mid_frame_is_reported(pair):
    a, b = pair
    a.sendall(encode(b"hello")[:7])
    a.close()
    with pytest.raises(ConnectionClosed) as info:
        FrameReader(b).read()
    assert info.value.mid_frame


def test_clean_close_between_frames(pair):
    a, b = pair
    a.close()
    with pytest.raises(ConnectionClosed) as info:
        FrameReader(b).read()
    assert not info.value.mid_frame


def test_error_frame_raises_server_error(pair):
    a, b = pair
    a.sendall(encode(b"no such thing", KIND_ERROR))
    with pytest.raises(ServerError, match="no such thing"):
        FrameReader(b).read_reply()


@given(st.lists(st.binary(max_size=300), max_size=10))
def test_batch_round_trip(messages):
    assert unpack_batch(pack_batch(messages)) == messages


def test_truncated_batch_is_malformed():
    with pytest.raises(MalformedFrame):
        unpack_batch(pack_batch([b"abcdef"])[:-1])
