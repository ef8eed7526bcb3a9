"""What the commands write never replaces the model they read: an output that is (or, for a directory,
holds) a file of the model is refused in one line naming it, before anything is written. (An ONNX graph
given to each command: tests/io/test_resolve.py.)"""

import re
import shutil

import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import elmo_cli

runner = CliRunner()


@pytest.fixture
def model(fixture_dir, tmp_path):
    target = tmp_path / "model"
    shutil.copytree(fixture_dir, target)
    return target


def contents(directory):
    """Every file under `directory`, by name, with its bytes: what a refused command must leave as it was."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def refused(args, said):
    done = runner.invoke(elmo_cli, [str(arg) for arg in args])
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.output
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(f"error: {said}", lines[0]), done.output


def test_export_and_convert_refuse_to_write_over_the_model_they_read(model, tmp_path, monkeypatch):
    before = contents(model)
    weights = model / "lm_weights.hdf5"
    overwrite = rf"OUTPUT: {re.escape(str(weights))} is a file of the model being read \({re.escape(str(weights))}\)"
    refused(["export", model, weights], overwrite + ": writing it would destroy the model; give another output")
    refused(["convert", model, weights], overwrite + ".*")
    holds = rf"OUTPUT: {re.escape(str(model))} holds {re.escape(str(model))}/\S+, a file of the model being read"
    for target in ("bilm-tf", "native", None):
        refused(["convert", model, model, *(["--to", target] if target else [])], holds + ": .*give another directory")
    (tmp_path / "link").symlink_to(model)  # the same directory by another name
    refused(["convert", model, tmp_path / "link", "--to", "bilm-tf"], r"OUTPUT: \S+/link holds .*")
    monkeypatch.chdir(model)  # a relative output naming the model's own weights, as the hostile test typed it
    refused(["export", ".", "lm_weights.hdf5"], r"OUTPUT: lm_weights\.hdf5 is a file of the model .*")
    assert contents(model) == before


def test_convert_to_a_new_place_still_writes(model, tmp_path):
    done = runner.invoke(elmo_cli, ["convert", str(model), str(tmp_path / "out"), "--to", "bilm-tf"])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "out" / "weights.hdf5").is_file() and (tmp_path / "out" / "options.json").is_file()
    done = runner.invoke(elmo_cli, ["convert", str(model), str(model / "native")])  # a new folder inside it
    assert done.exit_code == 0 and (model / "native" / "model.msgpack").is_file(), done.output


def test_export_to_a_directory_is_refused_in_one_line(model, tmp_path):
    (tmp_path / "outdir").mkdir()
    refused(["export", model, tmp_path / "outdir"], rf"OUTPUT: {re.escape(str(tmp_path / 'outdir'))} is a directory.*")
    assert not any((tmp_path / "outdir").iterdir())


def test_evaluate_refuses_an_output_that_is_a_file_of_the_model(model, fixture_dir):
    before = contents(model)
    options = model / "options.json"
    refused(
        ["evaluate", model, fixture_dir / "vocab_test.txt", "--output", options],
        rf"--output: {re.escape(str(options))} is a file of the model being read .*",
    )
    assert contents(model) == before
