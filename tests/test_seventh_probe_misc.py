"""Input that was taken without a word: an acceptance profile's backend never held to the run, asv
result files that contradict their names or hold values no figure can take, model and run options
that do nothing, a joined rank's launcher variables that contradict each other, one label for two
runs. Each is refused, or warned and skipped, naming what it was."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.accept.pins import pin_outcomes
from harness.accept.verdicts import EXIT_FAIL, EXIT_UNVERIFIED, FAIL, PASS, UNVERIFIED
from harness.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
RUN = FIXTURES / "run_mixed"  # a gloo run of world 2 on one node


def _write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


# -- 1: the profile's backend is pinned like its world and nodes ---------------------------------------

class TestAcceptPinsTheBackend:
    PROFILE = {
        "schema": "critpath.accept/1", "name": "p", "description": "d", "world": 2, "backend": "gloo", "nodes": 1,
        "checks": [{"name": "c", "family": "allreduce", "select": {"size_bytes": 1048576}, "source": "s",
                    "statistic": "p50_us", "max": 1e9}],
    }

    def _run_of(self, tmp_path: Path, backend) -> Path:
        run = tmp_path / "run"
        shutil.copytree(RUN, run)
        fp = json.loads((run / "fingerprint.json").read_text())
        if backend is None:
            fp.pop("backend")
        else:
            fp["backend"] = backend
        _write_json(run / "fingerprint.json", fp)
        return run

    def _accept(self, tmp_path: Path, run: Path) -> int:
        profile = _write_json(tmp_path / "p.yaml", self.PROFILE)  # JSON is YAML
        return main(["accept", "--profile", str(profile), "--run", str(run), "--no-report"])

    def test_a_run_of_another_backend_fails_the_pin(self, tmp_path, capsys):
        profile = _write_json(tmp_path / "p.yaml", {**self.PROFILE, "backend": "nccl"})
        assert main(["accept", "--profile", str(profile), "--run", str(self._run_of(tmp_path, "gloo")),
                     "--no-report"]) == EXIT_FAIL
        out = capsys.readouterr().out
        assert "FAIL              pin backend: backend gloo == nccl (" in out, out
        assert "threshold: pinned by the profile (backend))" in out

    def test_a_run_of_the_pinned_backend_passes_it(self, tmp_path, capsys):
        assert self._accept(tmp_path, self._run_of(tmp_path, "gloo")) == 0
        assert "PASS              pin backend: backend gloo == gloo" in capsys.readouterr().out

    def test_a_fingerprint_without_a_backend_could_not_verify_it(self, tmp_path, capsys):
        assert self._accept(tmp_path, self._run_of(tmp_path, None)) == EXIT_UNVERIFIED
        assert "pin backend: backend == gloo: the backend not recorded in the fingerprint" in capsys.readouterr().out

    def test_the_pin_comes_only_from_a_profile_that_names_a_backend(self):
        fp = {"world": 2, "backend": "nccl", "launch": "local"}
        by_name = {o.name: o.verdict for o in pin_outcomes(self.PROFILE, fp)}
        assert by_name == {"world": PASS, "backend": FAIL, "nodes": PASS}
        without = {k: v for k, v in self.PROFILE.items() if k != "backend"}
        assert "backend" not in {o.name for o in pin_outcomes(without, fp)}
        assert UNVERIFIED not in by_name.values()


# -- 2: an asv results file is taken only as what its name, its cases and its figures' units say ------

ASV = FIXTURES / "asv_results"
NATIVE = "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,world=2"
RING = "allreduce/algo=ring,backend=gloo,dtype=float32,size_bytes=1048576,world=2"
RING_REORDERED = "allreduce/world=2,algo=ring,backend=gloo,dtype=float32,size_bytes=1048576"
P50 = "bench_families.Allreduce.track_p50_us"


class TestAsvResultsAreWhatTheySay:
    def _results(self, tmp_path: Path, edit) -> tuple[Path, Path]:
        """The fixture's results with the second commit's file edited; (directory, that file)."""
        results = tmp_path / "asv"
        shutil.copytree(ASV, results)
        (path,) = (results / "ci-runner").glob("22222222-*.json")
        data = json.loads(path.read_text())
        edit(data)
        _write_json(path, data)
        return results, path

    def _report(self, tmp_path: Path, results: Path, capsys) -> str:
        assert main(["report", "--asv-results", str(results), "--out", str(tmp_path / "r")]) == 0
        return capsys.readouterr().err

    def _series(self, results: Path):
        from harness.history.view import load_history

        skipped: list = []
        return load_history(results, skipped), skipped

    def test_a_commit_hash_its_file_name_contradicts_is_skipped(self, tmp_path, capsys):
        results, path = self._results(tmp_path, lambda d: d.update(commit_hash="1" * 40))
        err = self._report(tmp_path, results, capsys)
        assert f"warning: skipped {path}: field commit_hash: {'1' * 40} is not the commit '22222222'" in err, err
        series, skipped = self._series(results)
        assert [s.path for s in skipped] == [path]
        ring = next(s for s in series if s.benchmark == P50 and s.case_id == RING)
        assert [p.commit[:8] for p in ring.points] == ["11111111", "33333333"]  # one value a commit

    def test_a_negative_latency_is_skipped_naming_the_field(self, tmp_path, capsys):
        results, path = self._results(tmp_path, lambda d: d["results"][P50][0].__setitem__(0, -214.2))
        err = self._report(tmp_path, results, capsys)
        assert f"warning: skipped {path}: field results.{P50}.result[0]: -214.2 is below zero" in err, err
        assert "(in us)" in err

    def test_a_latency_longer_than_a_case_may_run_is_skipped_naming_the_field(self, tmp_path, capsys):
        # 1e308 us was read and drawn: matplotlib's log axis overflowed, with a raw RuntimeWarning
        results, path = self._results(tmp_path, lambda d: d["results"][P50][0].__setitem__(0, 1e308))
        err = self._report(tmp_path, results, capsys)
        assert f"warning: skipped {path}: field results.{P50}.result[0]: 1e+308 us is longer than a case may run" in err
        assert "RuntimeWarning" not in err, err

    def test_a_negative_bandwidth_is_skipped_by_its_declared_unit(self, tmp_path):
        busbw = "bench_families.Allreduce.track_busbw_gbps"
        results, path = self._results(tmp_path, lambda d: d["results"][busbw][0].__setitem__(1, -1.1))
        _, skipped = self._series(results)
        assert [s.path for s in skipped] == [path] and f"results.{busbw}.result[1]" in skipped[0].message
        assert "(in GB/s)" in skipped[0].message

    def test_a_case_id_naming_no_case_is_skipped(self, tmp_path, capsys):
        results, path = self._results(tmp_path, lambda d: d["results"][P50][1].__setitem__(0, ["nosuch/x=1", RING]))
        err = self._report(tmp_path, results, capsys)
        assert f"warning: skipped {path}: field results.{P50}.params[0][0]: 'nosuch/x=1' is no case ID" in err, err
        series, _ = self._series(results)
        assert not any(s.case_id.startswith("nosuch") for s in series)

    def test_one_case_twice_in_one_file_is_skipped(self, tmp_path, capsys):
        results, path = self._results(tmp_path, lambda d: d["results"][P50][1].__setitem__(0, [RING, RING_REORDERED]))
        err = self._report(tmp_path, results, capsys)
        assert f"warning: skipped {path}: field results.{P50}.params[0][1]: '{RING_REORDERED}' is case {RING}, " \
               "as params[0][0] is" in err, err

    def test_one_case_in_another_key_order_is_one_series(self, tmp_path):
        results, _ = self._results(tmp_path, lambda d: d["results"][P50][1].__setitem__(0, [NATIVE, RING_REORDERED]))
        series, skipped = self._series(results)
        assert skipped == []
        p50 = [s for s in series if s.benchmark == P50]
        assert sorted(s.case_id for s in p50) == [NATIVE, RING]
        ring = next(s for s in p50 if s.case_id == RING)
        assert [p.commit[:8] for p in ring.points] == ["11111111", "22222222", "33333333"]


# -- 3: model options that would do nothing are refused ---------------------------------------------

class TestModelOptionsThatDoNothing:
    def _model(self, tmp_path: Path, capsys, *argv: str) -> tuple[int, str]:
        code = main(["model", "--ranks", "8,16", "--sizes", "1024", "--no-plots", "--out", str(tmp_path / "m"), *argv])
        return code, capsys.readouterr().err

    def test_an_empty_profile_name_is_refused_not_read_as_the_default(self, tmp_path, capsys):
        with pytest.raises(SystemExit) as exit_:
            self._model(tmp_path, capsys, "--profile", "")
        assert exit_.value.code == 2
        assert "argument --profile: expected a name, got ''" in capsys.readouterr().err
        assert not (tmp_path / "m").exists()

    def test_a_calibrate_tier_without_calibrate_is_refused(self, tmp_path, capsys):
        code, err = self._model(tmp_path, capsys, "--calibrate-tier", "nosuch")
        assert code == 2 and "--calibrate-tier shapes the fit of --calibrate; give --calibrate RUN_DIR too" in err, err
        assert not (tmp_path / "m").exists()

    def test_a_statistic_or_loss_without_calibrate_is_refused(self, tmp_path, capsys):
        code, err = self._model(tmp_path, capsys, "--statistic", "mean", "--loss", "cauchy")
        assert code == 2, err
        assert ("--statistic and --loss shape the fit of --calibrate; give --calibrate RUN_DIR too; "
                "leave --statistic and --loss out") in err, err
        assert not (tmp_path / "m").exists()

    def test_the_default_profile_still_models(self, tmp_path, capsys):
        code, _ = self._model(tmp_path, capsys)
        assert code == 0 and (tmp_path / "m" / "model.json").exists()


# -- 4: grid options given with --case, which names its own world and size, are refused -------------

class TestRunGridOptionsWithCase:
    CASE = "selftest/fault_rank=0,mode=noop,world=1"

    @pytest.mark.parametrize("extra, named", [
        (["--world", "3"], "--world shape"),
        (["--sizes", "8"], "--sizes shape"),
        (["--world", "3", "--sizes", "8", "--full"], "--world and --sizes shape"),
    ])
    def test_world_or_sizes_with_a_case_is_refused_naming_them(self, tmp_path, capsys, extra, named):
        out = tmp_path / "run"
        assert main(["run", "--case", self.CASE, *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"critpath run: error: {named} the grid of --families, which --case replaces" in err, err
        assert not out.exists()

    def test_a_case_still_runs_with_the_options_that_act_on_it(self, tmp_path):
        out = tmp_path / "run"
        assert main(["run", "--case", self.CASE, "--full", "--families", "rpc", "--iters", "5", "--out", str(out)]) == 0
        records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert [r["case_id"] for r in records] == [self.CASE] and records[0]["plan"]["warmup"] == 10  # --full's


# -- 5: a joined rank's node variables are held to the job's world ---------------------------------

def _free_loopback_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TestJoinedNodeVariablesAgreeWithTheWorld:
    def _job(self, **launcher) -> dict:
        return {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_loopback_port()),
                **launcher}

    @pytest.mark.parametrize("launcher, message", [
        ({"LOCAL_WORLD_SIZE": "4"}, "LOCAL_WORLD_SIZE=4: expected an integer in [1, 1], at most the 1 ranks of the "
                                    "job (WORLD_SIZE=1)"),
        ({"GROUP_RANK": "65535"}, "GROUP_RANK=65535: expected an integer in [0, 0], one of the 1 node(s) of the job "
                                  "(at most, each node holding a rank of WORLD_SIZE=1)"),
        ({"GROUP_RANK": "1", "LOCAL_WORLD_SIZE": "1"}, "GROUP_RANK=1: expected an integer in [0, 0], one of the 1 "
                                                       "node(s) of the job (WORLD_SIZE=1 / LOCAL_WORLD_SIZE=1)"),
    ])
    def test_a_node_variable_the_world_cannot_hold_is_refused_naming_both(self, launcher, message):
        from harness.core.options import UsageError
        from harness.run.joined import position

        with pytest.raises(UsageError) as err:
            position(self._job(**launcher))
        assert str(err.value) == message

    def test_the_node_rank_is_held_to_world_over_local_world(self):
        from harness.core.options import UsageError
        from harness.run.joined import position

        job = self._job(RANK="13", WORLD_SIZE="16", LOCAL_RANK="5", LOCAL_WORLD_SIZE="8", GROUP_RANK="1")
        assert position(job).rank == 13
        with pytest.raises(UsageError, match=r"^GROUP_RANK=2: expected an integer in \[0, 1\], one of the 2 node"):
            position({**job, "GROUP_RANK": "2"})

    def test_critpath_run_refuses_it_before_the_ranks_meet(self, tmp_path, monkeypatch, capsys):
        for name, value in self._job(LOCAL_WORLD_SIZE="4").items():
            monkeypatch.setenv(name, value)
        out = tmp_path / "run"
        assert main(["run", "--case", "selftest/fault_rank=0,mode=noop,world=1", "--out", str(out)]) == 2
        assert "critpath run: error: LOCAL_WORLD_SIZE=4: expected an integer in [1, 1]" in capsys.readouterr().err
        assert not out.exists()


# -- 6: a label given twice would give two runs one name ----------------------------------------

class TestALabelGivenTwice:
    @pytest.mark.parametrize("command", ["show", "report"])
    def test_is_refused_naming_it(self, tmp_path, capsys, command):
        other = tmp_path / "other"
        shutil.copytree(RUN, other)
        argv = [command, "--label", "A", "--label", "A", str(RUN), str(other)]
        if command == "report":
            argv += ["--out", str(tmp_path / "r")]
        assert main(argv) == 2
        assert f"critpath {command}: error: --label 'A' is given twice; give each run its own label" in \
            capsys.readouterr().err
        assert not (tmp_path / "r").exists()
