"""Alpha-beta(-gamma) formulas against hand-computed values and limiting cases."""
import math

import numpy as np
import pytest

from harness.model import alphabeta as ab

A, B = 1e-6, 1e-9  # 1 us per message, 1 ns per byte (1 GB/s)
ONE = ab.Links.single(A, B)
# Two tiers: 4 ranks per node; intra 1 us + 0.1 ns/B, inter 5 us + 1 ns/B.
TWO = ab.Links(1e-6, 1e-10, 5e-6, 1e-9, gpus_per_node=4)


@pytest.mark.parametrize("fn,p,n,expected", [
    (ab.ring, 4, 1000, 2 * 3 * A + 2 * 3 / 4 * 1000 * B),  # 7.5 us
    (ab.binomial_tree, 4, 1000, 2 * 2 * (A + 1000 * B)),  # 8 us
    (ab.binomial_tree, 5, 1000, 2 * 3 * (A + 1000 * B)),  # ceil(log2 5) = 3 levels
    (ab.double_binary_tree, 4, 1000, 2 * 2 * A + 2 * 1000 * B),  # 6 us
    (ab.rabenseifner, 4, 1000, 2 * (A + 500 * B) + 2 * (A + 250 * B)),  # 5.5 us
    (ab.rabenseifner, 6, 1000, 5.5e-6 + 2 * A + 2 * 1000 * B),  # 4-rank core + excess ranks
    (ab.alltoall_pairwise, 4, 1000, 3 * (A + 250 * B)),
])
def test_one_tier_hand_values(fn, p, n, expected):
    assert float(fn(p, n, ONE)) == pytest.approx(expected, rel=1e-12)


def test_rabenseifner_power_of_two_matches_closed_form():
    p, n = np.array([2, 8, 64, 1024])[:, None], np.array([0, 8, 1 << 20])[None, :]
    closed = 2 * np.log2(p) * A + 2 * (p - 1) / p * n * B
    np.testing.assert_allclose(ab.rabenseifner(p, n, ONE), closed, rtol=1e-12)


def test_two_tier_hand_values():
    p, n = 16, 4000  # 4 nodes x 4 ranks
    # 2(16-4) intra hops + 2(4-1) inter hops; bandwidth at the inter tier
    assert float(ab.ring(p, n, TWO)) == pytest.approx(2 * 12 * 1e-6 + 2 * 3 * 5e-6 + 2 * 15 / 16 * 4000 * 1e-9)
    # two intra levels (distance 1, 2) and two inter levels (4, 8), whole buffer each
    tree = 2 * (2 * (1e-6 + 4000 * 1e-10) + 2 * (5e-6 + 4000 * 1e-9))
    assert float(ab.binomial_tree(p, n, TWO)) == pytest.approx(tree)
    # intra ring over 4 ranks on n/4 = 1000 B, inter tree over 4 nodes on 1000 B
    hier = 2 * 3 * (1e-6 + 1000 * 1e-10) + (2 * 2 * 5e-6 + 2 * 1000 * 1e-9)
    assert float(ab.hierarchical(p, n, TWO)) == pytest.approx(hier)
    # all-to-all 8 ranks on 2 nodes, 8000 B per rank: 3 steps in the node, 4 across
    a2a = 3 * (1e-6 + 1000 * 1e-10) + 4 * (5e-6 + 1000 * 1e-9)
    assert float(ab.alltoall_pairwise(8, 8000, TWO)) == pytest.approx(a2a)
    # recursive halving over 16: distances 8, 4 cross nodes (n/2, n/4), 2, 1 do not (n/8, n/16)
    rhd = 2 * ((5e-6 + 2000e-9) + (5e-6 + 1000e-9) + (1e-6 + 500e-10) + (1e-6 + 250e-10))
    assert float(ab.rabenseifner(p, n, TWO)) == pytest.approx(rhd)


def test_inside_one_node_two_tier_equals_intra_single_tier():
    intra = ab.Links.single(1e-6, 1e-10)
    for fn in ab.ALLREDUCE_MODELS.values():
        assert float(fn(4, 4096, TWO)) == pytest.approx(float(fn(4, 4096, intra)))


