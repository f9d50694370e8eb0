"""Collectives built from point-to-point operations (ring and tree AllReduce on CPU), the node
layout and pair rounds of the tier families, and the ring/tree crossover read off their records.
"""
