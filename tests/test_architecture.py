"""docs/architecture.md's layers, held to the code: every import runs down, never up or sideways."""
from __future__ import annotations

import ast
import re

from conftest import ROOT

HARNESS = ROOT / "harness"


def _layers() -> dict[str, int]:
    """Folder or top-level module of harness -> its layer, from the doc's table."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    layers = {}
    for number, places in re.findall(r"^\| (\d+) \| (.+?) \|", text, re.MULTILINE):
        for place in re.findall(r"`([\w.]+/?)`", places):
            layers[place.rstrip("/")] = int(number)
    return layers


def _unit(module: str) -> str:
    """harness.gate.cli -> gate; harness.cli -> cli.py; harness -> __init__.py."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    return parts[1] if (HARNESS / parts[1]).is_dir() else parts[1] + ".py"


def _module_of(path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path):
    """(line, module) of every harness import in the file, at the top or inside a function."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "harness")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "harness":
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                # `from harness import cli` imports the module harness.cli; `from harness.core.case import Case` does not
                is_module = (HARNESS.parent / full.replace(".", "/")).with_suffix(".py").is_file() or \
                    (HARNESS.parent / full.replace(".", "/")).is_dir()
                yield node.lineno, full if is_module else node.module


def test_every_folder_and_top_level_module_has_a_layer():
    layers = _layers()
    present = {p.name for p in HARNESS.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    present |= {p.name for p in HARNESS.glob("*.py")}
    assert present - set(layers) == set(), "add these to docs/architecture.md's table"
    assert set(layers) - present == set(), "the table names what harness/ no longer has"


def test_no_import_climbs_or_crosses_a_layer():
    layers = _layers()
    climbing = []
    for path in sorted(HARNESS.rglob("*.py")):
        here = _unit(_module_of(path))
        for line, module in _imports(path):
            there = _unit(module)
            if there == here or module == "harness.moved":
                continue  # within a folder; every package may answer its 0.1 names through moved.py
            if layers[there] >= layers[here]:
                climbing.append(f"{path.relative_to(ROOT)}:{line} imports {module} "
                                f"(layer {layers[there]}, from layer {layers[here]})")
    assert climbing == []
