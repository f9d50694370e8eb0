"""The ground floor: what a case, a family, a figure and a record are, and where runs are stored.

Everything above iterates the registry and reads records through these modules; nothing here
imports from a package above it. A family author needs ``family`` (the seam), ``case``,
``figures`` and ``stats``; a reader of results needs ``records`` and ``store``.
"""
