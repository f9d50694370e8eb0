"""Reading the project's YAML (profiles, baselines, gate configs and tables) so that it cannot hurt.

``yaml.safe_load`` constructs no objects, but it lets the last of two equal keys win (a doubled
``max:`` silently loosens an acceptance threshold), expands aliases without bound (a few hundred
bytes of nested aliases hang it for minutes) and raises a bare UnicodeDecodeError on a file that is
not UTF-8. Here every one of those is a ``YamlFileError`` naming the file and line:

- a duplicate key names both lines;
- aliases (``*name``) are refused: none of critpath's files needs them;
- the file must be UTF-8.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class YamlFileError(ValueError):
    """A YAML file that cannot be read as critpath's; the message starts with ``file:line:``."""


class _StrictLoader(yaml.SafeLoader):
    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(event.start_mark.line + 1, f"an alias (*{event.anchor}) is not accepted: write the value "
                                                      "out (aliases can expand without bound)")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.setdefault(key, key_node.start_mark.line + 1)
                except TypeError:
                    continue  # an unhashable key: the constructor below says so
                if seen != key_node.start_mark.line + 1:
                    raise _Refused(key_node.start_mark.line + 1, f"duplicate key {key!r} (first at line {seen}): "
                                                                 "which one is meant is not guessed")
        return super().construct_mapping(node, deep)


class _Refused(Exception):
    def __init__(self, line: int, why: str) -> None:
        super().__init__(why)
        self.line, self.why = line, why


def load(path: Path) -> tuple[Any, yaml.Node]:
    """The data of ``path`` and its node tree (for the line of a field); YamlFileError otherwise."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise YamlFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise YamlFileError(f"{path}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        root = yaml.compose(text, Loader=_StrictLoader)
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
    except _Refused as exc:
        raise YamlFileError(f"{path}:{exc.line}: {exc.why}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise YamlFileError(f"{path}:{mark.line + 1 if mark else 1}: not valid YAML: "
                            f"{getattr(exc, 'problem', None) or exc}") from None
    return data, root
