"""History over commits: ``critpath history A..B`` records each commit with asv (the campaign),
and the report's History section reads asv's results back (the view).
"""
from harness.moved import moved_attribute


def __getattr__(name: str):
    # In 0.1 harness.history was the module that is harness.history.campaign now: its names still resolve, with a warning.
    return moved_attribute(__name__, name)
