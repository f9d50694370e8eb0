"""Calibration recovers known alpha/beta from noisy synthetic sweeps; CLI and profiles."""
import json

import numpy as np
import pytest
from conftest import RUN_FINGERPRINT, derived_record

from harness.cli import main
from harness.model import calibrate as cal
from harness.model.command import parse_ranks
from harness.model.profile import (
    ProfileError,
    load_profile,
    parse_profile,
    shipped_profiles,
)

ALPHA_US, BETA_NS = 50.0, 0.5
SIZES = [8 << k for k in range(0, 20, 1)]  # 8 B .. 4 MiB


def _true_s(algo, p, n):
    a, b = cal.COEFFICIENTS[algo](np.float64(p))
    return a * ALPHA_US * 1e-6 + b * n * BETA_NS * 1e-9


class _Run:
    """Writes synthetic records in one go (RunDir fsyncs every line, slow on a busy disk), with
    the documents of a whole run beside them: a fit reads only whole runs."""

    def __init__(self, path, run_id):
        path.mkdir(parents=True, exist_ok=True)
        self.path, self.run_id, self.lines, self.cases, self.world = path, run_id, [], [], 1

    def append(self, record):
        from harness.core import atomic
        from harness.core.store import planned_digest

        self.lines.append(record.to_json())
        self.cases.append(record.case_id)
        self.world = max(self.world, record.world)
        (self.path / "results.jsonl").write_text("\n".join(self.lines) + "\n")
        atomic.write_json(self.path / "fingerprint.json", {**RUN_FINGERPRINT, "world": self.world}, run_writer=True)
        atomic.write_json(self.path / "run.json", {
            "schema": "critpath.run/1", "run_id": self.run_id, "state": "finished", "cases_total": len(self.cases),
            "cases_planned_sha256": planned_digest(self.cases)}, run_writer=True)


def _write_run(path, rng, noise=0.05, outliers=()):
    run = _Run(path, "synthetic")
    for algo in ("ring", "tree", "native"):
        for world in (2, 3, 4):
            for n in SIZES:
                base = _true_s("ring" if algo == "native" else algo, world, n)
                if (algo, world, n) in outliers:
                    base *= 30  # a scheduler time slice caught the whole case
                samples = base * 1e9 * rng.lognormal(0.0, noise, size=64)
                run.append(derived_record(
                    f"allreduce/algo={algo},backend=gloo,dtype=float32,size_bytes={n},world={world}", samples,
                    run_id="synthetic"))
    return path


@pytest.mark.parametrize("loss", ["linear", "soft_l1"])
def test_fit_recovers_known_alpha_beta(tmp_path, loss):
    _write_run(tmp_path / "run", np.random.default_rng(1))
    fits = cal.fit_run(tmp_path / "run", loss=loss)
    joint = {f.algo: f for f in fits if f.worlds == (2, 3, 4)}
    assert set(joint) == {"ring", "tree"}  # native has no known shape: not fitted
    for f in joint.values():
        assert f.alpha_us == pytest.approx(ALPHA_US, rel=0.05)
        assert f.beta_ns_per_byte == pytest.approx(BETA_NS, rel=0.05)
        assert f.n_heldout > 0 and f.rms_rel_error_heldout < 0.05
        assert len(f.residuals) == f.n_fit + f.n_heldout


def test_robust_fit_resists_outliers_where_plain_fit_does_not(tmp_path):
    outliers = {("ring", 2, 128), ("ring", 3, 512), ("ring", 4, 64)}
    _write_run(tmp_path / "run", np.random.default_rng(2), outliers=outliers)
    robust = cal.fit_run(tmp_path / "run", loss="soft_l1")[0]
    plain = cal.fit_run(tmp_path / "run", loss="linear")[0]
    assert robust.algo == plain.algo == "ring"
    assert robust.alpha_us == pytest.approx(ALPHA_US, rel=0.15)
    assert abs(plain.alpha_us - ALPHA_US) > abs(robust.alpha_us - ALPHA_US)
    # the outliers still show in the reported residuals
    assert min(r.rel_error for r in robust.residuals) < -0.9


def test_fit_needs_data(tmp_path):
    run = _Run(tmp_path / "none", "none")  # a whole run, of nothing a fit can use
    run.append(derived_record("selftest/fault_rank=0,mode=noop,world=1", [1000, 1100, 1200], run_id="none"))
    with pytest.raises(cal.CalibrationError, match="no ok allreduce records"):
        cal.fit_run(run.path)


def test_parse_ranks():
    assert parse_ranks("8,16,32,...,16384") == tuple(8 << k for k in range(12))
    assert parse_ranks("2,4,8,...,32") == (2, 4, 8, 16, 32)
    assert parse_ranks("3,5,...,9") == (3, 5, 7, 9)  # two values that fit one reading alone
    assert parse_ranks("8,16,24,...,48") == (8, 16, 24, 32, 40, 48)
    with pytest.raises(ValueError):
        parse_ranks("8,...,64")


