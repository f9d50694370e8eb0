"""Import paths of critpath 0.1, kept working for one release (0.2) with a warning.

In 0.2 the flat modules of ``harness`` moved into packages by concern (CHANGELOG.md lists every
move). A script or a family of a user's that imports an old path gets the module at its new
place and a ``MovedWarning`` that names it; 0.3 drops the old paths. The table below is the one
declaration of the moves: the finder, the changelog's test and the packages that were modules
(``harness.claims``, ``harness.accept``, ``harness.history``, ``harness.nccltests``) read it.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import Any

# Old module -> where its names are now (a module split in two lists both, in lookup order).
MOVED: dict[str, tuple[str, ...]] = {
    "harness.case": ("harness.core.case",),
    "harness.family": ("harness.core.family",),
    "harness.figures": ("harness.core.figures", "harness.core.declarations"),
    "harness.registry": ("harness.core.registry",),
    "harness.records": ("harness.core.records",),
    "harness.store": ("harness.core.store",),
    "harness.stats": ("harness.core.stats",),
    "harness.sizes": ("harness.core.sizes",),
    "harness.bandwidth": ("harness.core.bandwidth",),
    "harness.yamlfile": ("harness.core.yamlfile",),
    "harness.options": ("harness.core.options",),
    "harness.verify": ("harness.core.verify",),
    "harness.comparable": ("harness.core.comparable",),
    "harness.runner": ("harness.run.runner", "harness.run.plan", "harness.run.local", "harness.run.joined",
                       "harness.run.reporter", "harness.core.options"),
    "harness.driver": ("harness.run.driver",),
    "harness.worker": ("harness.run.worker",),
    "harness.launcher": ("harness.run.launcher",),
    "harness.rounds": ("harness.run.rounds",),
    "harness.timing": ("harness.run.timing",),
    "harness.lifetime": ("harness.run.lifetime",),
    "harness.fingerprint": ("harness.run.fingerprint",),
    "harness.nodefacts": ("harness.run.nodefacts",),
    "harness.progress": ("harness.run.progress",),
    "harness.nccltests": ("harness.nccltests.importer",),
    "harness.nccltests_parse": ("harness.nccltests.parse",),
    "harness.nccltests_evidence": ("harness.nccltests.evidence",),
    "harness.nccltests_trailer": ("harness.nccltests.trailer",),
    "harness.nccltests_show": ("harness.nccltests.show",),
    "harness.table": ("harness.tables.terminal",),
    "harness.frametables": ("harness.tables.family",),
    "harness.dataframe": ("harness.tables.frame",),
    "harness.export": ("harness.tables.export",),
    "harness.baselines": ("harness.claims.baselines",),
    "harness.claims": ("harness.claims.check",),
    "harness.accept": ("harness.accept.command", "harness.accept.checks", "harness.accept.profile"),
    "harness.pins": ("harness.accept.pins",),
    "harness.verdicts": ("harness.accept.verdicts",),
    "harness.gate.power": ("harness.gatepower.power",),
    "harness.gate.inject": ("harness.gatepower.inject",),
    "harness.gate.tools": ("harness.gatepower.tools",),
    "harness.gate.resample": ("harness.gatepower.resample",),
    "harness.history": ("harness.history.campaign",),
    "harness.report.history": ("harness.history.view",),
    "harness.report.crossover": ("harness.collectives.crossover",),
    "harness.report.run": ("harness.core.store",),
    "harness.report.document": ("harness.document.blocks",),
    "harness.report.plots": ("harness.core.plotting", "harness.collectives.plots", "harness.rpc.plots",
                             "harness.pipeline.plots", "harness.moe_a2a.plots", "harness.kv_alloc.plots"),
    "harness.model.claims": ("harness.model.scale_claims",),
}
# Old package -> new package: every module under it moved with it.
MOVED_PACKAGES: dict[str, str] = {
    "harness.kvalloc": "harness.kv_alloc",
    "harness.moe": "harness.moe_a2a",
}
REMOVED_IN = "0.3"


class MovedWarning(FutureWarning):
    """An import path of critpath 0.1 that moved in 0.2. A FutureWarning, the deprecation warning
    Python shows by default: the scripts and families that import old paths are users' code, which
    a DeprecationWarning (shown only in ``__main__``) would leave silent."""


def new_places(old: str) -> tuple[str, ...]:
    """Where the module ``old`` is now; () for a path that did not move."""
    if old in MOVED:
        return MOVED[old]
    for package, new in MOVED_PACKAGES.items():
        if old == package or old.startswith(package + "."):
            return (new + old[len(package):],)
    return ()


def _warn(old: str, news: tuple[str, ...], stacklevel: int) -> None:
    # stacklevel: the frames between this call and the user's import (importlib's are not counted).
    warnings.warn(f"{old} moved to {' and '.join(news)} in critpath 0.2; the old path goes in {REMOVED_IN} "
                  "(CHANGELOG.md)", MovedWarning, stacklevel=stacklevel + 1)


def moved_attribute(package: str, name: str) -> Any:
    """``name`` of the 0.1 module that the package ``package`` replaced (``harness.claims`` was a
    module of functions before it was a package), with a warning; AttributeError when it had none."""
    news = MOVED[package]
    for new in news:
        module = importlib.import_module(new)
        if hasattr(module, name):
            _warn(f"{package}.{name}", (f"{new}.{name}",), stacklevel=3)  # here, the package's __getattr__, the user
            return getattr(module, name)
    raise AttributeError(f"module {package!r} has no attribute {name!r}")


class _Alias(importlib.abc.Loader):
    """Loads an old path as a thin module whose names are read from the new module(s)."""

    def __init__(self, news: tuple[str, ...]) -> None:
        self.news = news

    def create_module(self, spec):
        return None  # a fresh module: the new module's own __spec__ and __name__ stay untouched

    def exec_module(self, module: types.ModuleType) -> None:
        targets = [importlib.import_module(new) for new in self.news]
        _warn(module.__name__, self.news, stacklevel=2)
        if any(hasattr(t, "__path__") for t in targets):
            module.__path__ = []  # a package: its old submodules are found by the finder too

        def __getattr__(name: str) -> Any:
            for target in targets:
                if hasattr(target, name):
                    return getattr(target, name)
            raise AttributeError(f"module {module.__name__!r} (now {' and '.join(self.news)}) has no attribute {name!r}")

        module.__getattr__ = __getattr__
        module.__dir__ = lambda: sorted({n for t in targets for n in dir(t)})


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        news = new_places(fullname)
        if not news:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(news), is_package=fullname in MOVED_PACKAGES)


def install() -> None:
    """Serve the old paths, after every real finder: a path that exists is never shadowed."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
