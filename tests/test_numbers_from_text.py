"""Numbers critpath reads from text (case IDs, options, size sweeps, launcher variables) go through
the one grammar of harness.core.numbers, each within the one declaration of its range."""
from __future__ import annotations

import pytest

from harness.cli import main
from harness.core import registry
from harness.core.case import CaseIdError

ALLREDUCE = "allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes={},world=1"


# -- case IDs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, why", [("٣", "expected an integer"), ("1_000", "expected an integer"),
                                       ("+8", "expected an integer"), ("08", "has a leading zero"),
                                       ("9" * 30, "outside the range it may take")])
def test_a_case_id_number_in_another_spelling_names_no_case(text, why):
    with pytest.raises(CaseIdError, match=rf"^case ID '.*': key 'size_bytes': .*{why}"):
        registry.parse(ALLREDUCE.format(text))


def test_a_case_id_float_is_finite_and_ascii():
    case_id = ("kv_alloc/allocator=caching,block_tokens=16,budget_gb=1,model=7b,policy=per_block,requests=1,"
               "speedup={},trace=azure_conv")
    assert registry.parse(case_id.format("2.5")).params["speedup"] == 2.5
    for text in ("1e400", "nan", "٣.5", "1_0.5"):
        with pytest.raises(CaseIdError, match="key 'speedup': "):
            registry.parse(case_id.format(text))


def test_critpath_run_refuses_such_a_case_id_with_exit_2_naming_the_key(tmp_path, capsys):
    assert main(["run", "--case", ALLREDUCE.format("1_024"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "key 'size_bytes': expected an integer" in err and "'1_024'" in err
    assert not (tmp_path / "run").exists()
