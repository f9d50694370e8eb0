"""The asv suite. Imported before any of its modules, so before ``harness``.

Under ``critpath history`` asv's benchmark processes must import the measured commit's own
``harness``, and nothing of it from an editable install. asv puts that tree on ``sys.path`` only
after the interpreter started (``ASV_PYTHONPATH``), too late for the ``sitecustomize`` that
drops the editable finder in every other process of a tree; so it is dropped here, and
``harness`` must then come from the tree history names in ``CRITPATH_OWN_TREE``, or the
suite refuses to load rather than file another checkout's numbers under the commit.
"""
import os

try:
    import critpath_own_tree  # on ASV_PYTHONPATH under critpath history (harness/gate/own_tree)
except ImportError:  # a plain `asv run`: the installed checkout is the one measured
    critpath_own_tree = None

if critpath_own_tree is not None:
    critpath_own_tree.drop_editable_finders()
    _tree = os.environ.get(critpath_own_tree.TREE_ENV)
    critpath_own_tree.guard_imports(_tree)
    if _tree:
        import harness

        _file = os.path.realpath(harness.__file__)
        if not _file.startswith(os.path.join(os.path.realpath(_tree), "")):
            raise ImportError(f"benchmarks: harness is imported from {_file}, not from the tree being measured, "
                              f"{_tree}; another copy shadows it on sys.path")
