"""The source articles' figures (``baselines/*.yaml``) and the claims check that holds a run's
records to them: like for like, or as a bound.
"""
from harness.moved import moved_attribute


def __getattr__(name: str):
    # In 0.1 harness.claims was the module that is harness.claims.check now: its names still resolve, with a warning.
    return moved_attribute(__name__, name)
