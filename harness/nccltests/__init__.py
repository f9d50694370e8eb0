"""nccl-tests output as critpath records: parse a log (text table or ``-J`` JSON), work out
which collective wrote it from its own evidence, keep its trailer, and show it as it was printed.
"""
from harness.moved import moved_attribute


def __getattr__(name: str):
    # In 0.1 harness.nccltests was the module that is harness.nccltests.importer now: its names still resolve, with a warning.
    return moved_attribute(__name__, name)
