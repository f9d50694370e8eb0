"""What users may import: the names ``harness`` re-exports, and the 0.1 paths kept for one release."""
from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys

import pytest

import harness
from harness import moved
from conftest import ROOT


def test_every_public_name_resolves_to_the_object_its_module_defines():
    for name, (module, attribute) in harness._PUBLIC.items():
        assert getattr(harness, name) is getattr(importlib.import_module(module), attribute), name
    assert set(harness.__all__) == set(harness._PUBLIC)
    with pytest.raises(AttributeError):
        harness.no_such_name  # noqa: B018


def test_no_public_name_is_a_module_path_too():
    # harness.families is a package and harness.family a 0.1 path: once imported, each would
    # replace a public name of the same spelling.
    for name in harness._PUBLIC:
        assert not (ROOT / "harness" / name).exists() and not (ROOT / "harness" / f"{name}.py").exists(), name
        assert f"harness.{name}" not in moved.MOVED and f"harness.{name}" not in moved.MOVED_PACKAGES, name


def test_import_harness_pulls_no_numpy_pandas_or_torch():
    code = "import sys, harness; print(sorted(m for m in ('numpy', 'pandas', 'torch', 'jsonschema') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_every_old_module_path_warns_and_gives_the_new_module_names():
    # One fresh process, so that no old path is already imported by another test.
    code = """
import importlib, json, warnings
from harness import moved
out = {}
for old, news in moved.MOVED.items():
    new = importlib.import_module(news[0])
    sample = next(n for n in dir(new) if not n.startswith("_"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
        same = getattr(module, sample) is getattr(new, sample)
    out[old] = [same, [str(w.message) for w in caught if issubclass(w.category, moved.MovedWarning)]]
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    found = json.loads(proc.stdout)
    assert set(found) == set(moved.MOVED)
    for old, (same, messages) in found.items():
        assert same, old
        # A module that is a package now (harness.claims) warns on the names it had, not on its import.
        package_now = (ROOT / old.replace(".", "/") / "__init__.py").is_file()
        warned = f"{old}." if package_now else f"{old} moved to "
        assert any(m.startswith(warned) and "0.3" in m for m in messages), (old, messages)


def test_a_module_of_a_renamed_package_is_found_under_its_old_name():
    with pytest.warns(moved.MovedWarning, match="harness.kvalloc.traces moved to harness.kv_alloc.traces"):
        old = importlib.import_module("harness.kvalloc.traces")
    from harness.kv_alloc import traces

    assert old.load_csv is traces.load_csv


def test_a_package_that_was_a_module_still_gives_the_old_modules_names():
    from harness.claims import check

    with pytest.warns(moved.MovedWarning, match="harness.claims.check_claims moved"):
        from harness.claims import check_claims
    assert check_claims is check.check_claims
    with pytest.raises(ImportError):
        from harness.claims import no_such_name  # noqa: F401


def test_the_changelog_lists_every_move_and_only_those():
    text = (ROOT / "CHANGELOG.md").read_text()
    listed = dict(re.findall(r"^\| `(harness[\w.]*)` \| (.+?) \|$", text, re.MULTILINE))
    expected = {**{old: ", ".join(f"`{n}`" for n in news) for old, news in moved.MOVED.items()},
                **{old: f"`{new}`" for old, new in moved.MOVED_PACKAGES.items()}}
    assert listed == expected