def test_gamma_adds_reduction_cost():
    with_gamma = ab.Links.single(A, B, gamma_s_per_byte=2e-9)
    assert float(ab.ring(4, 1000, with_gamma) - ab.ring(4, 1000, ONE)) == pytest.approx(3 / 4 * 1000 * 2e-9)
    assert float(ab.binomial_tree(4, 1000, with_gamma) - ab.binomial_tree(4, 1000, ONE)) == pytest.approx(2 * 1000 * 2e-9)


@pytest.mark.parametrize("name", list(ab.ALLREDUCE_MODELS) + ["alltoall"])
def test_one_rank_costs_nothing(name):
    fn = ab.alltoall_pairwise if name == "alltoall" else ab.ALLREDUCE_MODELS[name]
    for links in (ONE, TWO):
        assert np.all(fn(1, np.array([0, 8, 1 << 30]), links) == 0.0)


@pytest.mark.parametrize("name,steps", [("ring", 2 * 7), ("tree", 2 * 3), ("dbtree", 2 * 3), ("rhd", 2 * 3),
                                        ("hierarchical", 2 * 7)])
def test_zero_bytes_leaves_latency_only(name, steps):
    assert float(ab.ALLREDUCE_MODELS[name](8, 0, ONE)) == pytest.approx(steps * A)


def test_p2p():
    assert float(ab.p2p(1000, A, B)) == pytest.approx(2e-6)
    assert float(ab.p2p(0, A, B)) == A


def test_sweep_shape_and_monotone_in_size():
    scales, sizes = 2.0 ** np.arange(1, 17), 2.0 ** np.arange(3, 33)
    out = ab.sweep(scales, sizes, TWO)
    assert out.shape == (5, 16, 30)
    assert np.all(np.diff(out, axis=2) >= 0)
    assert np.all(np.isfinite(out))


def test_bad_ranks_rejected():
    with pytest.raises(ValueError, match="integers >= 1"):
        ab.ring(0, 8, ONE)
    with pytest.raises(ValueError):
        ab.ring(2.5, 8, ONE)


def test_crossover():
    sizes = np.array([1, 2, 4, 8])
    assert ab.crossover_bytes(sizes, [1, 1, 1, 1], [2, 2, 0.5, 0.5]) == pytest.approx(2 ** (1 + 1 / 1.5))
    assert math.isnan(ab.crossover_bytes(sizes, [1, 1, 1, 1], [2, 2, 2, 2]))
    assert ab.crossover_bytes(sizes, [1, 1, 1, 1], [0, 0, 0, 0]) == 1.0
    # ring overtakes the binomial tree at large sizes, from a size that grows with p
    sizes = 2.0 ** np.arange(3, 31)
    small = ab.crossover_bytes(sizes, ab.binomial_tree(8, sizes, ONE), ab.ring(8, sizes, ONE))
    large = ab.crossover_bytes(sizes, ab.binomial_tree(64, sizes, ONE), ab.ring(64, sizes, ONE))
    assert 8 < small < large


from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=200, deadline=None)
@given(p=st.integers(1, 1 << 16), n=st.integers(0, 1 << 34), g=st.sampled_from([1, 2, 4, 8, 16]),
       name=st.sampled_from(sorted(ab.ALLREDUCE_MODELS)))
def test_every_model_is_finite_nonnegative_and_grows_with_size(p, n, g, name):
    links = ab.Links(1e-6, 1e-10, 5e-6, 1e-9, gpus_per_node=g, gamma_s_per_byte=1e-11)
    fn = ab.ALLREDUCE_MODELS[name]
    t0, t1 = float(fn(p, n, links)), float(fn(p, n + 4096, links))
    assert np.isfinite(t0) and t0 >= 0
    assert t1 >= t0
    if p == 1:
        assert t0 == 0.0
    else:
        # no algorithm beats the bandwidth lower bound of allreduce on the fastest link
        assert t0 >= 2 * (p - 1) / p * n * 1e-10 * (1 - 1e-12)
