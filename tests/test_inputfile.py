"""Inputs are checked for their kind and size before they are read (harness/core/inputfile.py)."""
from __future__ import annotations

import os
import threading

import pytest

from harness.core.inputfile import InputFileError, open_regular, read_bounded


def test_a_regular_file_within_its_limit_is_read_whole(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_bytes(b"a: 1\n")
    assert read_bounded(path, "profile", 5) == b"a: 1\n"


def test_a_file_over_its_limit_is_refused_naming_the_limit(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_bytes(b"x" * 6)
    with pytest.raises(InputFileError, match=r"p\.yaml: 6 bytes; a profile is at most 5 bytes"):
        read_bounded(path, "profile", 5)


def test_dev_zero_is_refused_without_reading_it():
    with pytest.raises(InputFileError, match="a character device, not a regular file"):
        read_bounded("/dev/zero", "results file", 1 << 30)


def test_a_fifo_is_refused_at_once_rather_than_waited_on(tmp_path):
    fifo = tmp_path / "results.jsonl"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_error_of(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    assert outcome and "a FIFO, not a regular file" in outcome[0]


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(InputFileError, match="a directory, not a regular file"):
        open_regular(tmp_path, "rules file")


def test_an_absent_file_is_left_for_the_reader_to_word(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "nope", "profile")


def _error_of(path) -> str:
    try:
        open_regular(path, "results file")
    except InputFileError as exc:
        return str(exc)
    return ""
