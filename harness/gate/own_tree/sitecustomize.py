"""Imported by Python's ``site`` at the start of every process of a tree that the gate, history or
gate-power starts: this directory leads their PYTHONPATH (``harness.gate.trees.Tree.env``), and
their children inherit it (rank pools, servers, asv's benchmark processes).

An editable install of critpath (``pip install -e``) puts a finder on ``sys.meta_path`` that
serves any ``harness.X`` that a tree lacks from the installed checkout: a base tree from before
a package existed would import the candidate's (or main's) module and measure, or probe, the
wrong code. The tree itself comes first on the path, so its own ``harness`` is found before the
finder is asked; what is left is to take that finder away. Every other import (torch, numpy)
is found as before. Nothing here may import ``harness``: it runs before the tree is imported.
"""
import importlib.machinery
import importlib.util
import os
import sys

PACKAGE = "harness"
_HERE = os.path.dirname(os.path.abspath(__file__))


def _serves_package(finder) -> bool:
    # setuptools' editable finder is a class in a module __editable___<dist>_finder whose MAPPING
    # names the top-level packages it serves.
    mapping = getattr(sys.modules.get(getattr(finder, "__module__", None) or ""), "MAPPING", None)
    return isinstance(mapping, dict) and PACKAGE in mapping


def _run_shadowed_sitecustomize() -> None:
    # Leading PYTHONPATH, this file hides the interpreter's own sitecustomize (a distribution's,
    # coverage's): that one still runs, as it would have without the gate.
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    spec.loader.exec_module(module)


try:
    _run_shadowed_sitecustomize()
finally:  # after it, in case it installed a finder too
    sys.meta_path[:] = [finder for finder in sys.meta_path if not _serves_package(finder)]
