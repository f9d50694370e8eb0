"""The types of the fingerprint.json fields critpath reads, checked once where a run is loaded.

A fingerprint is written by ``critpath run`` (harness.run.fingerprint) or by an import, and read by
the report, acceptance, diagnosis and the records frame. A hand-edited one must be refused where it
is read, naming its field, not reach a reader as a surprise: ``"gpus": "x"`` was an AttributeError
in ``critpath report`` and ``critpath accept``, and ``"world": true`` passed a pin on world 1
(``True == 1`` in Python).

Every field may be absent or null (not recorded, which readers say); one that is there has the
type below. Integers go through ``harness.core.numbers.check_int``: a bool is no count. Text is at
most ``MAX_TEXT_CHARS`` long, and tighter where its source is (a kernel's name and release, a git
commit's hex digits). A GPU's fields are its identity (text: name, uuid, host, pci, and a
``<field>_reason`` for one NVML could not give) and its node facts and counts, each a non-negative
integer as the writer records them; GPUs are present exactly where devices are listed.

As with run.json (``harness.core.runmeta``), a fingerprint of another schema version (or a null
one) is not read as this one, and its mappings of fixed fields (the top level, ``git``, ``layout``,
``gpus``) hold the fields its writers give and no other: ``"schema": "nonsense"`` or a key ``zzz``
is not a fingerprint critpath wrote. A rank's identity and a GPU's fields are the launcher's and NVML's, left open. Its
``launch`` is one its writers give (``LAUNCHES``), and a worker's fingerprint is its own process's,
one rank: ``launch: worker`` beside world 16 switched off the check of the world against the records.
Which launch a run directory may carry is held to its run.json in ``harness.core.runheld``.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from harness.core.echo import shown
from harness.core.family import BACKENDS
from harness.core.numbers import NumberError, check_int
from harness.core.scale import MAX_CPU_COUNT, MAX_WORLD


class FingerprintError(ValueError):
    """A fingerprint field of the wrong type; the message starts with ``field NAME:``."""


@dataclass(frozen=True)
class _Count:
    low: int  # 0 for a count, 1 for a world size
    high: Optional[int] = None  # None: any 64-bit count (a GPU's memory in bytes)


@dataclass(frozen=True)
class _Text:
    """A string of at most ``max_chars``, matching ``pattern`` where given (``what`` says what it is)."""

    max_chars: int
    pattern: Optional[re.Pattern] = None
    what: str = ""


@dataclass(frozen=True)
class _List:
    item: "_Spec"


@dataclass(frozen=True)
class _Values:
    """A mapping of any keys whose values (null for not recorded) are each ``item``."""

    item: "_Spec"


class _Device:
    """A GPU of ``gpus.devices``: text for its identity and reasons, a count for everything else."""


class _Open:
    """A mapping of its writer's own fields, unchecked: a rank's identity, as its launcher gave it."""


_Spec = Union[type, _Count, _Text, _List, _Values, _Device, _Open, Mapping[str, Any]]

# Any text a fingerprint holds (``str`` below): at most Linux's MAX_ARG_STRLEN, the longest string an
# environment variable or a command's argument can be; a 2 MB kernel name is no machine's.
MAX_TEXT_CHARS = 128 * 1024
TEXT = _Text(MAX_TEXT_CHARS)
# A field of uname(2) holds at most 64 characters (__NEW_UTS_LEN); ``kernel`` is two of them.
UTS_CHARS = 64
# A git commit as ``git rev-parse HEAD`` prints it: 40 hex digits, 64 in a SHA-256 repository.
COMMIT = _Text(64, re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?"), "a git commit (40 or 64 lowercase hex digits)")


# The fingerprint.json this release writes and reads.
SCHEMA = "critpath.fingerprint/1"
# How the process that wrote a fingerprint was started, one value per writer: ``critpath run`` spawning
# its ranks on this host (harness.run.local) or joined as a rank of torchrun or Slurm (harness.run.
# joined), the gate's worker (harness.run.rounds), an import of nccl-tests output (harness.nccltests).
LOCAL, JOINED, WORKER, IMPORTED = "local", "joined", "worker", "imported"
LAUNCHES = (LOCAL, JOINED, WORKER, IMPORTED)
# A worker's fingerprint is its own process's, written before any round: one rank, whatever the
# worlds of the cases its rounds spawn.
WORKER_WORLD = 1

COUNT = _Count(0)
# A job's ranks, nodes and ranks per node: 1 to the largest job critpath runs; a rank's index or
# node index below it; a host's CPUs as Linux counts them. 2**63-1 was a world that passed.
WORLD, INDEX, CPUS = _Count(1, MAX_WORLD), _Count(0, MAX_WORLD - 1), _Count(0, MAX_CPU_COUNT)
_DEVICE_TEXT = ("name", "uuid", "host", "pci", "reason")
# A GPU's fields that are lists: NVML's throttle reasons, and the ranks an nccl-tests log ran on it
_DEVICE_LISTS = {"clocks_event_reasons": _List(str), "ranks": _List(INDEX)}
_WANT = {str: "a string", bool: "true or false"}

LAYOUT = {"nodes": WORLD, "ranks_per_node": (WORLD, _List(WORLD)), "uniform": bool, "node_major": bool,
          "hosts": _List(str), "node_keys": _List(str), "node_of_rank": _List(INDEX), "local_ranks": _List(INDEX),
          "ranks": _List(_Open())}
GPUS = {"present": bool, "reason": str, "count": COUNT, "count_reason": str, "driver_version": str,
        "driver_version_reason": str, "listed": str, "devices": _List(_Device())}
FINGERPRINT = {"schema": str, "host": str, "cpu_model": str, "cpu_count": CPUS, "cpu_usable": CPUS,
               "kernel": _Text(2 * UTS_CHARS + 1), "machine": _Text(UTS_CHARS), "python": str, "torch": str,
               "critpath": str, "backend": _Text(max(map(len, BACKENDS)), re.compile("|".join(BACKENDS)),
                                                 f"a backend critpath runs ({', '.join(BACKENDS)})"),
               "world": WORLD, "launch": _Text(max(map(len, LAUNCHES)), re.compile("|".join(LAUNCHES)),
                                               f"a launch critpath writes ({', '.join(LAUNCHES)})"),
               "nccl_version": str, "imported_from": str, "layout": LAYOUT, "gpus": GPUS,
               "git": {"commit": COMMIT, "dirty": bool, "reason": str}, "libraries": _Values(str), "env": _Values(str)}

# The fields every writer of a fingerprint gives a value (harness.run.fingerprint.collect for a
# run, its worker and each rank; an import's fingerprint_of): one lacking any is not a run's
# fingerprint, and says nothing of where the run ran. ``host`` is not among them: an import of
# nccl-tests text without device lines writes it null.
REQUIRED = ("launch", "world")


def gpu_key(device: Mapping[str, Any]) -> Optional[tuple]:
    """Which GPU a ``gpus.devices`` entry is, so one GPU is counted once: its host and PCI bus id
    where recorded (a process that sees only its own GPU through CUDA_VISIBLE_DEVICES calls every
    GPU device 0), else its host and device ordinal (NVML's index); None where neither is recorded,
    and the entry cannot be told apart from another."""
    if device.get("pci"):
        return device.get("host"), "pci", device["pci"]
    if device.get("index") is not None:
        return device.get("host"), "index", device["index"]
    return None


def lacking(fingerprint: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``REQUIRED`` fields ``fingerprint`` lacks (absent or null); all of them for none."""
    return tuple(name for name in REQUIRED if fingerprint.get(name) is None)


def _what(spec) -> str:
    if isinstance(spec, tuple):
        return " or ".join(_what(s) for s in spec)
    if isinstance(spec, _List):
        item = spec.item
        return "a list of " + ("strings" if item is str else f"integers >= {item.low}" if isinstance(item, _Count)
                               else "mappings")
    if isinstance(spec, _Count):
        return f"an integer >= {spec.low}"
    if isinstance(spec, _Text):
        return _WANT[str]
    return _WANT[spec] if spec is str or spec is bool else "a mapping"


def _fits(value: Any, spec) -> bool:
    """Whether ``value`` is of the kind ``spec`` names, its own fields unchecked."""
    if isinstance(spec, _List):
        return isinstance(value, list)
    if isinstance(spec, _Count):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(spec, _Text):
        return isinstance(value, str)
    if spec is str or spec is bool:
        return isinstance(value, spec)
    return isinstance(value, dict)  # a mapping, _Values, a _Device or _Open


def _check(value: Any, spec, name: str) -> None:
    kinds = spec if isinstance(spec, tuple) else (spec,)  # one of several kinds: the one that fits is checked
    spec = next((kind for kind in kinds if _fits(value, kind)), None)
    if spec is None:
        raise FingerprintError(f"field {name}: must be {_what(kinds)}, not {shown(value)}")
    if isinstance(spec, _Count):
        try:
            check_int(value, f"field {name}", spec.low, spec.high)
        except NumberError as exc:
            raise FingerprintError(str(exc)) from None
    elif spec is str or isinstance(spec, _Text):
        _check_text(value, TEXT if spec is str else spec, name)
    elif isinstance(spec, _List):
        for index, item in enumerate(value):
            if item is None:
                raise FingerprintError(f"field {name}.{index}: must be {_what(spec.item)}, not null")
            _check(item, spec.item, f"{name}.{index}")
    elif isinstance(spec, _Values):
        for key, item in value.items():
            if item is not None:
                _check(item, spec.item, f"{name}.{key}")
    elif isinstance(spec, _Device):
        for key, item in value.items():
            if item is not None:
                text = key in _DEVICE_TEXT or str(key).endswith("_reason")
                _check(item, str if text else _DEVICE_LISTS.get(key, COUNT), f"{name}.{key}")
    elif isinstance(spec, dict):
        unknown = next((key for key in value if key not in spec), None)
        if unknown is not None:
            whose = f"a {SCHEMA} fingerprint.json" if not name else name
            raise FingerprintError(f"field {shown(f'{name}.{unknown}' if name else unknown)}: not a field of {whose} "
                                   f"(it has {', '.join(spec)})")
        for key, sub in spec.items():
            if value.get(key) is not None:
                _check(value[key], sub, f"{name}.{key}" if name else key)


def _check_text(value: str, spec: _Text, name: str) -> None:
    if len(value) > spec.max_chars:
        raise FingerprintError(f"field {name}: {len(value)} characters, more than the {spec.max_chars} it may hold")
    if spec.pattern is not None and not spec.pattern.fullmatch(value):
        raise FingerprintError(f"field {name}: {shown(value)} is not {spec.what}")


def check(fingerprint: Mapping[str, Any]) -> None:
    """FingerprintError naming the first field critpath reads that is of the wrong type, a
    layout.node_of_rank that names a node layout.node_keys does not have, a layout whose fields
    disagree with one another or with world, and CPU counts that cannot both hold; one of another
    schema, holding a field its writers do not write, or of a worker that says it is more than its
    own process."""
    schema = fingerprint.get("schema", SCHEMA)
    if schema != SCHEMA:
        raise FingerprintError(f"field schema: {shown(schema)} is not {SCHEMA!r}, the fingerprint.json this "
                               "release reads")
    _check(fingerprint, FINGERPRINT, "")
    launch, world = fingerprint.get("launch"), fingerprint.get("world")
    if launch == WORKER and world not in (None, WORKER_WORLD):
        raise FingerprintError(f"field launch: {shown(launch)}, a worker's own process of {WORKER_WORLD} rank, "
                               f"but field world is {world} ranks")
    layout = fingerprint.get("layout") or {}
    keys, ranks = layout.get("node_keys") or [], layout.get("node_of_rank") or []
    if keys and any(r >= len(keys) for r in ranks):
        raise FingerprintError(f"field layout.node_of_rank: a node index outside 0..{len(keys) - 1} "
                               f"(layout.node_keys has {len(keys)})")
    nodes, world = layout.get("nodes"), fingerprint.get("world")
    if nodes is not None and world is not None and nodes > world:  # a node holds a rank or more
        raise FingerprintError(f"field layout.nodes: {nodes} nodes, but field world is {world} ranks")
    _check_layout(layout, world)
    _check_cpus(fingerprint.get("cpu_count"), fingerprint.get("cpu_usable"))
    _check_gpus(fingerprint.get("gpus") or {})


def _check_gpus(gpus: Mapping[str, Any]) -> None:
    """GPUs are present exactly where devices are listed, one for each GPU counted: NVML's count and
    devices, or the devices an nccl-tests log names (harness.run.fingerprint.gpus, an import's)."""
    present, devices, count = gpus.get("present"), gpus.get("devices"), gpus.get("count")
    if present is not None and present != bool(devices):
        listed = f"lists {len(devices)} devices" if devices else "lists no device"
        raise FingerprintError(f"field gpus.present: {str(present).lower()}, but field gpus.devices {listed}")
    if count is not None and devices is not None and count != len(devices):
        raise FingerprintError(f"field gpus.count: {count}, but field gpus.devices lists {len(devices)}")


def _check_layout(layout: Mapping[str, Any], world: Optional[int]) -> None:
    """The layout's fields describe one set of nodes: as many as it counts (one entry a node, one a
    rank), holding the world's ranks, each rank's local index inside its node. An acceptance
    ``nodes:`` pin reads them, and ``critpath diagnose`` the node of each key and host."""
    nodes, per_node = layout.get("nodes"), layout.get("ranks_per_node")
    _check_lengths(layout, "nodes", [("layout.nodes", nodes)], ("node_keys", "hosts", "ranks_per_node"))
    _check_lengths(layout, "ranks", [("world", world)], ("node_of_rank", "local_ranks"))
    keys = layout.get("node_keys") or []
    twice = next((key for i, key in enumerate(keys) if key in keys[:i]), None)
    if twice is not None:  # a key names one node: two of one key would be read as one node
        raise FingerprintError(f"field layout.node_keys: {shown(twice)} is given twice; each node has its own key")
    if isinstance(per_node, list) and world is not None and sum(per_node) != world:
        raise FingerprintError(f"field layout.ranks_per_node: {sum(per_node)} ranks in all, but field world is "
                               f"{world} ranks")
    node_of_rank = layout.get("node_of_rank") or []
    for rank, local in enumerate(layout.get("local_ranks") or []):
        if isinstance(per_node, int):
            held = per_node
        elif isinstance(per_node, list) and rank < len(node_of_rank) and node_of_rank[rank] < len(per_node):
            held = per_node[node_of_rank[rank]]
        else:
            continue  # no node to hold it against
        if local >= held:
            raise FingerprintError(f"field layout.local_ranks.{rank}: local rank {local}, but its node holds "
                                   f"{held} ranks (layout.ranks_per_node)")
    # uniform and node_major are derived from the lists (harness.run.fingerprint): a pair that
    # disagrees was edited, and a reader would be told two things of one layout.
    if isinstance(layout.get("uniform"), bool) and isinstance(per_node, list) and per_node \
            and layout["uniform"] != (len(set(per_node)) == 1):
        raise FingerprintError(f"field layout.uniform: {layout['uniform']}, but field layout.ranks_per_node "
                               f"is {per_node}")
    if isinstance(layout.get("node_major"), bool) and node_of_rank \
            and layout["node_major"] != (node_of_rank == sorted(node_of_rank)):
        raise FingerprintError(f"field layout.node_major: {layout['node_major']}, but field layout.node_of_rank "
                               f"is {node_of_rank}")
    if isinstance(per_node, int) and world is not None:
        # The integer form is the most ranks a node holds (an import's, from the devices of each host):
        # every other node holds one at least, and no node more than it.
        others = (nodes or 1) - 1
        if per_node > world - others:
            raise FingerprintError(f"field layout.ranks_per_node: {per_node} ranks on a node, but field world is "
                                   f"{world} ranks" + (f" on {nodes} nodes" if others else ""))
        if nodes is not None and per_node * nodes < world:
            raise FingerprintError(f"field layout.ranks_per_node: {per_node} ranks on a node at most, but "
                                   f"{nodes} nodes of that hold fewer than field world's {world} ranks")
    _check_members(layout)


def _check_members(layout: Mapping[str, Any]) -> None:
    """``node_of_rank`` puts each rank on one of the layout's nodes and every node holds a rank, as
    many as ``ranks_per_node`` says (its list form; the integer form is the most a node holds), and
    ``local_ranks`` numbers the ranks of each node 0..n-1, once each. ``critpath diagnose`` reads a
    record's nodes from these: a node that holds no rank would be called healthy, and two ranks of one
    local index are no job a launcher starts. Run after ``_check_lengths``: the lists count alike."""
    nodes, per_node = layout.get("nodes"), layout.get("ranks_per_node")
    local_ranks = layout.get("local_ranks")
    node_of_rank = layout.get("node_of_rank")
    if node_of_rank is None and nodes == 1 and local_ranks is not None:
        node_of_rank = [0] * len(local_ranks)  # one node holds every rank
    # The nodes the layout counts: ``nodes``, a list of one entry a node, else those node_of_rank names.
    counted = nodes if nodes is not None else next(
        (len(layout[name]) for name in ("node_keys", "hosts", "ranks_per_node") if isinstance(layout.get(name), list)),
        None if node_of_rank is None else max(node_of_rank, default=-1) + 1)
    if node_of_rank is None:
        if local_ranks is not None:
            _check_local_ranks_alone(local_ranks, counted, per_node)
        return  # nothing else places the ranks on nodes
    outside = next((rank for rank, node in enumerate(node_of_rank) if node >= counted), None)
    if outside is not None:
        raise FingerprintError(f"field layout.node_of_rank.{outside}: node {node_of_rank[outside]}, but the layout "
                               f"has {counted} nodes (0..{counted - 1})")
    members: dict[int, list[int]] = {node: [] for node in range(counted)}
    for rank, node in enumerate(node_of_rank):
        members[node].append(rank)
    for node, ranks in members.items():
        if isinstance(per_node, list) and len(ranks) != per_node[node]:
            raise FingerprintError(f"field layout.ranks_per_node.{node}: {per_node[node]} ranks, but field "
                                   f"layout.node_of_rank puts {len(ranks)} on node {node}")
        if not ranks:
            raise FingerprintError(f"field layout.node_of_rank: no rank on node {node}, but each of the "
                                   f"{counted} nodes holds a rank or more")
        if isinstance(per_node, int) and len(ranks) > per_node:
            raise FingerprintError(f"field layout.node_of_rank: {len(ranks)} ranks on node {node}, but field "
                                   f"layout.ranks_per_node says a node holds {per_node} at most")
        if local_ranks is None:
            continue
        seen: dict[int, int] = {}
        for rank in ranks:
            local = local_ranks[rank]
            if local >= len(ranks):
                raise FingerprintError(f"field layout.local_ranks.{rank}: local rank {local}, but node {node} "
                                       f"holds {len(ranks)} ranks (local ranks 0..{len(ranks) - 1})")
            if local in seen:
                raise FingerprintError(f"field layout.local_ranks.{rank}: local rank {local} on node {node}, "
                                       f"as rank {seen[local]}'s; each rank of a node has its own")
            seen[local] = rank


def _check_local_ranks_alone(local_ranks: list, counted: Optional[int], per_node) -> None:
    """``local_ranks`` without ``node_of_rank`` still says how many ranks each node holds: every node
    numbers its own 0..n-1, so as many ranks have local rank 0 as there are nodes, and no more have
    local rank k than have k - 1. A list that no set of the layout's nodes numbers so was accepted."""
    given, seen = Counter(local_ranks), Counter()
    for rank, local in enumerate(local_ranks):
        seen[local] += 1
        if local and seen[local] > given[local - 1]:  # the rank one too many for the nodes below it
            raise FingerprintError(f"field layout.local_ranks.{rank}: local rank {local} on {given[local]} ranks, but "
                                   f"local rank {local - 1} on {given[local - 1]}; each node numbers its ranks 0..n-1")
    if counted is not None and given[0] != counted:
        raise FingerprintError(f"field layout.local_ranks: {given[0]} ranks of local rank 0, but the layout has "
                               f"{counted} nodes, each numbering its ranks from 0")
    if isinstance(per_node, list):
        # node i holds as many ranks as there are local indices k with given[k] > i
        held = sorted((sum(1 for k in given if given[k] > node) for node in range(given[0])), reverse=True)
        if held != sorted(per_node, reverse=True):
            raise FingerprintError(f"field layout.local_ranks: numbers nodes of {held} ranks, but field "
                                   f"layout.ranks_per_node says {per_node}")


def _check_lengths(layout: Mapping[str, Any], unit: str, counted: list, names: tuple[str, ...]) -> None:
    """The lists of ``names`` (one entry a node, or one a rank) have as many entries as one another
    and as ``counted`` says (a count that is None says nothing)."""
    counted = [(name, count) for name, count in counted if count is not None]
    counted += [(f"layout.{name}", len(layout[name])) for name in names if isinstance(layout.get(name), list)]
    for name, count in counted[1:]:
        if count != counted[0][1]:
            raise FingerprintError(f"field {name}: {count} {unit}, but field {counted[0][0]} says {counted[0][1]}")


def _check_cpus(cpu_count: Optional[int], cpu_usable: Optional[int]) -> None:
    """A process may use some of its host's CPUs, at least one and never more than there are."""
    if cpu_usable is None:
        return
    if cpu_usable < 1:
        raise FingerprintError(f"field cpu_usable: {cpu_usable} CPUs, but a process runs on one or more")
    if cpu_count is not None and cpu_usable > cpu_count:
        raise FingerprintError(f"field cpu_usable: {cpu_usable} CPUs, but field cpu_count is {cpu_count}")
