"""Hardware acceptance: a profile of thresholds and pins, each check's verdict (pass, fail, could
not verify) from a run's records and fingerprint, and ``critpath accept``.
"""
from harness.moved import moved_attribute


def __getattr__(name: str):
    # In 0.1 harness.accept was the module that is harness.accept.command now: its names still resolve, with a warning.
    return moved_attribute(__name__, name)
