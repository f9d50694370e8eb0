"""Options that did not act on what the rest of the command line asked for, taken without a word:
moe-sim's shape options (and --json) with --from-run, --world and --sizes with families whose grids
never read them, a progression read one way where two fit, a run whose backend this torch cannot
start, a report of a run without its records exiting as a failed case, a cut-short usage line, an
export under another format's suffix. Each is refused (exit 2) naming what would decide it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import RUN_FINGERPRINT, derived_record

from harness.cli import COMMAND_MODULES, main

FIXTURES = Path(__file__).parent / "fixtures"
RUN = FIXTURES / "run_mixed"  # a gloo run of world 2 on one node, with moe_a2a and pipeline records
NOOP = "selftest/fault_rank=0,mode=noop,world=1"


# -- 1: moe-sim --from-run takes the shape from the run, and still writes --json -----------------------

def _copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    return run


class TestMoeSimFromRun:
    def test_shape_options_are_refused_naming_each(self, tmp_path, capsys):
        out = tmp_path / "out.json"
        assert main(["moe-sim", "--from-run", str(_copy(tmp_path)), "--json", str(out), "--worlds", "64", "--tokens",
                     "9999", "--experts", "64", "--hot-factor", "3", "--capacity-factor", "0.5"]) == 2
        assert ("critpath moe-sim: error: --worlds, --tokens, --experts, --hot-factor and --capacity-factor set what "
                "--from-run takes from the run") in capsys.readouterr().err
        assert not out.exists()

    def test_the_fitted_expert_time_is_refused_too(self, tmp_path, capsys):
        assert main(["moe-sim", "--from-run", str(_copy(tmp_path)), "--expert-us-per-pair", "3"]) == 2
        assert "error: --expert-us-per-pair set what --from-run takes" in capsys.readouterr().err

    def test_json_is_written_with_the_fitted_model_and_what_was_measured(self, tmp_path):
        out = tmp_path / "out.json"
        assert main(["moe-sim", "--from-run", str(_copy(tmp_path)), "--json", str(out), "--drift-ms", "500"]) == 0
        doc = json.loads(out.read_text())
        assert doc["source"] == "model" and doc["config"]["drift_ms"] == 500.0
        assert list(doc["results"]) == ["4"] and doc["cost_model"]["intra"]["name"] == "measured"
        assert doc["fitted_from"]["case_id"].startswith("moe_a2a/") and doc["measured"]

    def test_without_from_run_the_shape_options_still_act_and_default(self, tmp_path):
        from harness.moe_a2a.sim import SimConfig

        out = tmp_path / "sim.json"
        assert main(["moe-sim", "--worlds", "8", "--experts", "64", "--top-k", "4", "--json", str(out)]) == 0
        config = json.loads(out.read_text())["config"]
        assert config["experts"] == 64 and config["top_k"] == 4 and config["tokens"] == SimConfig.tokens


# -- 2: --world, --sizes (and list's --backend) where no selected grid reads them ----------------------

class TestGridOptionsNoGridReads:
    def test_list_refuses_both_naming_the_family(self, capsys):
        assert main(["list", "--families", "selftest", "--world", "3", "--sizes", "8:64:x2"]) == 2
        assert ("critpath list: error: --world and --sizes do not act on the quick grid of selftest: the cases are "
                "the same at any --world and --sizes; leave --world and --sizes out") in capsys.readouterr().err

    def test_run_refuses_before_anything_is_written(self, tmp_path, capsys):
        out = tmp_path / "run"
        assert main(["run", "--families", "rpc", "--world", "4", "--out", str(out)]) == 2
        assert "critpath run: error: --world does not act on the quick grid of rpc" in capsys.readouterr().err
        assert not out.exists()

    def test_list_refuses_a_backend_no_grid_reads(self, capsys):
        assert main(["list", "--families", "kv_alloc", "--backend", "nccl"]) == 2
        assert "error: --backend does not act on the quick grid of kv_alloc" in capsys.readouterr().err

    def test_an_option_some_grids_read_acts_there_and_names_the_others(self, capsys):
        assert main(["list", "--families", "selftest,sendrecv", "--world", "3"]) == 0
        out, err = capsys.readouterr()
        assert "critpath: --world does not act on the quick grid of selftest" in err and "sendrecv" not in err
        assert "world=3" in out

    def test_a_grid_that_reads_it_under_another_profile_takes_it_there(self, capsys):
        assert main(["list", "--families", "selftest", "--full", "--world", "3"]) == 0
        assert "selftest/fault_rank=2,mode=raise,world=3" in capsys.readouterr().out


# -- 3: a progression is read one way only, and ends on a term ------------------------------------------

class TestProgression:
    @pytest.mark.parametrize("text, why", [
        ("1,2,...,8", "ranks '1,2,...,8': 1,2 goes on as x2 (4, ...) or as +1 (3, ...); give a third value before "
                      "'...' (1,2,4,... or 1,2,3,...)"),
        ("3,5,...,100", "ranks '3,5,...,100': 100 is not a term of +2 from 3 (... 99, 101 ...); end it on 99 or 101"),
        ("8,16,32,...,100", "100 is not a term of x2 from 8 (... 64, 128 ...); end it on 64 or 128"),
        ("1,2,...,65536", "give a third value"),
    ])
    def test_model_refuses_what_it_would_guess(self, tmp_path, capsys, text, why):
        with pytest.raises(SystemExit) as exit_:
            main(["model", "--ranks", text, "--sizes", "8", "--no-plots", "--out", str(tmp_path / "m")])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "critpath model: error: argument --ranks: " in err and why in err, err
        assert not (tmp_path / "m").exists()

    @pytest.mark.parametrize("text, scales", [("1,2,4,...,8", (1, 2, 4, 8)), ("1,2,3,...,5", (1, 2, 3, 4, 5)),
                                              ("3,5,...,9", (3, 5, 7, 9)), ("16,8,4", (4, 8, 16))])
    def test_one_reading_is_taken(self, text, scales):
        from harness.model.command import parse_ranks

        assert parse_ranks(text) == scales


# -- 4: a report of a run without the records it reads could not run: exit 2, not a failed case ----------

def _noop_run(path: Path) -> Path:
    """A whole run of one selftest record: no pipeline or moe_a2a record to compare."""
    from harness.core.store import RunDir, planned_digest

    run = RunDir(path, "noop")
    run.append(derived_record(NOOP, [1000, 1100, 1200], run_id="noop"))
    run.write_fingerprint(RUN_FINGERPRINT)
    run.write_meta({"schema": "critpath.run/1", "run_id": "noop", "state": "finished", "cases_total": 1,
                    "cases_planned_sha256": planned_digest([NOOP]), "cases_ok": 1, "cases_failed": 0})
    return run.path


@pytest.mark.parametrize("command, why", [
    (["pipeline-compare"], "no pair of ok pipeline records differing only in schedule"),
    (["moe-report"], "holds no passing moe_a2a records"),
    (["moe-sim", "--from-run"], "no passing moe_a2a uniform case"),
])
def test_a_report_of_a_run_without_its_records_exits_2(tmp_path, capsys, command, why):
    run = _noop_run(tmp_path / "run")
    assert main([*command, str(run)]) == 2
    err = capsys.readouterr().err
    assert f"critpath {command[0]}: error: {run}" in err and why in err


# -- 5: a backend this torch or host cannot start is refused before any case runs ----------------------

class TestBackendUnavailable:
    def test_a_torch_without_nccl_refuses_the_run_and_writes_nothing(self, tmp_path, capsys, monkeypatch):
        import torch.distributed as dist

        monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
        out = tmp_path / "run"
        assert main(["run", "--case", NOOP, "--backend", "nccl", "--out", str(out)]) == 2
        assert ("critpath run: error: --backend nccl cannot run here: this torch build has no nccl backend "
                "(torch.distributed.is_nccl_available() is False); --backend gloo runs on any host") \
            in capsys.readouterr().err
        assert not out.exists()

    def test_fewer_cuda_devices_than_ranks_is_refused(self, monkeypatch):
        import torch
        import torch.distributed as dist

        from harness.run.worker import backend_unavailable, pick_backend

        monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        assert backend_unavailable("nccl", 1) == ""
        assert backend_unavailable("nccl", 2) == ("NCCL runs each rank on a CUDA device of its own: 2 rank(s) on this "
                                                  "host, 1 CUDA device(s)")
        assert pick_backend(None, 0) == "nccl" and pick_backend(None, 1) == "gloo"
        monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
        assert pick_backend(None, 0) == "gloo"  # a GPU, but a torch that cannot drive it

    def test_a_joined_rank_refuses_it_before_the_ranks_meet(self, tmp_path, capsys, monkeypatch):
        import torch.distributed as dist
        from conftest import free_port

        monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
        for name, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                            "MASTER_PORT": str(free_port())}.items():
            monkeypatch.setenv(name, value)
        out = tmp_path / "run"
        assert main(["run", "--case", NOOP, "--backend", "nccl", "--out", str(out)]) == 2
        assert "critpath run: error: --backend nccl cannot run here" in capsys.readouterr().err
        assert not out.exists()


# -- 6: the usage line of one command's error lists every command ----------------------------------

def test_a_usage_error_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["list", "--case", "X"])
    assert exit_.value.code == 2
    every = ",".join(command for commands in COMMAND_MODULES.values() for command in commands)
    assert f"{{{every}}}" in capsys.readouterr().err


# -- 7: an export under another format's suffix ----------------------------------------------------

@pytest.mark.parametrize("fmt, name", [("json", "x.csv"), ("csv", "x.JSON"), ("csv", "x.parquet")])
def test_export_refuses_an_out_named_for_another_format(tmp_path, capsys, fmt, name):
    out = tmp_path / name
    assert main(["export", "--format", fmt, "--out", str(out), str(RUN)]) == 2
    named = Path(name).suffix.lower()[1:]
    assert (f"critpath export: error: --out {out} names {named}, but --format is {fmt}; name it "
            f"{out.with_suffix('.' + fmt)} or give --format {named}") in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("name", ["x.json", "x.txt", "x"])
def test_export_writes_an_out_its_suffix_agrees_with_or_names_no_format(tmp_path, name):
    out = tmp_path / name
    assert main(["export", "--format", "json", "--out", str(out), str(RUN)]) == 0
    assert json.loads(out.read_text())["runs"]
