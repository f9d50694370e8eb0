"""Codecs and payloads for control messages.

Codecs turn a message object into bytes and back: ``raw`` (bytes as they are), ``json`` (stdlib,
compact separators), ``msgpack``, and ``pickle``. Pickle runs code chosen by whoever wrote the
bytes, so it is never in a grid: it runs only when a case names ``codec=pickle`` explicitly, and
even then only the client decodes (what its own request came back as); servers never decode.

Presets are control-plane messages of the sizes the source articles talk about:

- ``step_receipt``: a scheduler's per-step acknowledgement, about 64 B;
- ``specdec_round``: one speculative-decoding round, 8 draft token ids and their probabilities;
- ``tool_call``: an OpenAI-style tool-call JSON object of a few hundred bytes.
"""
from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from typing import Any, Callable

import msgpack

CODECS = ("raw", "json", "msgpack", "pickle")
DEFAULT_CODECS = ("raw", "json", "msgpack")  # pickle only when named


@dataclass(frozen=True)
class Codec:
    name: str
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]


def _json_encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _raw_encode(obj: Any) -> bytes:
    if not isinstance(obj, (bytes, bytearray)):
        raise TypeError(f"codec raw carries bytes only, got {type(obj).__name__}")
    return bytes(obj)


def codec(name: str) -> Codec:
    if name == "raw":
        return Codec("raw", _raw_encode, bytes)
    if name == "json":
        return Codec("json", _json_encode, json.loads)
    if name == "msgpack":
        return Codec("msgpack", msgpack.packb, msgpack.unpackb)
    if name == "pickle":
        return Codec("pickle", lambda o: pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL), pickle.loads)
    raise ValueError(f"unknown codec {name!r}; known: {', '.join(CODECS)}")


def step_receipt() -> dict:
    return {"rid": 918273, "step": 4096, "tok": [31337], "done": False, "t_ms": 1732881234}


def specdec_round() -> dict:
    return {
        "rid": 918273,
        "round": 57,
        "draft_ids": [1820, 318, 257, 3303, 2746, 11, 290, 340],
        "draft_probs": [0.9134, 0.8721, 0.6502, 0.9918, 0.4407, 0.7789, 0.8125, 0.3316],
        "accept_upto": 5,
    }


def tool_call() -> dict:
    return {
        "id": "call_8f2c1e9a4b7d",
        "type": "function",
        "function": {
            "name": "lookup_inventory",
            "arguments": json.dumps(
                {"sku": "A-1029-XL", "warehouse": "eu-west-2", "fields": ["stock", "eta", "price"],
                 "currency": "EUR", "include_reserved": False}
            ),
        },
        "index": 0,
        "finish_reason": "tool_calls",
        "usage": {"prompt_tokens": 412, "completion_tokens": 38},
    }


PRESETS: dict[str, Callable[[], Any]] = {
    "step_receipt": step_receipt,
    "specdec_round": specdec_round,
    "tool_call": tool_call,
}


def preset(name: str) -> Any:
    try:
        return PRESETS[name]()
    except KeyError:
        raise ValueError(f"unknown payload preset {name!r}; known: {', '.join(PRESETS)}") from None


def pattern_bytes(size: int, salt: int = 0) -> bytes:
    """A deterministic payload that is not all one value, so a shifted or stale echo fails."""
    return bytes((i * 131 + salt) % 251 for i in range(size))


def every_byte_value(size: int) -> bytes:
    """At least one of each byte value 0..255 (size >= 256), then repeated."""
    return bytes(i % 256 for i in range(max(size, 256)))
