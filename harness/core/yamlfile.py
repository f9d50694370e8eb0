"""Reading the project's YAML (profiles, baselines, gate configs and tables) so that it cannot hurt.

``yaml.safe_load`` constructs no objects, but it lets the last of two equal keys win (a doubled
``max:`` silently loosens an acceptance threshold), expands aliases without bound (a few hundred
bytes of nested aliases hang it for minutes) and raises a bare UnicodeDecodeError on a file that is
not UTF-8. Here every one of those is a ``YamlFileError`` naming the file and line:

- a duplicate key names both lines;
- aliases (``*name``) are refused: none of critpath's files needs them;
- the file must be UTF-8;
- the file is a regular file of at most ``MAX_YAML_BYTES``, nested at most ``MAX_DEPTH`` deep (the
  constructor recurses once per level: 400 levels were a RecursionError) and holding at most
  ``MAX_NODES`` values, all checked as the node tree is composed, before anything is constructed;
- the text is parsed once (by libyaml where PyYAML has it) and composed once: a 400 kB flow list
  parsed three times in pure Python took 36 s and 306 MB;
- numbers are YAML 1.2 core schema's: ``4e11`` is a float (YAML 1.1 makes it text), ``1:20`` and
  ``1_000`` are text (not 80 and 1000), ``0o17`` is octal and ``017`` is refused (YAML 1.1 reads it
  as 15); an integer outside 64 bits is refused, as in critpath's JSON. An explicit ``!!int`` or
  ``!!float`` tag is held to the same grammar (``!!float 1:20`` is refused, not 80).

``refuse_unknown`` is the one way a reader refuses a key it does not know: the line, what is
known, and the nearest known name.
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import yaml

from harness.core.echo import shown
from harness.core.inputfile import InputFileError, read_bounded
from harness.core.numbers import underflow_text, underflows

# critpath's largest YAML (a baselines file) is about 16 kB; a profile or a rule file a few kB.
MAX_YAML_BYTES = 1 << 20
# Deeper than any of critpath's files needs (they nest 4 or 5 levels), far short of the recursion limit.
MAX_DEPTH = 32
# The most nodes (scalars and collections) one file may hold: the largest baselines file has about
# 2,000. Construction is Python work per node, so the count, not the bytes, bounds time and memory.
MAX_NODES = 100_000
# YAML 1.2 core schema numbers. YAML 1.1 (PyYAML's default) reads 1:20 as 80 (sexagesimal), 017 as
# 15 (octal) and 1_000 as 1000; here they are text, which a field that wants a number refuses.
_INT_1_2 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_1_2 = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
# Integers are 64-bit, as in critpath's JSON: a longer one is a typo or an attack, and Python's
# float() of it overflows while int() of 4,300 digits or more raises.
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1
_INT_DIGITS = len(str(INT_MAX))


class YamlFileError(ValueError):
    """A YAML file that cannot be read as critpath's; the message starts with ``file:line:``."""


