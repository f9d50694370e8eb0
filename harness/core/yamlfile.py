"""Reading the project's YAML (profiles, baselines, gate configs and tables) so that it cannot hurt.

``yaml.safe_load`` constructs no objects, but it lets the last of two equal keys win (a doubled
``max:`` silently loosens an acceptance threshold), expands aliases without bound (a few hundred
bytes of nested aliases hang it for minutes) and raises a bare UnicodeDecodeError on a file that is
not UTF-8. Here every one of those is a ``YamlFileError`` naming the file and line:

- a duplicate key names both lines;
- aliases (``*name``) are refused: none of critpath's files needs them;
- the file must be UTF-8;
- the file is a regular file of at most ``MAX_YAML_BYTES``, nested at most ``MAX_DEPTH`` deep (the
  composer recurses once per level: 400 levels were a RecursionError), checked on the parser's
  events before a node is composed;
- a float written without a dot (``4e11``, ``1e-6``) is a number, as YAML 1.2 reads it, not the
  string YAML 1.1 makes of it: a threshold must not turn into text because of how it was written.

``refuse_unknown`` is the one way a reader refuses a key it does not know: the line, what is
known, and the nearest known name.
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import yaml

from harness.core.inputfile import InputFileError, read_bounded

# critpath's largest YAML (a baselines file) is about 40 kB; a profile or a rule file a few kB.
MAX_YAML_BYTES = 4 << 20
# Deeper than any of critpath's files needs (they nest 4 or 5 levels), far short of the recursion limit.
MAX_DEPTH = 32
# YAML 1.2's float (core schema), which YAML 1.1 narrows to numbers with a dot.
_FLOAT_1_2 = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


class YamlFileError(ValueError):
    """A YAML file that cannot be read as critpath's; the message starts with ``file:line:``."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and duplicate keys, and reads ``4e11`` as a float."""

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


_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_1_2, list("-+0123456789."))


class _Refused(Exception):
    def __init__(self, line: int, why: str) -> None:
        super().__init__(why)
        self.line, self.why = line, why


def load(path: Path) -> tuple[Any, yaml.Node]:
    """The data of ``path`` and its node tree (for the line of a field); YamlFileError otherwise."""
    path = Path(path)
    try:
        raw = read_bounded(path, "YAML file", MAX_YAML_BYTES)
    except InputFileError as exc:
        raise YamlFileError(str(exc)) from None
    except OSError as exc:
        raise YamlFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise YamlFileError(f"{path}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        _check_depth(text)
        root = yaml.compose(text, Loader=_StrictLoader)
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
    except _Refused as exc:
        raise YamlFileError(f"{path}:{exc.line}: {exc.why}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise YamlFileError(f"{path}:{mark.line + 1 if mark else 1}: not valid YAML: "
                            f"{getattr(exc, 'problem', None) or exc}") from None
    return data, root


def _check_depth(text: str) -> None:
    """_Refused at the first collection nested deeper than MAX_DEPTH: the parser does not recurse,
    the composer and the constructor do."""
    depth = 0
    for event in yaml.parse(text, Loader=_StrictLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _Refused(event.start_mark.line + 1, f"nested {depth} deep; at most {MAX_DEPTH}")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def node_at(node: Optional[yaml.Node], path: Sequence[Any]) -> Optional[yaml.Node]:
    """The deepest YAML node along a JSON path (keys and list indices)."""
    for part in path:
        if isinstance(node, yaml.MappingNode):
            found = next((value for key, value in node.value if key.value == str(part)), None)
            if found is None:
                return node
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return node
    return node


def line_of(node: Optional[yaml.Node], path: Sequence[Any]) -> int:
    """1-based line of the field at ``path`` (its key when it is a mapping entry); 1 without a tree."""
    if node is None:
        return 1
    parent = node_at(node, path[:-1]) if path else node
    if path and isinstance(parent, yaml.MappingNode):
        for key, _ in parent.value:
            if key.value == str(path[-1]):
                return key.start_mark.line + 1
    return node_at(node, path).start_mark.line + 1


def refuse_unknown(path: Path, root: Optional[yaml.Node], where: Sequence[Any], given: Iterable[Any],
                   known: Iterable[str], what: str = "key") -> None:
    """YamlFileError ``FILE:LINE: field W.K: unknown KEY; known: ...; did you mean ...?`` for the
    first of ``given`` not in ``known``: a misspelt key must not leave a default in force silently."""
    known = sorted(known)
    for key in given:
        if str(key) in known:
            continue
        field = ".".join(str(p) for p in [*where, key])
        near = difflib.get_close_matches(str(key), known, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        shown = ", ".join(known) if len(known) <= 12 else ", ".join(known[:12]) + f" (and {len(known) - 12} more)"
        raise YamlFileError(f"{path}:{line_of(root, [*where, key])}: field {field}: unknown {what} {str(key)!r}; "
                            f"known: {shown}{hint}")
