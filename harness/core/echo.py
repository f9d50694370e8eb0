"""Echoing a piece of input inside an error message without echoing all of it.

An error names what it refuses; a 5,000-digit number or a 1 MB key named in full buries the message
(and fills a CI log). Every message that quotes input quotes it through ``shown``.
"""
from __future__ import annotations

from typing import Any

# Enough for any real key, case ID or number, short enough to stay on one line.
MAX_ECHOED_CHARS = 80


def shown(value: Any) -> str:
    """``repr(value)`` for a string, ``str`` otherwise, cut to MAX_ECHOED_CHARS with the length said."""
    if isinstance(value, int) and value.bit_length() > 4 * MAX_ECHOED_CHARS:  # str() of 4,300 digits raises
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value) if isinstance(value, str) else str(value)
    if len(text) <= MAX_ECHOED_CHARS:
        return text
    return f"{text[:MAX_ECHOED_CHARS - 20]}... ({len(text)} characters)"
