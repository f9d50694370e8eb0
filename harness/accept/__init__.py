"""Hardware acceptance: a profile of thresholds and pins, each check's verdict (pass, fail, could
not verify) from a run's records and fingerprint, and ``critpath accept``.
"""
