"""NCCL 2.7.5 tuning model against hand-computed values from tuning.cc's formulas."""
import numpy as np
import pytest

from harness.model import nccl_tuning as nt
from harness.model.profile import NcclTopology

DGX = NcclTopology(intra_hw="nvlink", n_channels=8, speed_intra_gbytes_s=24, speed_inter_gbytes_s=12, comp_cap=80)


def test_ring_ll_latency_32_gpus_4_nodes():
    # baseLat 3.6 + (62 - 6) intra hops x 0.47 x 1.8 (LL, multi-node) + 6 net hops x 2.7
    r = nt.allreduce(32, 4, 0, DGX, "ring", "LL")
    assert float(r.latency_us) == pytest.approx(3.6 + 56 * 0.47 * 1.8 + 6 * 2.7)
    assert float(r.time_us) == pytest.approx(float(r.latency_us))


def test_tree_ll_latency_32_gpus_4_nodes():
    # baseLat 4.4 + 2 x ((8 - 1) x 0.52 x 1.8 + log2(4) x 5.0)
    r = nt.allreduce(32, 4, 0, DGX, "tree", "LL")
    assert float(r.latency_us) == pytest.approx(4.4 + 2 * (7 * 0.52 * 1.8 + 2 * 5.0))


def test_ring_simple_1mib_with_plateau():
    n = 1 << 20
    lat = (8.4 + 56 * 3.4 + 6 * 9.6) * 1.9  # n >= p/16 * 64 KiB: plateau factor
    algbw = min(8 * 12, 235) * 32 / 62  # nodes > 2: inter speed; ring ratio p / nsteps
    r = nt.allreduce(32, 4, n, DGX, "ring", "Simple")
    assert float(r.time_us) == pytest.approx(lat + n / (1000 * algbw))


def test_tree_correction_factor_applied():
    n = 8192  # log2(8192 / 64) = 7 -> LL factor 0.7
    bw = min(8 * 12 * 0.9, 80.0) / 3.8 * 0.5 * 0.7
    r = nt.allreduce(32, 4, n, DGX, "tree", "LL")
    assert float(r.algbw_gbytes_s) == pytest.approx(bw)


def test_single_rank_is_free_and_broadcasts():
    t = nt.allreduce(np.array([1, 8])[:, None], np.array([1, 1])[:, None], np.array([0, 1024, 1 << 20])[None, :],
                     DGX, "ring", "LL").time_us
    assert t.shape == (2, 3)
    assert np.all(t[0] == 0) and np.all(t[1] > 0)


def test_choose_prefers_ll_small_and_simple_large():
    _, labels = nt.choose(32, 4, np.array([64, 1 << 30]), DGX)
    assert labels[0].endswith("/LL") and labels[1].endswith("/Simple")


def test_bad_inputs():
    with pytest.raises(ValueError, match="algo"):
        nt.allreduce(8, 1, 8, DGX, "collnet", "LL")
    with pytest.raises(ValueError, match="n_nodes"):
        nt.allreduce(8, 16, 8, DGX, "ring", "LL")


def test_ll128_disabled_without_nvlink():
    pci = NcclTopology("pci", 2, 12, 6, 86)
    assert nt.enabled_protocols(pci) == ("LL", "Simple")
