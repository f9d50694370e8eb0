"""A directory --out that names anything but a directory (a file, a FIFO, a device, a link to a file,
a dangling link, or a path below a file) is refused with exit 2, naming what is in the way and the
option to change, and nothing there is touched."""
from __future__ import annotations

import json
import os

import pytest
from conftest import derived_record, run_cli

from harness.core.store import RESULTS, append_record

CASE = "selftest/fault_rank=0,mode=noop,world=1"


@pytest.fixture
def finished(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    append_record(run / RESULTS, derived_record(CASE, range(1000, 1200), run_id="r1"))
    (run / "run.json").write_text(json.dumps({"schema": "critpath.run/1", "run_id": "r1", "state": "finished",
                                              "cases_total": 1}))
    return run


@pytest.fixture
def in_the_way(tmp_path):
    tmp_path = tmp_path / "w"
    tmp_path.mkdir()
    (tmp_path / "file").write_text("precious\n")
    os.mkfifo(tmp_path / "fifo")
    os.symlink("nowhere", tmp_path / "dangling")
    os.symlink("file", tmp_path / "to_file")
    return tmp_path


@pytest.mark.parametrize("name, kind", [("file", "is a file"), ("fifo", "is a FIFO"),
                                        ("dangling", "is a dangling link"), ("to_file", "is a link to a file"),
                                        ("file/below", "(its parent {tmp}/file): is a file")])
@pytest.mark.parametrize("command", ["report", "run"])
def test_an_out_that_is_not_a_directory_is_refused_naming_what_it_is(in_the_way, finished, name, kind, command):
    out = in_the_way / name
    done = run_cli(command, "--out", str(out), *([str(finished)] if command == "report" else ["--case", CASE]))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{out}" in done.stderr and kind.format(tmp=in_the_way) in done.stderr, done.stderr
    assert "not a directory; choose another --out" in done.stderr and "File exists" not in done.stderr
    assert (in_the_way / "file").read_text() == "precious\n"
    assert sorted(p.name for p in in_the_way.iterdir()) == ["dangling", "fifo", "file", "to_file"]


def test_a_device_out_is_refused_naming_it_a_device(finished):
    done = run_cli("report", "--out", "/dev/null", str(finished))
    assert done.returncode == 2 and "/dev/null: is a device, not a directory" in done.stderr, done.stderr


def test_an_out_whose_claim_file_would_pass_path_max_leaves_no_empty_directory(tmp_path, finished):
    # The directory's own path fits under PATH_MAX (4096 bytes with its NUL), its claim file's does not.
    from harness.core.claim import CLAIM_FILE

    base = tmp_path / "deep"
    room = 4095 - len(str(base)) - len(CLAIM_FILE) - 1  # what the claim file's path may still take
    parts, left = [], room + 2  # one byte past the limit
    while left > 0:
        name = "d" * min(200, left - 1 if left > 1 else 1)
        parts.append(name)
        left -= len(name) + 1
    out = base.joinpath(*parts)
    assert len(str(out)) < 4095 < len(str(out / CLAIM_FILE)) + 1
    done = run_cli("report", "--out", str(out), str(finished))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert not out.exists()
