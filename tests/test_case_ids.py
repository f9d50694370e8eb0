import pytest

from harness.core import registry
from harness.core.case import Case, CaseIdError
from harness.core.family import GridOptions


def test_id_has_sorted_keys_and_is_stable():
    case = Case("allreduce", {"world": 2, "algo": "ring", "size_bytes": 8, "dtype": "float32", "backend": "gloo"})
    assert case.id == "allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=8,world=2"
    # The same parameters in another order are the same case.
    assert Case("allreduce", dict(reversed(list(case.params.items())))) == case


@pytest.mark.parametrize("profile", ["quick", "full"])
def test_every_grid_case_round_trips(profile):
    for world in (1, 2, 3):
        for family in registry.FAMILIES.values():
            for case in family.grid(GridOptions(profile=profile, world=world)):
                parsed = registry.parse(case.id)
                assert parsed == case
                assert parsed.id == case.id
                # Typed values come back typed.
                assert {k: type(v) for k, v in parsed.params.items()} == {k: type(v) for k, v in case.params.items()}


def test_ids_are_unique_within_a_grid():
    cases = registry.cases(registry.FAMILIES.values(), GridOptions(profile="full", world=4))
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(
    "bad, needle",
    [
        ("allreduce", "not of the form"),
        ("nosuch/x=1", "unknown family 'nosuch'"),
        ("allreduce/algo=ring,colour=red", "has no key 'colour'"),
        ("allreduce/size_bytes=eight", "key .size_bytes.: expected an integer"),
        ("allreduce/algo", "is not key=value"),
        ("allreduce/algo=ring,algo=tree", "given twice"),
    ],
)
def test_bad_ids_say_what_is_wrong(bad, needle):
    with pytest.raises(CaseIdError, match=needle):
        registry.parse(bad)


def test_reserved_characters_are_refused():
    with pytest.raises(ValueError):
        Case("x", {"name": "a,b"}).id


def test_family_case_checks_types():
    fam = registry.get("allreduce")
    with pytest.raises(TypeError):
        fam.case(size_bytes="8")
    with pytest.raises(KeyError):
        fam.case(colour="red")
