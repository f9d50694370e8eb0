"""Running cases: the options and plan of ``critpath run``, the ranks (spawned here, or joined
under torchrun or Slurm), the driver's timed loop, the gate's long-lived worker, and what a run
records about its machine (fingerprint, node facts).
"""
