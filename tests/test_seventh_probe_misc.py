"""Input that was taken without a word: an acceptance profile's backend never held to the run, asv
result files that contradict their names or hold values no figure can take, model and run options
that do nothing, a joined rank's launcher variables that contradict each other, one label for two
runs. Each is refused, or warned and skipped, naming what it was."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

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
        assert self._accept(tmp_path, self._run_of(tmp_path, "nccl")) == EXIT_FAIL
        out = capsys.readouterr().out
        assert "FAIL              pin backend: backend nccl == gloo (" in out, out
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
