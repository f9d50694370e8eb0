"""nccl-tests output as critpath records: parse a log (text table or ``-J`` JSON), work out
which collective wrote it from its own evidence, keep its trailer, and show it as it was printed.
"""
