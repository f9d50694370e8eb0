"""A statistic given in a file is text: a gate or compare config, a gate's baseline table, an
acceptance profile and a baselines claim refuse ``statistic: true``, ``null`` or ``1e2``, quoting it
as the file writes it: str() of it would be a name nobody wrote ('True', 'None', '100.0')."""
from __future__ import annotations

import pytest

from harness.cli import main
from test_bounded_inputs import NOOP, PROFILE
from test_gate_refusals import _run

NOT_TEXT = ["true", "null", "1e2", "99", "[p99_ns]"]


@pytest.mark.parametrize("value", NOT_TEXT)
def test_a_gate_config_statistic_that_is_not_text_is_refused_as_written(tmp_path, capsys, value):
    base, cand = _run(tmp_path / "r1", "r-1"), _run(tmp_path / "r2", "r-2", seed=1)
    config = tmp_path / "gate.yaml"
    config.write_text(f"alpha: 0.05\nstatistic: {value}\n")
    assert main(["compare", str(base), str(cand), "--config", str(config), "--out", str(tmp_path / "out")]) == 2
    written = "a list" if value.startswith("[") else value
    assert (f"{config}:2: field statistic: expected a string (a statistic's name), got {written}"
            in capsys.readouterr().err)


@pytest.mark.parametrize("value", NOT_TEXT)
def test_a_baseline_table_statistic_that_is_not_text_is_refused_under_its_own_field(tmp_path, value):
    from harness.gate.config import ConfigError, load_baselines

    table = tmp_path / "T.yaml"
    table.write_text(f'baselines:\n  - case_id: "{NOOP}"\n    statistic: {value}\n    value: 110\n')
    written = "a list" if value.startswith("[") else value
    with pytest.raises(ConfigError) as refused:
        load_baselines(table)
    assert str(refused.value) == (f"{table}:3: field baselines[0].statistic: expected a string (a statistic's name), "
                                  f"got {written}")


def test_an_acceptance_check_and_a_claim_statistic_that_is_not_text_is_refused_as_written(tmp_path):
    from pathlib import Path

    from harness.accept.profile import ProfileError, load_profile
    from harness.claims.baselines import BaselineError, load_file

    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE.format(case=NOOP, bound="max: 5").replace("p50_us", "true"))
    with pytest.raises(ProfileError, match=rf"^{path}:7: field checks.0.statistic: expected a string "
                                           r"\(a statistic's name\), got true$"):
        load_profile(path)
    shipped = Path(__file__).resolve().parents[1] / "baselines" / "002_p999_governance.yaml"
    claim = tmp_path / "claim.yaml"
    claim.write_text(shipped.read_text().replace("statistic: p999_ms", "statistic: 1e2", 1))
    with pytest.raises(BaselineError, match=r"measure.statistic: expected a string \(a statistic's name\), got 1e2$"):
        load_file(claim)
