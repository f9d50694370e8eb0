"""Imported by Python's ``site`` at the start of every process of a tree that the gate, history or
gate-power starts: this directory leads their PYTHONPATH (``harness.gate.trees.Tree.env``), and
their children inherit it (rank pools, servers). It takes an editable install's finder for
``harness`` away, and refuses a ``harness`` module found outside the tree (``critpath_own_tree``,
beside it, says why). Nothing here may import
``harness``: it runs before the tree is imported.
"""
import importlib.machinery
import importlib.util
import os
import sys

import critpath_own_tree

_HERE = os.path.dirname(os.path.abspath(__file__))


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
    critpath_own_tree.drop_editable_finders()
    critpath_own_tree.guard_imports(os.environ.get(critpath_own_tree.TREE_ENV))
