

def test_cli_comparison_with_labels(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["report", str(RUN), str(RUN), "--label", "cluster-a", "--label", "cluster-b", "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert text.startswith("# critpath comparison: cluster-a vs cluster-b")
    # Same plots, overlaid: one image per plot, not one per run.
    assert text.count("![AllReduce latency vs message size]") == 1
    assert main(["report", str(RUN), str(RUN), "--label", "only-one", "--out", str(out)]) == 2
    assert "--label given 1 times for 2 runs" in capsys.readouterr().err
