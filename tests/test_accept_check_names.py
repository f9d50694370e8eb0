"""What a check names is held at load to what a record could be: each of its ``dtypes`` to the
family's data types (as ``select.dtype`` is), its family to the families of this checkout and of an
import, and no ``select`` value null. Each loaded and then dropped a type without a word, ended
COULD NOT VERIFY, or judged "no allreduce record with all of {}"."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.accept.profile import ProfileError, load_profile

ALLREDUCE = "allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=8,world=2"


def _profile(tmp_path: Path, check: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text("schema: critpath.accept/1\nname: named\nworld: 2\n"
                    f"checks:\n  - name: p99\n{check}    statistic: p99_us\n    max: 1000\n    source: test\n")
    return path


@pytest.mark.parametrize("check, field, said", [
    (f"    case: {ALLREDUCE}\n    dtypes: [float32, float32x]\n", "checks.0.dtypes.1",
     "'float32x' is no value of allreduce.dtype, which is one of float32, float16, bfloat16"),
    ("    family: allreduce\n    select: {algo: ring}\n    dtypes: [float16, bfloat61]\n", "checks.0.dtypes.1",
     "'bfloat61' is no value of allreduce.dtype"),
    (f"    case: {ALLREDUCE.replace('allreduce', 'allredcue')}\n", "checks.0.case",
     "no family 'allredcue'; the families: allreduce, allreduce_tiers,"),
    ("    family: allredcue\n    select: {algo: ring}\n", "checks.0.family", "no family 'allredcue'; the families: "),
    ("    family: allreduce\n    select: {algo: null}\n", "checks.0.select.algo", "null is no value of allreduce.algo"),
    ("    family: allreduce\n    select: {algo: ring}\n    relative_to: {size_bytes: null}\n    dtypes: [float32]\n",
     "checks.0.relative_to.size_bytes", "null is no value of allreduce.size_bytes"),
    # a family without a data type: the check loaded and then ended COULD NOT VERIFY
    ("    case: selftest/fault_rank=0,mode=noop,world=1\n    dtypes: [float32]\n", "checks.0.dtypes",
     "family 'selftest' has no parameter 'dtype'"),
    ("    family: rpc\n    select: {}\n    dtypes: [bfloat16]\n", "checks.0.dtypes",
     "family 'rpc' has no parameter 'dtype'"),
], ids=["case-dtypes", "select-dtypes", "case-family", "family", "select-null", "relative_to-null",
        "case-no-dtype", "family-no-dtype"])
def test_a_check_naming_what_no_record_is_is_refused_at_load(tmp_path, check, field, said):
    path = _profile(tmp_path, check)
    with pytest.raises(ProfileError) as refused:
        load_profile(path)
    message = str(refused.value)
    assert f": field {field}: " in message and said in message, message
    assert message.startswith(f"{path}:"), message


@pytest.mark.parametrize("check", [
    f"    case: {ALLREDUCE}\n    dtypes: [float32, bfloat16]\n",
    "    family: nccltests_all_gather\n    select: {dtype: float64}\n",  # an import's family and type
    "    family: allreduce\n    select: {algo: [ring, native]}\n",
])
def test_a_check_naming_what_a_record_could_be_loads(tmp_path, check):
    assert load_profile(_profile(tmp_path, check))["checks"][0]["name"] == "p99"
