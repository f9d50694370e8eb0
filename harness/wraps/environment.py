"""The slowdowns named in ``CRITPATH_INJECT_SLOWDOWN``, on the families of this process only: how
one torchrun agent, one node, is made the slow one (docs/diagnose.md)."""
from harness.gatepower.inject import from_environment as wrap

__all__ = ["wrap"]
