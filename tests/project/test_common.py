"""common.py: how the project's steps run commands, and how its scripts end."""

import json
import sys

import pytest

import common
from fixture_paths import ELMO_FIXTURE

PRINT_THREADS = "import os; print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('MKL_NUM_THREADS'))"


@pytest.mark.slow
def test_run_caps_the_math_threads_and_passes_a_failure_through(tmp_path):
    log = tmp_path / "run.log"
    assert common.run(["python", "-c", PRINT_THREADS], threads=3, log=log) >= 0
    assert log.read_text().split() == ["3", "3"]
    with pytest.raises(SystemExit) as failed:
        common.run([sys.executable, "-c", "import sys; sys.exit(5)"])
    assert failed.value.code == 5


@pytest.mark.slow
def test_timed_records_the_wall_time_of_a_command_that_succeeds(tmp_path):
    output = tmp_path / "timing" / "ok.json"
    common.timed(output, ["python", "-c", "pass"])
    record = json.loads(output.read_text())
    assert record["command"] == ["-c", "pass"] and record["wall_time_s"] >= 0
    with pytest.raises(SystemExit):
        common.timed(tmp_path / "failed.json", ["python", "-c", "import sys; sys.exit(1)"])
    assert not (tmp_path / "failed.json").exists()


def test_expected_failures_end_a_script_with_their_message():
    with pytest.raises(SystemExit, match="^error: no such file$"):
        with common.exit_on():
            raise FileNotFoundError("no such file")
    with pytest.raises(KeyError):
        with common.exit_on(ValueError):
            raise KeyError("not expected")


def test_spacys_own_commands_run_in_this_process_with_the_thread_cap_and_their_failures(tmp_path, capsys):
    import torch

    threads = torch.get_num_threads()
    log = tmp_path / "info.log"
    assert common.run(["python", "-m", "spacy", "info"], threads=1, log=log) >= 0
    assert "spaCy version" in log.read_text(encoding="utf-8")  # its output went to the log, not to ours
    assert torch.get_num_threads() == threads  # the cap ends with the command
    missing = tmp_path / "missing.cfg"
    with pytest.raises(SystemExit) as failed:
        common.run(["python", "-m", "spacy", "train", str(missing)], threads=1, log=tmp_path / "train.log")
    assert failed.value.code == 2 and torch.get_num_threads() == threads  # click's status for a bad argument
    assert "does not exist" in (tmp_path / "train.log").read_text(encoding="utf-8")
    said = capsys.readouterr().err
    assert f"spacy train {missing}" in said and "train.log" in said


def test_the_packages_own_commands_run_in_this_process_and_their_failures_exit(tmp_path, capsys):
    log = tmp_path / "verify.log"
    common.run(["python", "-m", "spacy_elmo", "verify", str(ELMO_FIXTURE)], threads=1, log=log)
    assert log.read_text(encoding="utf-8").rstrip().endswith("ok")
    with pytest.raises(SystemExit) as failed:
        common.run(["python", "-m", "spacy_elmo", "verify", str(tmp_path / "nothing")], log=tmp_path / "bad.log")
    assert failed.value.code == 1 and "nothing" in (tmp_path / "bad.log").read_text(encoding="utf-8")
    assert "spacy_elmo verify" in capsys.readouterr().err