class _Resolver(yaml.resolver.Resolver):
    """PyYAML's resolver with YAML 1.2 core schema ints and floats in place of YAML 1.1's."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers
                if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
        for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()}


_Resolver.add_implicit_resolver("tag:yaml.org,2002:int", _INT_1_2, list("-+0123456789"))
_Resolver.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_1_2, list("-+0123456789."))

# libyaml's parser (C) where PyYAML was built with it: the pure-Python scanner is what made a
# 400 kB file take 36 s. The composer stays Python, over the C parser's events, because it is
# where aliases, depth and the node count are refused before anything is built.
try:
    from yaml.cyaml import CParser as _Parser
except ImportError:  # PyYAML built without libyaml: slower, as bounded
    from yaml.parser import Parser as _Parser


class _StrictLoader(yaml.composer.Composer, _Parser, yaml.constructor.SafeConstructor, _Resolver):
    """Parse once, compose once (refusing aliases, depth and count beyond their limits), construct
    from that tree; duplicate keys refused, numbers read as YAML 1.2 reads them."""

    def __init__(self, stream) -> None:
        _Parser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        _Resolver.__init__(self)
        self._depth = self._nodes = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(line, f"an alias (*{event.anchor}) is not accepted: write the value "
                                 "out (aliases can expand without bound)")
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(line, f"more than MAX_NODES = {MAX_NODES} values; critpath's files hold a few thousand")
        if not isinstance(event, yaml.ScalarEvent):
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _Refused(line, f"nested {self._depth} deep; at most {MAX_DEPTH}")
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1
        return super().compose_node(parent, index)

    def construct_yaml_int(self, node):
        text = node.value
        line = node.start_mark.line + 1
        _refuse_outside_1_2(node, _INT_1_2, "an integer (decimal digits, 0o octal or 0x hex)")
        if text.startswith("0o"):
            value = int(text[2:], 8) if len(text) <= 2 + 22 else INT_MAX + 1
        elif text.startswith("0x"):
            value = int(text[2:], 16) if len(text) <= 2 + 16 else INT_MAX + 1
        else:
            digits = text.lstrip("+-")
            if len(digits) > 1 and digits.startswith("0"):
                raise _Refused(line, f"{shown(text)}: a number with a leading zero is refused (YAML 1.1 reads "
                                     f"it as octal); write {digits.lstrip('0') or '0'}, or 0o{digits.lstrip('0')} for octal")
            value = int(text) if len(digits) <= _INT_DIGITS else INT_MAX + 1
        if not INT_MIN <= value <= INT_MAX:
            raise _Refused(line, f"integer {shown(text)} is outside 64 bits ({INT_MIN} to {INT_MAX})")
        return value

    def construct_yaml_float(self, node):
        _refuse_outside_1_2(node, _FLOAT_1_2, "a number (digits, '.', an exponent, .inf or .nan)")
        value = super().construct_yaml_float(node)  # on 1.2 text, PyYAML's 1.1 reading agrees
        if underflows(node.value, value):  # as the text grammar refuses it: 1e-400 is no 0
            raise _Refused(node.start_mark.line + 1, underflow_text(node.value))
        return value

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:  # a date out of range: the line, never a traceback
            raise _Refused(node.start_mark.line + 1, f"not a value critpath reads: {shown(str(exc))}") from None

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
                    raise _Refused(key_node.start_mark.line + 1, f"duplicate key {shown(key)} (first at line "
                                                                 f"{seen}): which one is meant is not guessed")
        return super().construct_mapping(node, deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)


def _refuse_outside_1_2(node: yaml.ScalarNode, grammar: re.Pattern, what: str) -> None:
    """An implicit number already matched ``grammar`` when it was resolved; an explicit ``!!int``
    or ``!!float`` tag skips the resolver, and PyYAML's constructors would read YAML 1.1 text
    (``1:20`` as 80, ``1_000`` as 1000, '٣' as 3), so the tagged text is held to it here."""
    if not (isinstance(node, yaml.ScalarNode) and grammar.fullmatch(node.value)):
        tag = node.tag.rsplit(":", 1)[-1]
        given = shown(node.value) if isinstance(node, yaml.ScalarNode) else f"on a {node.id}"
        raise _Refused(node.start_mark.line + 1, f"!!{tag} {given} is not {what} by YAML 1.2's core schema")


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
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except _Refused as exc:
        raise YamlFileError(f"{path}:{exc.line}: {exc.why}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise YamlFileError(f"{path}:{mark.line + 1 if mark else 1}: not valid YAML: "
                            f"{getattr(exc, 'problem', None) or exc}") from None
    finally:
        loader.dispose()
    return data, root


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


def written(root: Optional[yaml.Node], where: Sequence[Any]) -> str:
    """The value at ``where`` as its file writes it: a scalar's own text (``true``, ``null``,
    ``1e2``), else what kind of node it is. A message quoting the value Python read would say
    True, None and 100.0, which the file does not hold."""
    node = node_at(root, where) if root is not None else None
    if isinstance(node, yaml.ScalarNode):
        if not node.value:
            return "nothing (null)"
        text = shown(node.value)  # escaped, and unquoted where it can be: got true, not got 'true'
        return text[1:-1] if text[:1] in "'\"" and text[-1:] == text[:1] else text
    return {yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list"}.get(type(node), "no value")


def string_fault(root: Optional[yaml.Node], where: Sequence[Any], value: Any, what: str) -> Optional[str]:
    """Why ``value`` (at ``where``) is not the string a field needs, or None: str() of it would
    turn ``true`` into the text 'True' and ``1e2`` into '100.0', names nobody wrote."""
    if isinstance(value, str):
        return None
    return f"expected a string ({what}), got {written(root, where)}"


def field_at(path: Path, root: Optional[yaml.Node], where: Sequence[Any]) -> str:
    """``FILE:LINE: field A.B.C``: how every reader names the field it refuses."""
    return f"{path}:{line_of(root, where)}: field {'.'.join(str(p) for p in where)}"


def refuse_unknown(path: Path, root: Optional[yaml.Node], where: Sequence[Any], given: Iterable[Any],
                   known: Iterable[str], what: str = "key") -> None:
    """YamlFileError ``FILE:LINE: field W.K: unknown KEY; known: ...; did you mean ...?`` for the
    first of ``given`` not in ``known``: a misspelt key must not leave a default in force silently."""
    known = sorted(known)
    for key in given:
        if str(key) in known:
            continue
        near = difflib.get_close_matches(str(key), known, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        shown = ", ".join(known) if len(known) <= 12 else ", ".join(known[:12]) + f" (and {len(known) - 12} more)"
        raise YamlFileError(f"{field_at(path, root, [*where, key])}: unknown {what} {str(key)!r}; "
                            f"known: {shown}{hint}")
