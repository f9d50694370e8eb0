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

``guard_imports`` then refuses any ``harness`` module that the import system would find outside
the tree (a tree that appends another checkout to a package's ``__path__``, or puts one on
``sys.path``), whenever it is imported, not only at the gate's probe. It guards the import system,
not a tree that loads a file by hand (``spec_from_file_location``, ``exec``): that tree is code
the user asked to run, and the probe's check of every loaded module is all that sees it.
"""
import os
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


class _OwnTreeOnly:
    """First on ``sys.meta_path``: finds a ``harness`` module with the finders after it, and
    refuses it, naming the module and where it was found, unless it lies inside the tree."""

    def __init__(self, tree: str):
        self.root = os.path.join(os.path.realpath(tree), "")

    def find_spec(self, name, path=None, target=None):
        if name != PACKAGE and not name.startswith(PACKAGE + "."):
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        else:
            return None  # not found anywhere: the import system says so, as it would have
        where = [spec.origin] if spec.has_location else list(spec.submodule_search_locations or ())
        outside = [w for w in where if w and not os.path.realpath(w).startswith(self.root)]
        if outside:
            raise ImportError(f"{name} would be imported from {outside[0]}, outside the tree under test, "
                              f"{self.root.rstrip(os.sep)}: something in the tree points the import there "
                              "(a package's __path__, sys.path)", name=name)
        return spec


def guard_imports(tree) -> None:
    """From now on, in this process, ``harness`` modules come from ``tree`` or not at all; a no-op
    when ``tree`` is empty (a process that is not a tree's)."""
    if tree and not any(isinstance(f, _OwnTreeOnly) for f in sys.meta_path):
        sys.meta_path.insert(0, _OwnTreeOnly(tree))
