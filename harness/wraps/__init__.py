"""Wrappers the registry applies to every family as it loads it (``harness.core.registry.wrappers``).

Each module here defines ``wrap(family) -> Family`` and returns the family to use, the same one
when it has nothing to change. They run in every process that loads a family, so what they change
is seen by every way of running a case. ``environment`` applies the slowdowns named in
``CRITPATH_INJECT_SLOWDOWN``; ``critpath gate-power`` commits ``injected_slowdown`` on its
throwaway branches.
"""
