"""Every output written atomically, never over an input, never through a planted link, into a
directory one process holds; a refused start leaves its --out as it found it."""
from __future__ import annotations

import pytest
from conftest import derived_record

from harness.cli import main
from harness.core.options import UsageError
from harness.core.store import RESULTS, append_record

OK_CASE = "selftest/fault_rank=0,mode=noop,world=1"


# -- records never go through a link ----------------------------------------------------------------

def test_a_run_refuses_a_dangling_results_link_and_writes_nothing_through_it(tmp_path, capfd):
    """`run --out L1` with L1/results.jsonl a link to nothing exited 0 and created the link's
    target, outside the claimed directory, holding the records."""
    out, victim = tmp_path / "L1", tmp_path / "victim1"
    out.mkdir()
    (out / RESULTS).symlink_to(victim)
    assert main(["run", "--case", OK_CASE, "--iters", "5", "--out", str(out)]) == 2
    assert f"{out} already holds a run ({out / RESULTS})" in capfd.readouterr().err
    assert not victim.exists() and not victim.is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [RESULTS] and (out / RESULTS).is_symlink()


@pytest.mark.parametrize("target", ["missing", "existing"])
def test_a_record_is_never_appended_through_a_link(tmp_path, target):
    victim = tmp_path / "victim"
    if target == "existing":
        victim.write_text("mine\n")
    (tmp_path / RESULTS).symlink_to(victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        append_record(tmp_path / RESULTS, derived_record(OK_CASE, range(1000, 1100)))
    assert (victim.read_text() == "mine\n") if target == "existing" else not victim.exists()
