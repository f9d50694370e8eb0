"""Cost models that extrapolate collective latency beyond the machines at hand.

- ``alphabeta``: alpha-beta(-gamma) models of allreduce algorithms, all-to-all and P2P;
- ``nccl_tuning``: NCCL's own tuning model, constants cited from NCCL's source;
- ``profile``: hardware profiles (link tiers) from YAML;
- ``calibrate``: fits alpha and beta from a measured run directory.

Every figure these produce is a model output and is labelled "modelled".
"""
