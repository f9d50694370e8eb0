"""The sixth probe of critpath's consistency: one case spelt two ways in the gate's files, a
fingerprint.json whose layout contradicts itself and run.json options out of their declared
ranges. Each is read as the one case it names, or refused naming the file and field."""
from __future__ import annotations

import pytest

from harness.gate.config import ConfigError, load_baselines, load_config

ALLREDUCE = "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,world=2"
ALLREDUCE_REORDERED = "allreduce/world=2,algo=native,backend=gloo,dtype=float32,size_bytes=8"
NOOP = "selftest/fault_rank=0,mode=noop,world=1"
NOOP_REORDERED = "selftest/mode=noop,fault_rank=0,world=1"


# -- D10: a per-case min_effect keyed by a non-canonical spelling of the case --------------------

def test_a_case_min_effect_applies_however_its_keys_are_ordered(tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text(f"min_effect:\n  default: 0.05\n  cases:\n    '{ALLREDUCE_REORDERED}': 4.0\n")
    config = load_config(path)
    assert config.min_effect(ALLREDUCE) == 4.0
    assert config.min_effect(ALLREDUCE_REORDERED) == 4.0


def test_two_case_min_effect_keys_naming_one_case_are_refused(tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text(f"min_effect:\n  cases:\n    '{ALLREDUCE}': 3.0\n    '{ALLREDUCE_REORDERED}': 4.0\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    message = str(refused.value)
    assert message.startswith(f"{path}:4: field min_effect.cases.{ALLREDUCE_REORDERED}: ")
    assert "names the same case as" in message and ALLREDUCE in message


# -- D13: a baseline table listing one case twice under two spellings ---------------------------

def test_a_baseline_table_listing_one_case_twice_in_two_spellings_is_refused(tmp_path):
    path = tmp_path / "table.yaml"
    entry = "  - case_id: '{}'\n    statistic: p50_ns\n    value: 1000\n"
    path.write_text("baselines:\n" + entry.format(NOOP) + entry.format(NOOP_REORDERED))
    with pytest.raises(ConfigError) as refused:
        load_baselines(path)
    message = str(refused.value)
    assert message.startswith(f"{path}:5: field baselines[1]: ") and "listed twice" in message


def test_a_baseline_case_id_is_read_as_runs_spell_it(tmp_path):
    path = tmp_path / "table.yaml"
    path.write_text(f"baselines:\n  - case_id: '{NOOP_REORDERED}'\n    statistic: p50_ns\n    value: 1000\n")
    assert load_baselines(path)[0].case_id == NOOP


# -- D8: a fingerprint layout that contradicts itself ---------------------------------------------

def _fingerprint(**changes):
    layout = {"hosts": ["vm"], "local_ranks": [0, 1], "node_keys": ["vm"], "node_major": True,
              "node_of_rank": [0, 0], "nodes": 1, "ranks_per_node": [2], "uniform": True}
    fingerprint = {"world": 2, "cpu_count": 2, "cpu_usable": 2, "layout": layout}
    for name, value in changes.items():
        (layout if name in layout else fingerprint)[name] = value
    return fingerprint


def test_a_consistent_fingerprint_layout_is_read():
    from harness.core import fingerprintfile

    fingerprintfile.check(_fingerprint())
    fingerprintfile.check(_fingerprint(ranks_per_node=2, cpu_usable=1))


@pytest.mark.parametrize("changes, field, why", [
    ({"nodes": 2}, "layout.node_keys", "1 nodes, but field layout.nodes says 2"),
    ({"ranks_per_node": [1, 1]}, "layout.ranks_per_node", "2 nodes, but field layout.nodes says 1"),
    ({"ranks_per_node": [3]}, "layout.ranks_per_node", "3 ranks in all, but field world is 2"),
    ({"local_ranks": [0, 99]}, "layout.local_ranks.1", "local rank 99, but its node holds 2"),
    ({"ranks_per_node": 1, "local_ranks": [0, 1]}, "layout.local_ranks.1", "local rank 1, but its node holds 1"),
    ({"cpu_usable": 64}, "cpu_usable", "64 CPUs, but field cpu_count is 2"),
    ({"cpu_usable": 0}, "cpu_usable", "0 CPUs, but a process runs on one or more"),
])
def test_a_fingerprint_layout_that_contradicts_itself_is_refused(changes, field, why):
    from harness.core import fingerprintfile

    with pytest.raises(fingerprintfile.FingerprintError) as refused:
        fingerprintfile.check(_fingerprint(**changes))
    assert str(refused.value).startswith(f"field {field}: {why}")


# -- D14: run.json options outside the bounds the command line holds them to ---------------------

def _meta(**options):
    meta = {"schema": "critpath.run/1", "run_id": "r1", "started_at": "2026-12-03T11:34:02+00:00",
            "finished_at": "2026-12-03T11:34:07+00:00",
            "options": {"iters": 20, "warmup": 2, "sizes_bytes": [8, 64], "timeout_s": 60.0, "world": None}}
    meta["options"].update(options)
    return meta


def test_run_meta_options_at_their_declared_bounds_are_read():
    from harness.core import runmeta
    from harness.core.options import MAX_SECONDS
    from harness.core.records import MAX_SAMPLES
    from harness.core.scale import MAX_WORLD
    from harness.core.sizes import MAX_RUN_SIZE_BYTES

    runmeta.check(_meta(iters=MAX_SAMPLES, sizes_bytes=[1, MAX_RUN_SIZE_BYTES], timeout_s=MAX_SECONDS,
                        world=MAX_WORLD))


@pytest.mark.parametrize("options, field", [
    ({"iters": 10**18}, "options.iters"),
    ({"iters": 0}, "options.iters"),
    ({"sizes_bytes": [-8, 64]}, "options.sizes_bytes.0"),
    ({"sizes_bytes": [8, (16 << 30) + 1]}, "options.sizes_bytes.1"),
    ({"timeout_s": -1.0}, "options.timeout_s"),
    ({"timeout_s": 0}, "options.timeout_s"),
    ({"world": 1000000}, "options.world"),
])
def test_run_meta_options_out_of_range_are_refused(options, field):
    from harness.core import runmeta

    with pytest.raises(runmeta.RunMetaError) as refused:
        runmeta.check(_meta(**options))
    assert str(refused.value).startswith(f"field {field}: ")


def test_a_run_that_finished_before_it_started_is_refused():
    from harness.core import runmeta

    meta = _meta()
    meta["finished_at"] = "2026-12-03T11:34:01+00:00"
    with pytest.raises(runmeta.RunMetaError) as refused:
        runmeta.check(meta)
    assert str(refused.value).startswith("field finished_at: 2026-12-03T11:34:01+00:00 is before field started_at")
