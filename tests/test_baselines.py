"""Baselines: every file validates, every claim of the source articles is there exactly once, and
every mapping that says it can be measured names a family, parameters and case the registry has."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import baselines
from harness.baselines import BaselineError, load_dir, load_file, mapping_problems

FIXTURES = Path(__file__).parent / "fixtures"


def test_every_baselines_file_validates():
    files = sorted(baselines.DEFAULT_DIR.glob("*.yaml"))
    assert len(files) == 4
    for path in files:
        assert load_file(path), path


def test_every_claim_id_appears_exactly_once():
    expected = FIXTURES.joinpath("claim_ids.txt").read_text().split()
    ids = [c.id for c in load_dir()]
    assert sorted(ids) == sorted(expected)
    assert len(ids) == len(set(ids))


def test_claims_cite_their_article_and_section():
    for claim in load_dir():
        prefix = claim.id.split(".")[0]  # A0 -> 000_...
        assert claim.article_file.startswith(f"{int(prefix[1:]):03d}_"), claim.id
        assert claim.section.strip(), claim.id


def test_measurable_mappings_exist_in_the_registry():
    assert mapping_problems(load_dir()) == []


def test_mapping_check_catches_a_missing_family_and_case(tmp_path):
    text = FIXTURES.joinpath("baselines_bad_mapping.yaml").read_text()
    path = tmp_path / "x.yaml"
    path.write_text(text)
    problems = mapping_problems(load_file(path))
    assert any("family 'nosuchfamily' is not in the registry" in p for p in problems)
    assert any("case 'allreduce/colour=red'" in p for p in problems)
    assert any("has no parameter 'colour'" in p for p in problems)


def test_bound_claims_say_which_side_is_good():
    for claim in load_dir():
        if claim.measure.compare == "bound":
            assert claim.value is not None or claim.after is not None, claim.id
            assert claim.relation in ("<", "<=", ">", ">=") or claim.direction != "none", claim.id


GOOD = FIXTURES.joinpath("baselines_bad_mapping.yaml")


@pytest.mark.parametrize(
    "old,new,line,field",
    [
        ("direction: lower", "direction: sideways", 11, "claims.0.direction"),
        ("    unit: us\n", "", 6, "claims.0.unit"),
        ("status: available", "status: maybe", 15, "claims.0.measure.status"),
        ("file: 000_c5026049f14ef9b1.txt", "file: ../seeds/x.txt", 4, "article.file"),
    ],
)
def test_malformed_file_names_file_line_and_field(tmp_path, old, new, line, field):
    text = GOOD.read_text()
    assert old in text
    path = tmp_path / "broken.yaml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(BaselineError) as info:
        load_file(path)
    message = str(info.value)
    assert f"{path}:{line}:" in message, message
    assert f"field {field}" in message, message


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("schema: critpath.baselines/1\narticle: {file: [\n")
    with pytest.raises(BaselineError, match=r"bad.yaml:\d+: not valid YAML"):
        load_file(path)


def test_duplicate_id_across_files_is_an_error(tmp_path):
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(GOOD.read_text())
    with pytest.raises(BaselineError, match="already defined at a.yaml"):
        load_dir(tmp_path)


def test_cli_lists_and_validates(tmp_path, capsys):
    from harness.cli import main

    assert main(["baselines"]) == 0
    out = capsys.readouterr().out
    assert "69 claims:" in out and "A2.rpc_p999" in out
    (tmp_path / "bad.yaml").write_text("schema: critpath.baselines/1\narticle: {file: x, title: t}\nclaims: []\n")
    assert main(["baselines", "--dir", str(tmp_path)]) == 2
    assert "bad.yaml:3: field claims: [] should be non-empty" in capsys.readouterr().err


def test_change_claims_state_which_way_the_change_goes():
    # Without before/after figures the mapping must say which way the article says it goes.
    for claim in load_dir():
        if claim.measure.compare == "change" and claim.before is None:
            assert claim.measure.expect in ("lower", "higher"), claim.id


def test_baselines_cite_no_paths_outside_the_project():
    for path in baselines.DEFAULT_DIR.rglob("*.yaml"):
        assert "../" not in path.read_text(), path


# A note that speaks of "every ... case" or "every payload size" promises a selection that leaves
# none out; such a claim declares the rule as measure.covers, and the selection is held to it.
EVERY = re.compile(r"\bevery\b[^;]*\b(case|size)")


def test_a_note_that_says_every_declares_what_it_covers():
    for claim in load_dir():
        if EVERY.search(claim.measure.note):
            assert claim.measure.covers, f"{claim.id}: its note says 'every ...' but it declares no covers"


def test_each_selection_covers_every_default_run_case_its_claim_speaks_of():
    from harness import registry
    from harness.claims import matches
    from harness.family import GridOptions

    checked = 0
    for claim in load_dir():
        m = claim.measure
        if not m.covers:
            continue
        cases = registry.FAMILIES[m.family].grid(GridOptions())
        covered = [c for c in cases if matches(c, m.covers)]
        assert covered, f"{claim.id}: covers {m.covers} matches no case of a default run"
        missing = [c.id for c in covered if not matches(c, m.select)]
        assert not missing, f"{claim.id}: its selection {m.select} leaves out {missing}"
        checked += 1
    assert checked >= 2  # A0.fixed_cost and A2.rpc_p999 at least


def test_the_p999_bound_includes_the_sockperf_reference_case():
    claim = next(c for c in load_dir() if c.id == "A2.rpc_p999")
    from harness.claims import matches
    from harness.records import Record

    sockperf = Record(run_id="t", case_id="rpc/x", family="rpc", family_version=1,
                      params={"codec": "raw", "mode": "pingpong", "payload_bytes": 64, "reference": "sockperf",
                              "transport": "tcp_nodelay"},
                      status="ok", backend="gloo", world=1, started_at="t", wall_s=0.0, samples_ns=(1,))
    assert matches(sockperf, claim.measure.select)


def test_every_measurable_claim_states_a_tolerance_with_its_reason():
    for claim in load_dir():
        if claim.measure.status != "not_measurable":
            assert claim.measure.tolerance is not None and claim.measure.tolerance.why, claim.id


def test_a_missing_tolerance_names_its_field(tmp_path):
    text = GOOD.read_text()
    assert text.count("tolerance:") == 2
    path = tmp_path / "x.yaml"
    path.write_text("\n".join(line for line in text.splitlines() if "tolerance:" not in line) + "\n")
    with pytest.raises(BaselineError, match=r"x.yaml:\d+: field claims.[01].measure.tolerance: .tolerance. is a required property"):
        load_file(path)
