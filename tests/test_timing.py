import numpy as np

from harness.run.timing import LoopPlan, PlanPolicy, time_each


def fake_clock(timestamps):
    """A generator used as the clock makes the timing loop deterministic (pytest-benchmark's trick)."""
    it = iter(timestamps)
    return lambda: next(it)


def test_time_each_with_fake_clock_is_deterministic():
    calls = []
    clock = fake_clock([0, 10, 100, 130, 1000, 1001])
    samples = time_each(lambda s: calls.append(s), "state", 3, clock)
    assert samples.tolist() == [10, 30, 1]
    assert samples.dtype == np.int64
    assert calls == ["state"] * 3


def test_plan_is_calibrated_and_clamped():
    policy = PlanPolicy(warmup=3, target_s=0.01, min_iters=5, max_iters=100)
    assert policy.decide(1_000_000) == LoopPlan(3, 10)  # 10 ms / 1 ms
    assert policy.decide(1e9) == LoopPlan(3, 5)  # never below min_iters
    assert policy.decide(1.0) == LoopPlan(3, 100)  # never above max_iters
    assert policy.decide(0.0) == LoopPlan(3, 100)  # a zero estimate does not divide by zero


def test_fixed_iters_override_calibration():
    assert PlanPolicy(warmup=0, iters=7).decide(123.0) == LoopPlan(0, 7)
