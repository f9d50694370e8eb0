"""What a run ID may be: one grammar for the IDs critpath makes and for every one it is given.

A run ID names a directory (reports/<run-id>), keys a run among others (``distinct_run_ids``) and
is printed in every table and message. So it is a plain token: ASCII letters, digits, ".", "_"
and "-", starting with a letter or digit (no "/" or "..", no newline, no terminal escape), and
at most MAX_RUN_ID_CHARS long. critpath's own IDs (``store.new_run_id``, 53 characters at most;
an import's ``nccl-tests-<stem>-<hash>``) are of this grammar, and a record or run.json that holds
another is not one critpath wrote.
"""
from __future__ import annotations

import hashlib
import re
from typing import Optional

from harness.core.echo import shown

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*", re.ASCII)
MAX_RUN_ID_CHARS = 128
_NOT_RUN_ID = re.compile(r"[^A-Za-z0-9._-]", re.ASCII)
RUN_ID_RULE = (f"a run ID is ASCII letters, digits, '.', '_' and '-', starting with a letter or digit, "
               f"at most {MAX_RUN_ID_CHARS} characters")
_DIGEST_HEX = 8


def run_id_fault(value: object) -> Optional[str]:
    """Why ``value`` is no run ID, or None when it is one."""
    if not isinstance(value, str) or not value:
        return f"{shown(value)} is not a run ID ({RUN_ID_RULE})"
    if len(value) > MAX_RUN_ID_CHARS:
        return f"a run ID of {len(value)} characters is more than {MAX_RUN_ID_CHARS}"
    if not RUN_ID.fullmatch(value):
        return f"{shown(value)} is not a run ID ({RUN_ID_RULE})"
    return None


def run_id_part(text: str, most: int) -> str:
    """``text`` as part of a run ID (a file's stem in an import's default ID): as it is where it is
    a token of at most ``most`` characters; else with every other character as "-", cut, and a short
    digest of the raw text after it, so that two names so changed stay apart."""
    token = _NOT_RUN_ID.sub("-", text)
    if token == text and len(text) <= most:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:_DIGEST_HEX]
    return f"{token[:most - _DIGEST_HEX - 1]}-{digest}"
