"""What every registered family promises about its parameters: IDs that round-trip, and a value
outside a Param's declared choices or range, a missing required key or a world that cannot hold
the case refused when the ID is parsed, before anything runs."""
from __future__ import annotations

import pytest

from harness import registry
from harness.case import CaseIdError
from harness.family import BACKENDS, GridOptions


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
    ("allreduce/algo=tree,backend=gloo,dtype=float32,size_bytes=2,world=2", "holds no float32 element"),
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


def test_a_left_out_key_reads_as_its_declared_default():
    rpc = registry.get("rpc")
    case = registry.parse("rpc/payload_bytes=64,transport=uds")
    assert rpc.value(case, "mode") == "pingpong" and rpc.value(case, "codec") == "raw" and rpc.value(case, "hops") == 0
    with pytest.raises(KeyError, match="rate_hz"):
        rpc.value(case, "rate_hz")  # no default: a case that needs it must name it