def test_shipped_profiles_load_and_cite_sources():
    names = shipped_profiles()
    assert {"dgx-a100-roce", "h800-ib", "pcie-node"} <= set(names)
    for name in names:
        profile = load_profile(name)
        assert profile.sources
        for tier in profile.tiers.values():
            assert tier.source, f"{name}: tier {tier.name} has no source"


def test_profile_errors_name_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ngpus_per_node: 8\nintra: nv\ntiers:\n  nv: {kind: nvlink, alpha_us: -1, bandwidth_gbytes_s: 10}\n")
    with pytest.raises(ProfileError, match=r"bad.yaml:5: field tiers.nv.alpha_us: -1 is outside the range it may take \(from 0 to"):
        load_profile(bad)
    bad.write_text("name: x\ngpus_per_node: 8\nintra: ib\ntiers:\n  nv: {kind: nvlink, alpha_us: 1, bandwidth_gbytes_s: 10}\n")
    with pytest.raises(ProfileError, match=r"bad.yaml:3: field intra: names tier 'ib'"):
        load_profile(bad)
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ProfileError, match=r"bad.yaml:\d+: not valid YAML"):
        load_profile(bad)
    with pytest.raises(ProfileError, match="tiers.t.kind"):
        parse_profile({"name": "x", "gpus_per_node": 1, "intra": "t",
                       "tiers": {"t": {"kind": "carrier-pigeon", "alpha_us": 1, "bandwidth_gbytes_s": 1}}}, "p.yaml")


def test_cli_model_writes_modelled_outputs(tmp_path, capsys):
    out = tmp_path / "m"
    code = main(["model", "--ranks", "8,16,32,...,64", "--sizes", "8:1M:x4", "--profile", "dgx-a100-roce",
                 "--claims", "--no-plots", "--out", str(out)])
    assert code == 0
    doc = json.loads((out / "model.json").read_text())
    assert doc["source"] == "model"
    assert doc["scales"] == [8, 16, 32, 64]
    assert set(doc["modelled_time_us"]) == {"ring", "tree", "dbtree", "rhd", "hierarchical"}
    assert "2.7.5" in doc["nccl_model"]["source"]
    assert not list(out.glob("*.png"))
    text = capsys.readouterr().out
    assert "modelled" in text and "A1.tree" in text and "A2.allreduce" in text


def test_cli_model_calibrated_from_run(tmp_path, capsys):
    run = _write_run(tmp_path / "run", np.random.default_rng(3))
    out = tmp_path / "m"
    assert main(["model", "--ranks", "2,4,8", "--sizes", "8:1M:x4", "--calibrate", str(run), "--out", str(out)]) == 0
    doc = json.loads((out / "model.json").read_text())
    ring = next(f for f in doc["calibration"] if f["algo"] == "ring" and f["worlds"] == [2, 3, 4])
    assert ring["alpha_us"] == pytest.approx(ALPHA_US, rel=0.05)
    # modelled ring at p=2, 8 B: 2 alpha + 8 B * beta, from the fitted values
    expected_us = 2 * ring["alpha_us"] + 8 * ring["beta_ns_per_byte"] * 1e-3
    assert doc["modelled_time_us"]["ring"][0][0] == pytest.approx(expected_us, rel=1e-9)
    for name in ("calibration_fit.png", "modelled_time_vs_size.png", "modelled_crossover.png"):
        assert (out / name).stat().st_size > 10_000


def test_cli_model_bad_profile_exit_2(tmp_path, capsys):
    bad = tmp_path / "p.yaml"
    bad.write_text("name: x\n")
    assert main(["model", "--profile", str(bad), "--out", str(tmp_path / "m"), "--no-plots"]) == 2
    assert "p.yaml:1: field tiers: missing" in capsys.readouterr().err


def test_extrapolation_in_p_is_small_when_the_model_holds(tmp_path):
    _write_run(tmp_path / "run", np.random.default_rng(4))
    ex = {e.algo: e for e in cal.extrapolations(tmp_path / "run")}
    assert set(ex) == {"ring", "tree"}
    for e in ex.values():
        assert e.train_worlds == (2, 3) and e.test_world == 4 and e.n == len(SIZES)
        assert e.median_abs_rel_error < 0.05


def test_extrapolation_catches_alpha_that_grows_with_p(tmp_path):
    # world 4 on fewer cores than ranks: every step waits for a time slice, alpha x3
    run = _Run(tmp_path / "run", "synthetic")
    rng = np.random.default_rng(5)
    for world in (2, 3, 4):
        for n in SIZES:
            a, b = cal.ring_coefficients(np.float64(world))
            alpha = ALPHA_US * (3 if world == 4 else 1)
            t = (a * alpha * 1e-6 + b * n * BETA_NS * 1e-9) * 1e9 * rng.lognormal(0, 0.02, 32)
            run.append(derived_record(f"allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes={n},world={world}",
                                      t, run_id="synthetic"))
    (e,) = cal.extrapolations(tmp_path / "run")
    assert e.median_abs_rel_error > 0.3


