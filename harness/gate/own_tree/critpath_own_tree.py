"""Takes an editable install's finder for ``harness`` off ``sys.meta_path``; imported, from this
directory, by the ``sitecustomize`` beside it at the start of every process of a tree, and by the
asv suite (``benchmarks/__init__.py``), whose processes asv starts without it: asv adds
``ASV_PYTHONPATH`` to ``sys.path`` only after the interpreter's start, when ``site`` has already
looked for a ``sitecustomize``.

An editable install of critpath (``pip install -e``) puts a finder on ``sys.meta_path`` that
serves any ``harness.X`` that a tree lacks from the installed checkout: a base tree from before
a package existed would import the candidate's (or main's) module and measure, or probe, the
wrong code. The tree itself comes first on the path, so its own ``harness`` is found before the
finder is asked; what is left is to take that finder away. Every other import (torch, numpy)
is found as before. Nothing here may import ``harness``: it runs before the tree is imported.
"""
import sys

PACKAGE = "harness"
TREE_ENV = "CRITPATH_OWN_TREE"  # the tree a process must import harness from, where one is set


def _serves_package(finder) -> bool:
    # setuptools' editable finder is a class in a module __editable___<dist>_finder whose MAPPING
    # names the top-level packages it serves.
    mapping = getattr(sys.modules.get(getattr(finder, "__module__", None) or ""), "MAPPING", None)
    return isinstance(mapping, dict) and PACKAGE in mapping


def drop_editable_finders() -> None:
    sys.meta_path[:] = [finder for finder in sys.meta_path if not _serves_package(finder)]
