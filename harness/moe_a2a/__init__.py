"""Mixture-of-experts expert-parallel all-to-all: routing workloads, imbalance metrics, placement
(EPLB-style replication), routing onto placed slots, and an event-level model for scale.

Everything here is plain numpy and deterministic given a seed, so the measured family
(``harness.families.moe_a2a``), the simulator (``harness.moe_a2a.sim``) and the tests share it.
"""
