import pytest

from harness.core.bandwidth import algbw_gbps, bus_factor, busbw_gbps


@pytest.mark.parametrize(
    "collective, world, factor",
    [
        ("allreduce", 1, 0.0),
        ("allreduce", 2, 1.0),
        ("allreduce", 4, 1.5),
        ("allreduce", 8, 1.75),
        ("allgather", 4, 0.75),
        ("reducescatter", 8, 0.875),
        ("alltoall", 2, 0.5),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("sendrecv", 2, 1.0),
    ],
)
def test_bus_factors_match_nccl_tests(collective, world, factor):
    assert bus_factor(collective, world) == pytest.approx(factor)


def test_algbw_is_bytes_per_second_in_1e9():
    assert algbw_gbps(1_000_000_000, 1.0) == pytest.approx(1.0)
    assert algbw_gbps(1 << 20, 1e-3) == pytest.approx(1.048576)


def test_busbw_applies_factor():
    # 8 ranks, 1 GB in 1 s: algbw 1 GB/s, busbw 2*7/8 = 1.75 GB/s (nccl-tests PERFORMANCE.md).
    assert busbw_gbps("allreduce", 8, 1_000_000_000, 1.0) == pytest.approx(1.75)


def test_rejects_nonsense():
    with pytest.raises(ValueError):
        bus_factor("allreduce", 0)
    with pytest.raises(ValueError):
        bus_factor("scan", 2)
    with pytest.raises(ValueError):
        algbw_gbps(8, 0.0)