def test_p2p_tiers_fit_sets_intra_and_inter_tiers(tmp_path):
    run = _Run(tmp_path / "run", "synthetic")
    rng = np.random.default_rng(6)
    truth = {"intra": (2.0, 0.01), "inter": (8.0, 0.05)}  # alpha us, beta ns/B
    for tier, (alpha_us, beta_ns) in truth.items():
        for n in SIZES:
            rtt_ns = 2 * (alpha_us * 1e3 + n * beta_ns) * rng.lognormal(0, 0.03, 64)
            run.append(derived_record(f"p2p_tiers/backend=gloo,size_bytes={n},tier={tier},world=4", rtt_ns,
                                      run_id="synthetic"))
    fits = {f.algo: f for f in cal.fit_run(tmp_path / "run")}
    for tier, (alpha_us, beta_ns) in truth.items():
        assert fits[f"p2p_{tier}"].alpha_us == pytest.approx(alpha_us, rel=0.1)
        assert fits[f"p2p_{tier}"].beta_ns_per_byte == pytest.approx(beta_ns, rel=0.1)
    out = tmp_path / "m"
    assert main(["model", "--profile", "dgx-a100-roce", "--ranks", "8,16", "--sizes", "8,1M",
                 "--calibrate", str(tmp_path / "run"), "--no-plots", "--out", str(out)]) == 0
    tiers = json.loads((out / "model.json").read_text())["profile"]["tiers"]
    assert tiers["nvlink"]["alpha_us"] == pytest.approx(2.0, rel=0.1)
    assert tiers["roce"]["alpha_us"] == pytest.approx(8.0, rel=0.1)
    assert tiers["roce"]["bandwidth_gbytes_s"] == pytest.approx(20.0, rel=0.1)


# -- contended records are withheld from the fit and counted ------------------------------------

CONTENDED_SIZES = SIZES[:18]  # 8 B .. 1 MiB


def _contended_run(path, rng, contended):
    """``_write_run``'s sweep, with the records of ``contended`` ((algo, world, size) or "all") timed
    while the loop waited for a core: most iterations a scheduler tick long, under pressure. Sizes up
    to 1 MiB: above, a tree iteration at world 4 lasts a tick of its own, and the rule cannot judge."""
    from harness.core import contention as cn

    run = _Run(path, "contended")
    for algo in ("ring", "tree"):
        for world in (2, 4):
            for n in CONTENDED_SIZES:
                samples = _true_s(algo, world, n) * 1e9 * rng.lognormal(0.0, 0.05, size=64)
                fields = {}
                if contended == "all" or (algo, world, n) in contended:
                    samples = np.concatenate([np.full(48, cn.tick_ns(250)), samples[:16]])
                    rank = cn.RankEvidence(window_ns=int(samples.sum()), pressure_source=cn.PSI, pressure_share=0.5,
                                           nivcsw=3, cpus_allowed="0-1", cpu_last=0, tick_hz=250, tick_source="assumed")
                    fields = {"contention": cn.Contention((rank,) * world)}  # each rank's evidence
                run.append(derived_record(
                    f"allreduce/algo={algo},backend=gloo,dtype=float32,size_bytes={n},world={world}", samples,
                    run_id="contended", **fields))
    return path


def test_contended_records_are_withheld_from_the_fit_and_counted(tmp_path, capsys):
    stalled = {("ring", 2, SIZES[3]), ("ring", 2, SIZES[7]), ("ring", 4, SIZES[5])}
    run = _contended_run(tmp_path / "run", np.random.default_rng(4), stalled)
    fits = {(f.algo, f.worlds): f for f in cal.fit_run(run)}
    ring, ring2, tree = fits["ring", (2, 4)], fits["ring", (2,)], fits["tree", (2, 4)]
    assert (ring.n_withheld_contended, ring2.n_withheld_contended, tree.n_withheld_contended) == (3, 2, 0)
    assert len(ring.residuals) == 2 * len(CONTENDED_SIZES) - 3 and len(tree.residuals) == 2 * len(CONTENDED_SIZES)
    assert ring.alpha_us == pytest.approx(ALPHA_US, rel=0.05)  # ticks of 4 ms would drag it
    assert ring.beta_ns_per_byte == pytest.approx(BETA_NS, rel=0.05)
    out = tmp_path / "m"
    assert main(["model", "--ranks", "2,4", "--sizes", "8:1M:x4", "--no-plots", "--calibrate", str(run),
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "3 contended records withheld from the fit (ring world 2: 2, ring world 4: 1)" in err, err
    assert "measure on a quiet machine" in err
    doc = json.loads((out / "model.json").read_text())
    assert [f["n_withheld_contended"] for f in doc["calibration"] if f["algo"] == "ring"] == [3, 2, 1]


def test_a_run_whose_every_record_is_contended_is_not_fitted(tmp_path, capsys):
    run = _contended_run(tmp_path / "run", np.random.default_rng(4), "all")
    with pytest.raises(cal.CalibrationError, match="every one of the 72 records to fit is contended"):
        cal.fit_run(run)
    out = tmp_path / "m"
    assert main(["model", "--ranks", "2,4", "--sizes", "8:1M:x4", "--no-plots", "--calibrate", str(run),
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{run}: every one of the 72 records to fit is contended" in err
    assert "measure on a quiet machine (nothing else running) and calibrate from that run" in err
    assert not out.exists()
