

def test_change_claims_state_which_way_the_change_goes():
    # Without before/after figures the mapping must say which way the article says it goes.
    for claim in load_dir():
        if claim.measure.compare == "change" and claim.before is None:
            assert claim.measure.expect in ("lower", "higher"), claim.id


def test_baselines_cite_no_paths_outside_the_project():
    for path in baselines.DEFAULT_DIR.rglob("*.yaml"):
        assert "../" not in path.read_text(), path
