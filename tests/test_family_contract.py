"""What every registered family promises about its parameters: IDs that round-trip, and a value
outside a Param's declared choices or range, a missing required key or a world that cannot hold
the case refused when the ID is parsed, before anything runs."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.core import registry
from harness.core.case import CaseIdError
from harness.core.family import BACKENDS, GridOptions
from harness.core.store import LoadedRun


def _grid_cases(family):
    seen = {}
    for profile in ("quick", "full"):
        for backend in BACKENDS:
            for world in (1, 2, 4, 8):
                for case in family.grid(GridOptions(profile, world, backend)):
                    seen[case.id] = case
    return list(seen.values())


def _with(case_id: str, key: str, text: str) -> str:
    family, _, body = case_id.partition("/")
    items = dict(item.split("=", 1) for item in body.split(","))
    items[key] = text
    return f"{family}/" + ",".join(f"{k}={v}" for k, v in sorted(items.items()))


def _outside(param) -> list[str]:
    """Texts a value of ``param`` may not take."""
    out = []
    if param.choices is not None:
        out.append("no_such_value" if param.type is str else "987654321")
    if param.low is not None:
        below = param.low - 1 if param.type is int else param.low - abs(param.low) - 1.0
        out.append(str(int(below)) if param.type is int else repr(below))
    if param.high is not None:
        out.append(str(int(param.high) + 1) if param.type is int else repr(param.high * 2 + 1))
    if param.type is float:
        out += ["nan", "inf"]
    return out


FAMILIES = [registry.get(name) for name in registry.FAMILIES]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_grid_ids_round_trip_and_every_bound_refuses_what_it_excludes(family):
    cases = _grid_cases(family)
    assert cases, f"{family.name}: no grid case at any profile, backend or world"
    for case in cases:
        assert registry.parse(case.id) == case
    declared = family.declared
    bounded = [p for p in declared.values() if p.choices is not None or p.low is not None or p.high is not None]
    assert bounded, f"{family.name} declares no bound on any parameter"
    for param in bounded:
        carrier = next((c for c in cases if param.name in c.params), cases[0])
        for text in _outside(param):
            bad = _with(carrier.id, param.name, text)
            with pytest.raises(CaseIdError) as refused:
                registry.parse(bad)
            message = str(refused.value)
            assert param.name in message and bad in message, message
            if "is not allowed" in message:  # the Param's own bound, not a joined rule
                assert param.allowed() in message, message


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_missing_required_key_is_refused_by_name(family):
    case = _grid_cases(family)[0]
    for param in family.declared.values():
        if not param.required:
            continue
        body = ",".join(f"{k}={v}" for k, v in case.params.items() if k != param.name)
        with pytest.raises(CaseIdError, match=f"missing key '{param.name}'"):
            registry.parse(f"{family.name}/{body}")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_declared_defaults_are_values_the_param_admits(family):
    for param in family.declared.values():
        assert not (param.required and param.default is not None), f"{family.name}.{param.name}: required with a default"
        if param.default is not None:
            assert isinstance(param.default, param.type) and param.admits(param.default), (family.name, param.name)


@pytest.mark.parametrize("case_id, why", [
    ("allreduce/algo=foo,backend=gloo,dtype=float32,size_bytes=8,world=2", "algo must be one of native, ring, tree"),
    ("allreduce/algo=tree,backend=gloo,dtype=float32,size_bytes=2,world=2",
     "size_bytes=2 is not a multiple of float32's 4 bytes; write 4"),
    # A size between whole elements: the buffer held the elements below, the figures divided the
    # bytes named, and the ID was a second one of the case below.
    ("allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=6,world=1",
     "size_bytes=6 is not a multiple of float32's 4 bytes; write 4 or 8"),
    ("allreduce/algo=native,backend=gloo,dtype=float16,size_bytes=7,world=1",
     "size_bytes=7 is not a multiple of float16's 2 bytes; write 6 or 8"),
    ("sendrecv/backend=gloo,size_bytes=6,world=2", "size_bytes=6 is not a multiple of float32's 4 bytes; write 4 or 8"),
    ("allreduce_tiers/backend=gloo,size_bytes=10,tier=intra,world=2",
     "size_bytes=10 is not a multiple of float32's 4 bytes; write 8 or 12"),
    ("p2p_tiers/backend=gloo,size_bytes=6,tier=intra,world=2",
     "size_bytes=6 is not a multiple of float32's 4 bytes; write 4 or 8"),
    ("sendrecv/backend=gloo,size_bytes=4096,world=1", "world must be >= 2"),
    ("pipeline/act_bytes=65536,backend=gloo,compute=sleep,compute_us=100,die_stage=2,microbatches=8,rtt_us=0,"
     "scenario=x,schedule=sync,world=2", "die_stage=2 is not a stage of a 2-stage pipeline"),
    ("moe_a2a/backend=gloo,bytes_per_elem=4,compute=sleep,expert_bytes=0,experts_per_rank=1,hidden=8,"
     "ns_per_token=0.0,seed=0,skew=0.0,tokens=8,top_k=4,workload=uniform,world=2", "top_k=4 exceeds the 2 experts"),
    ("moe_a2a/backend=gloo,bytes_per_elem=4,compute=sleep,expert_bytes=0,experts_per_rank=1,hidden=8,"
     "mitigation=replicate,ns_per_token=0.0,seed=0,skew=17.0,tokens=8,top_k=1,workload=hot,world=2",
     "replicate needs spare_slots >= 1"),
    ("selftest/fault_rank=2,mode=raise,world=2", "fault_rank=2 is not a rank of world 2"),
    ("rpc/codec=json,transport=tcp_nodelay", "codec=json needs a preset"),
    ("rpc/mode=openloop,payload_bytes=64,transport=tcp_nodelay", "mode=openloop needs rate_hz"),
])
def test_joined_rules_and_worlds_that_cannot_hold_the_case_are_refused(case_id, why):
    with pytest.raises(CaseIdError, match=why.replace("(", r"\(").replace(")", r"\)")):
        registry.parse(case_id)


def test_a_run_of_an_invalid_case_id_exits_2_before_anything_runs(tmp_path, capsys):
    from harness.cli import main

    out = tmp_path / "run"
    assert main(["run", "--case", "allreduce/algo=foo,backend=gloo,dtype=float32,size_bytes=8,world=2",
                 "--out", str(out)]) == 2
    assert "algo must be one of native, ring, tree" in capsys.readouterr().err
    assert not out.exists()  # no run directory: nothing started


@pytest.mark.parametrize("families", ["allreduce", "sendrecv", "allreduce_tiers", "p2p_tiers"])
@pytest.mark.parametrize("sizes", ["6,7", "1K:1040:+3"])
def test_sizes_that_are_not_whole_elements_are_refused_not_rounded_onto_one_case(families, sizes, tmp_path, capsys):
    from harness.cli import main

    out = tmp_path / "run"
    assert main(["run", "--families", families, "--sizes", sizes, "--out", str(out)]) == 2
    assert f"critpath run: error: --sizes: {families} cases hold whole float32 elements, and size_bytes=" \
        in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("families", [["--families", "allreduce"], []])  # []: the default families
def test_list_of_sizes_that_are_not_whole_elements_says_why_as_run_does(families, capsys):
    from harness.cli import main

    assert main(["list", *families, "--sizes", "1,2,3"]) == 2
    err = capsys.readouterr().err
    assert ("critpath list: error: --sizes: allreduce cases hold whole float32 elements, and size_bytes=1 is not a "
            "multiple of float32's 4 bytes; write 4") in err
    assert "no cases selected" not in err


def test_a_case_for_another_backend_than_the_run_exits_2_before_anything_runs(tmp_path, capsys):
    from harness.cli import main

    out = tmp_path / "run"
    nccl = "allreduce/algo=ring,backend=nccl,dtype=float32,size_bytes=8,world=2"
    assert main(["run", "--case", nccl, "--backend", "gloo", "--out", str(out)]) == 2
    assert (f"critpath run: error: case {nccl} is for backend 'nccl' but this run uses 'gloo': give --backend nccl, "
            "with only cases for nccl (one backend per run)") in capsys.readouterr().err
    assert not out.exists()  # refused as a plan, not a failed record of a run


def test_a_left_out_key_reads_as_its_declared_default():
    rpc = registry.get("rpc")
    case = registry.parse("rpc/payload_bytes=64,transport=uds")
    assert rpc.value(case, "mode") == "pingpong" and rpc.value(case, "codec") == "raw" and rpc.value(case, "hops") == 0
    with pytest.raises(KeyError, match="rate_hz"):
        rpc.value(case, "rate_hz")  # no default: a case that needs it must name it


# -- declared figures ---------------------------------------------------------------------------

# A unit and the word of a figure's name that carries it: "us" in step_p50_us, "gbps" in busbw_gbps.
_UNIT_WORDS = {"ns": "ns", "us": "us", "ms": "ms", "GB/s": "gbps", "GB": "gb", "bytes": "bytes", "%": "pct", "1/s": "hz"}
_TIME_WORDS = {"ns", "us", "ms"}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_figure_is_declared_once_with_its_unit_in_its_name(family):
    names = [f.name for f in family.figures]
    assert names, f"{family.name} declares no figure"
    assert len(names) == len(set(names)), f"{family.name} declares a figure twice"
    for figure in family.figures:
        words = figure.name.split("_")
        if figure.unit in _UNIT_WORDS:
            assert _UNIT_WORDS[figure.unit] in words, f"{family.name}.{figure.name}: unit {figure.unit} not in the name"
        elif figure.unit.endswith("/s"):
            assert "per" in words, f"{family.name}.{figure.name}: a rate ({figure.unit}) named without _per_"
        for word in _TIME_WORDS & set(words):
            assert figure.unit == word, f"{family.name}.{figure.name}: named in {word}, declared in {figure.unit}"


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_family_names_a_headline_figure_for_its_history(family):
    # The asv suite tracks p50, p99 and these over commits; a family without one has no history
    # of what it is for.
    headline = [f for f in family.figures if f.headline]
    assert headline, f"{family.name}: mark the figure(s) it is for with Figure(..., headline=True)"
    assert all(f.better != "neither" for f in headline), f"{family.name}: a headline figure must have a direction"


def test_every_declared_plot_and_finding_is_named_once_titled_and_callable():
    # A plot's name is its file under a report's plots/: two families sharing one would overwrite it.
    plots = [plot for family in FAMILIES for plot in family.plots]
    names = [plot.name for plot in plots]
    assert len(names) == len(set(names)), f"a plot name is declared twice: {sorted(names)}"
    for plot in plots:
        assert plot.name.isidentifier() and plot.title and callable(plot.draw), plot
    for family in FAMILIES:
        findings = [finding.name for finding in family.findings]
        assert len(findings) == len(set(findings)), f"{family.name} declares a finding twice"
        assert all(callable(finding.conclude) for finding in family.findings), family.name
    assert plots and any(family.findings for family in FAMILIES)  # the report has something to iterate


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.plots], ids=lambda f: f.name)
def test_a_family_plot_of_no_records_draws_nothing(family):
    empty = LoadedRun(Path("."), "empty", ())
    assert [plot.draw([empty]) for plot in family.plots] == [None] * len(family.plots)


def test_the_driver_fails_a_case_whose_metrics_are_not_declared_or_not_finite():
    import math

    from harness.core.case import Case
    from harness.run.driver import Collectives, run_case
    from harness.core.family import CheckResult, Family, FigureError, RankContext
    from harness.core.figures import Figure
    from harness.run.timing import PlanPolicy

    def family(figures: dict) -> Family:
        return Family(name="fig", version=1, description="returns given figures", params=(),
                      grid=lambda o: [], setup=lambda ctx, case: None, step=lambda state: None,
                      metrics=lambda case, summary, reports: figures, check=lambda state: CheckResult(0, 1),
                      figures=(Figure("time_us", "us", "lower", "the step"),))

    def run(figures: dict):
        return run_case(family(figures), Case("fig", {}), RankContext(0, 1, 0, "gloo", None), Collectives(None, 1),
                        PlanPolicy(warmup=1, target_s=1e-4, min_iters=3, max_iters=10), "t")

    assert run({"time_us": 1.0}).metrics == {"time_us": 1.0}
    with pytest.raises(FigureError, match="undeclared figure.*busbw_gbps"):
        run({"time_us": 1.0, "busbw_gbps": 3.0})
    with pytest.raises(FigureError, match="non-finite.*time_us=nan"):
        run({"time_us": math.nan})


# -- the documented one-file family --------------------------------------------------------------

def _doc_family_source() -> str:
    import re

    from conftest import ROOT

    text = (ROOT / "docs" / "writing-a-family.md").read_text()
    return re.search(r"## A whole family in one file.*?```python\n(.*?)```", text, re.S).group(1)


def _load_doc_family(path: str):
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("doc_broadcast", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.FAMILY


def _doc_family_rank(rank: int, world: int, path: str, store_path: str, results) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    from harness.run.driver import Collectives, run_case
    from harness.core.family import RankContext
    from harness.run.timing import PlanPolicy

    family = _load_doc_family(path)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    control = dist.new_group(backend="gloo")
    ctx = RankContext(rank, world, rank, "gloo", torch.device("cpu"), dist.group.WORLD)
    case = family.case(backend="gloo", root=1, size_bytes=4096, world=world)
    record = run_case(family, case, ctx, Collectives(control, world), PlanPolicy(warmup=2, target_s=0.01, min_iters=20,
                                                                                  max_iters=200), "doc")
    if rank == 0:
        results["record"] = record.to_dict()
    dist.destroy_process_group()


@pytest.mark.integration
def test_the_documented_one_file_family_is_about_60_lines_and_runs(tmp_path):
    import torch.multiprocessing as mp

    from harness.core.case import parse_case_id

    source = _doc_family_source()
    assert len(source.strip().splitlines()) <= 70
    path = tmp_path / "broadcast.py"
    path.write_text(source)
    family = _load_doc_family(str(path))
    # The contract every registered family keeps: IDs round-trip, bounds and joined rules refuse.
    for case in family.grid(GridOptions("quick", 2, "gloo")):
        assert family.check_case(parse_case_id(case.id, {"broadcast": family.declared})) == case
    with pytest.raises(CaseIdError, match="root=2 is not a rank of world 2"):
        family.case(backend="gloo", root=2, size_bytes=64, world=2)
    results = mp.Manager().dict()
    mp.spawn(_doc_family_rank, args=(2, str(path), str(tmp_path / "store"), results), nprocs=2, join=True)
    record = results["record"]
    assert record["status"] == "ok" and record["check"]["wrong"] == 0 and record["check"]["checked"] == 2 * 1024  # each rank checks its copy
    assert set(record["metrics"]) == {"time_us", "algbw_gbps", "busbw_gbps"} and record["metrics"]["busbw_gbps"] > 0


# -- every family's check can fail ----------------------------------------------------------------

# For each registered family, the test that feeds its check a wrong result and sees it fail. A new
# family is not done until it has one (the first test below keeps this table complete).
CHECK_FAILS = {
    "allreduce": "test_p2p_allreduce.py::test_allreduce_check_catches_a_sum_that_did_not_happen",
    "sendrecv": "test_pipeline_family.py::test_sendrecv_check_fails_on_data_from_the_wrong_rank",
    "pipeline": "test_pipeline_family.py::test_stage_verification_accepts_correct_data_and_counts_corruption",
    "moe_a2a": "test_moe_family.py::test_check_catches_a_wrong_expert",
    "rpc": "test_rpc_family.py::test_check_fails_when_the_echo_is_altered",
    "kv_alloc": "test_kv_alloc_family.py::test_check_fails_when_the_allocator_misreports",
    "allreduce_tiers": "test_family_contract.py::test_allreduce_tiers_check_catches_a_reduce_that_did_not_happen",
    "p2p_tiers": "test_family_contract.py::test_p2p_tiers_check_catches_a_reply_that_never_came",
    "selftest": "test_family_contract.py::test_selftest_check_catches_a_wrong_spin_sum",
}


def test_every_registered_family_has_a_test_that_its_check_can_fail():
    import importlib

    assert set(CHECK_FAILS) == set(registry.FAMILIES)
    for family, node in CHECK_FAILS.items():
        module, _, name = node.partition("::")
        assert callable(getattr(importlib.import_module(module.removesuffix(".py")), name, None)), (family, node)


class _NoWire:
    """A torch.distributed stand-in that moves no data: every check must notice."""

    def all_reduce(self, *args, **kwargs):
        return None

    def send(self, *args, **kwargs):
        return None

    def recv(self, *args, **kwargs):
        return None


def test_allreduce_tiers_check_catches_a_reduce_that_did_not_happen():
    import torch

    from harness.collectives.layout import NodeLayout
    from harness.families import allreduce_tiers
    from harness.core.family import RankContext

    ctx = RankContext(0, 2, 0, "gloo", torch.device("cpu"))
    state = allreduce_tiers.State(ctx, NodeLayout((0, 0)), None, [0, 1], torch.zeros(16), 1, _NoWire())
    result = allreduce_tiers.check(state)
    assert result.checked == 16 and result.wrong > 0 and not result.passed


def test_p2p_tiers_check_catches_a_reply_that_never_came():
    import torch

    from harness.collectives.layout import NodeLayout
    from harness.families import p2p_tiers
    from harness.core.family import RankContext

    ctx = RankContext(0, 2, 0, "gloo", torch.device("cpu"))
    state = p2p_tiers.State(ctx, NodeLayout((0, 0)), (0, 1), torch.zeros(16), _NoWire())
    result = p2p_tiers.check(state)
    assert result.checked == 16 and result.wrong > 0 and not result.passed


def test_selftest_check_catches_a_wrong_spin_sum():
    from harness.families import selftest
    from harness.core.family import RankContext

    state = selftest.setup(RankContext(0, 1, 0, "gloo", None), registry.parse(
        "selftest/fault_rank=0,mode=spin,spin_iters=100,world=1"))
    selftest.step(state)
    assert selftest.check(state).passed
    state.spin_sum += 1  # a step that computed the wrong answer
    assert not selftest.check(state).passed
