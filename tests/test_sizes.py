import pytest

from harness.core.sizes import format_size, parse_size, parse_sizes


def test_multiplicative_sweep_like_nccl_tests():
    assert parse_sizes("8:64:x2") == (8, 16, 32, 64)
    assert parse_sizes("8:64M:x2")[-1] == 64 << 20
    assert len(parse_sizes("8:64M:x2")) == 24


def test_additive_and_list():
    assert parse_sizes("1K:4K:+1K") == (1024, 2048, 3072, 4096)
    assert parse_sizes("1M,8,1K") == (8, 1024, 1 << 20)


@pytest.mark.parametrize("bad", ["", "8:4:x2", "8:64:x1", "8:64:*2", "a:b:x2", "8:64", "1Q"])
def test_bad_specs_raise(bad):
    with pytest.raises(ValueError):
        parse_sizes(bad)


def test_units_are_binary():
    assert parse_size("4K") == 4096
    assert parse_size("1G") == 1 << 30
    assert format_size(1 << 20) == "1M"
    assert format_size(1000) == "1000"
