"""The lab that measures the gate: known slowdowns committed on throwaway branches, resampling
of recorded pairs, and ``critpath gate-power``, which reports the gate's power and false-alarm
rate with their trials and binomial intervals.
"""
