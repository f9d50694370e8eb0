"""Baselines: every file validates, every claim of the source articles is there exactly once, and
every mapping that says it can be measured names a family, parameters and case the registry has."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.claims import baselines
from harness.claims.baselines import BaselineError, load_dir, load_file
from harness.cli import main

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


GOOD = FIXTURES.joinpath("baselines_fixture.yaml")


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    text = GOOD.read_text()
    assert text.count(old) == 1, old
    (tmp_path / "b").mkdir(exist_ok=True)
    path = tmp_path / "b" / "claims.yaml"
    path.write_text(text.replace(old, new))
    return path


# A mapping no record can meet: the loader every reader uses (report --baselines, critpath
# baselines, history's reference lines) refuses it, naming file, line and field, by the family's
# own Param declarations; before, report took it and said "no rpc record matches" of every run.
@pytest.mark.parametrize("old, new, line, field, why", [
    ("family: allreduce\n      statistic", "family: nosuchfamily\n      statistic", 21, "claims.0.measure.family",
     "family 'nosuchfamily' is not in the registry (mark the claim pending)"),
    ("case: allreduce/algo=ring,", "case: allreduce/colour=red,", 37, "claims.1.measure.case",
     "family 'allreduce' has no key 'colour'"),
    ("select: {algo: ring}", "select: {algo: ring, bogus: 1}", 38, "claims.1.measure.select.bogus",
     "family 'allreduce' has no parameter 'bogus'; its parameters: "),
    ("select: {algo: ring}", "select: {algo: rign}", 38, "claims.1.measure.select.algo",
     "'rign' is no value of allreduce.algo, which is one of native, ring, tree; did you mean 'ring'?"),
    ("select: {algo: ring}", "select: {algo: [ring, tree, ring]}", 38, "claims.1.measure.select.algo.2",
     "'ring' is given twice in the list of algo"),
    ("select: {algo: ring}", "select: {size_bytes: 8.5}", 38, "claims.1.measure.select.size_bytes",
     "8.5 is not int: allreduce.size_bytes is declared int"),
    ("select: {algo: ring}", "select: {size_bytes: 0}", 38, "claims.1.measure.select.size_bytes",
     "0 is no value of allreduce.size_bytes, which is in [1, "),
])
def test_a_mapping_no_record_can_meet_is_refused_by_every_reader_naming_file_line_and_field(
        tmp_path, capsys, old, new, line, field, why):
    path = _edited(tmp_path, old, new)
    with pytest.raises(BaselineError) as info:
        load_file(path)
    assert str(info.value).startswith(f"{path}:{line}: field {field}: claim A9."), info.value
    assert why in str(info.value), info.value
    for argv in (["baselines", "--dir", str(path.parent)],
                 ["report", "--baselines", str(path.parent), "--asv-results", str(FIXTURES / "asv_results"),
                  "--out", str(tmp_path / "report")]):
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1, captured  # the error alone, first
        assert f"{path}:{line}: field {field}: " in captured.err and why in captured.err, captured.err


def test_a_pending_mapping_of_a_family_not_yet_in_the_registry_loads(tmp_path):
    path = _edited(tmp_path, "status: available\n      family: allreduce\n      statistic",
                   "status: pending\n      family: nosuchfamily\n      statistic")
    assert load_file(path)[0].measure.status == "pending"


def test_bound_claims_say_which_side_is_good():
    for claim in load_dir():
        if claim.measure.compare == "bound":
            assert claim.value is not None or claim.after is not None, claim.id
            assert claim.relation in ("<", "<=", ">", ">=") or claim.direction != "none", claim.id


@pytest.mark.parametrize(
    "old,new,line,field",
    [
        ("direction: lower", "direction: sideways", 15, "claims.0.direction"),
        ("    unit: us\n", "", 10, "claims.0.unit"),
        ("status: available", "status: maybe", 20, "claims.0.measure.status"),
        ("file: 000_c5026049f14ef9b1.txt", "file: ../seeds/x.txt", 4, "article.file"),
        ("  title_en: a fixture\n", "", 2, "article.title_en"),
        ("  measured_on: nothing, a fixture\n", "", 2, "article.measured_on"),
        ("  attribution: a fixture of the test suite\n", "", 2, "article.attribution"),
        ('    section_en: "1.1"\n', "", 10, "claims.0.section_en"),
        ("  short: fixture\n", "  short: fixture\n  topic: a key the schema does not know\n", 6, "article.topic"),
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


def test_an_english_field_refuses_cjk_and_says_why(tmp_path):
    # The English fields are what a report shows where no CJK font is installed: a heading pasted
    # untranslated would render as boxes there.
    path = tmp_path / "x.yaml"
    path.write_text(GOOD.read_text().replace('section_en: "1.2"', 'section_en: "1.2 只看流量会误判"', 1))
    with pytest.raises(BaselineError) as info:
        load_file(path)
    message = str(info.value)
    assert f"{path}:33: field claims.1.section_en:" in message, message
    assert "must be English (no CJK characters)" in message, message


def test_claims_carry_their_article_in_english():
    claims = load_dir()
    found = baselines.articles(claims)
    assert [a.file[:3] for a in found] == ["000", "001", "002", "003"]
    for claim in claims:
        assert claim.article is not None and claim.article.file == claim.article_file, claim.id
        assert claim.section_en.strip() and claim.section_en != claim.section, claim.id
    for article in found:
        assert article.title_en and article.measured_on and article.attribution.startswith("third-party"), article


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
    assert "P999 governance: P999 latency governance in practice" in out  # each article, in English
    assert "[6. Measured overall gains of the whole-stack tuning]" in out  # each claim's section, in English
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
    from harness.core import registry
    from harness.claims.check import matches
    from harness.core.family import GridOptions

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
    from harness.claims.check import matches
    from harness.core.records import Record

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


SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"  # the originals, beside a development checkout


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the source articles are not beside this checkout (shared/seeds)")
def test_every_cited_section_is_the_articles_own_text():
    """The report shows `section` as the article writes it, for a reader to find in the original:
    it must be the article's text, not critpath's paraphrase (a colon it lacks, a made-up heading)."""
    for claim in load_dir():
        text = (SEEDS / claim.article_file).read_text()
        assert claim.section in text, f"{claim.id}: {claim.section!r} is not in {claim.article_file}"
