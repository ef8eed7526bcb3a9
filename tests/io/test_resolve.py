"""Resolving what a user points at: a shipped name, "" (the default), a native or bilm-tf directory, an
.hdf5 file; every error names the path and the option it came from."""

import shutil

import pytest

from spacy_elmo.io.native import save_native
from spacy_elmo.io.resolve import DEFAULT_MODEL, available_models, load_bilm, resolve_model, shipped_model_path


def test_the_default_and_a_shipped_name_are_the_shipped_native_model():
    assert DEFAULT_MODEL in available_models()
    default, named = resolve_model(""), resolve_model(DEFAULT_MODEL)
    assert default.kind == named.kind == "native"
    assert default.path == named.path == shipped_model_path()


def test_bilm_tf_directory_and_hdf5_file(fixture_dir, tmp_path):
    directory = resolve_model(fixture_dir)
    assert (directory.kind, directory.weight_file.name, directory.options_file.name) == (
        "bilm-tf",
        "lm_weights.hdf5",
        "options.json",
    )
    single = resolve_model(fixture_dir / "lm_weights.hdf5")
    assert single.weight_file == directory.weight_file and single.options_file == directory.options_file
    elsewhere = tmp_path / "opts.json"
    shutil.copy(fixture_dir / "options.json", elsewhere)
    assert resolve_model(fixture_dir / "lm_weights.hdf5", options_file=elsewhere).options_file == elsewhere


def test_native_directory_loads_the_same_weights(reference_bilm, tmp_path):
    directory = save_native(reference_bilm, tmp_path / "native")
    assert resolve_model(directory).kind == "native"
    loaded = load_bilm(directory)
    assert loaded.options.to_dict() == reference_bilm.options.to_dict()


def test_errors_name_the_path_and_the_option(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"'.*nowhere' does not exist \(my.option\).*en_elmo_small"):
        resolve_model(tmp_path / "nowhere", option="my.option")
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "a.hdf5").write_bytes(b"")
    (tmp_path / "two" / "b.hdf5").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"two: expected a native model .* found 2"):
        resolve_model(tmp_path / "two")


def test_a_missing_default_model_says_how_to_give_one(monkeypatch, tmp_path):
    import spacy_elmo.io.resolve as resolve

    monkeypatch.setattr(resolve, "SHIPPED_MODELS_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="default biLM 'en_elmo_small' is not installed.*Give a model"):
        resolve_model("")
