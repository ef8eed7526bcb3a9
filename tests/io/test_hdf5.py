"""bilm-tf/AllenNLP import and export: bit-exact round trips, and errors that name what is wrong."""

import json
import shutil
import subprocess
import sys

import h5py
import numpy
import pytest
import torch

from spacy_elmo.bilm.options import OptionsError
from spacy_elmo.io.arrays import WeightsError, bilm_arrays, build_bilm
from spacy_elmo.io.hdf5 import load_bilm_tf, save_bilm_tf
from spacy_elmo.io.native import bilm_from_bytes, bilm_to_bytes, save_native
from spacy_elmo.io.resolve import load_model


def datasets(path):
    out = {}
    with h5py.File(path, "r") as handle:
        handle.visititems(lambda name, obj: out.__setitem__(name, obj[...]) if isinstance(obj, h5py.Dataset) else None)
    return out


def assert_same_parameters(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def test_import_export_import_is_bit_identical(fixture_dir, tmp_path):
    original = datasets(fixture_dir / "lm_weights.hdf5")
    bilm = load_bilm_tf(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    save_bilm_tf(bilm, tmp_path / "options.json", tmp_path / "weights.hdf5")
    exported = datasets(tmp_path / "weights.hdf5")
    assert exported.keys() == original.keys()
    for name in original:
        assert exported[name].dtype == original[name].dtype, name
        assert exported[name].shape == original[name].shape, name
        assert exported[name].tobytes() == original[name].tobytes(), name
    again = load_bilm_tf(tmp_path / "options.json", tmp_path / "weights.hdf5")
    assert_same_parameters(bilm, again)
    assert json.loads((tmp_path / "options.json").read_text()) == json.loads((fixture_dir / "options.json").read_text())


def test_softmax_and_vocab_round_trip(make_bilm, tmp_path):
    bilm = make_bilm(n_tokens_vocab=7)
    bilm.vocab = ["<S>", "</S>", "<UNK>", "the", "a", "ü", "日本"]
    save_bilm_tf(bilm, tmp_path / "options.json", tmp_path / "weights.hdf5", tmp_path / "vocab.txt")
    names = datasets(tmp_path / "weights.hdf5")
    assert names["softmax/W"].shape == (7, 8) and names["softmax/b"].shape == (7,)
    again = load_bilm_tf(tmp_path / "options.json", tmp_path / "weights.hdf5", tmp_path / "vocab.txt")
    assert_same_parameters(bilm, again)
    assert again.vocab == bilm.vocab


def test_native_round_trip_is_bit_identical(reference_bilm, tmp_path):
    again = bilm_from_bytes(bilm_to_bytes(reference_bilm))
    assert_same_parameters(reference_bilm, again)
    save_native(reference_bilm, tmp_path / "native")
    assert_same_parameters(reference_bilm, load_model(tmp_path / "native").bilm)


def test_export_of_native_equals_original_file(fixture_dir, tmp_path):
    bilm = load_model(save_native(load_model(fixture_dir).bilm, tmp_path / "native")).bilm
    save_bilm_tf(bilm, tmp_path / "o.json", tmp_path / "w.hdf5")
    original = datasets(fixture_dir / "lm_weights.hdf5")
    for name, value in datasets(tmp_path / "w.hdf5").items():
        assert value.tobytes() == original[name].tobytes()


@pytest.mark.slow
def test_convert_cli_both_ways(fixture_dir, tmp_path):
    run = lambda *args: subprocess.run(
        [sys.executable, "-m", "spacy_elmo", "convert", *map(str, args)], capture_output=True, text=True, timeout=300
    )
    done = run(fixture_dir / "lm_weights.hdf5", tmp_path / "native")
    assert done.returncode == 0, done.stderr
    done = run(tmp_path / "native", tmp_path / "back")
    assert done.returncode == 0, done.stderr
    original = datasets(fixture_dir / "lm_weights.hdf5")
    back = datasets(tmp_path / "back" / "weights.hdf5")
    assert all(back[n].tobytes() == original[n].tobytes() for n in original) and back.keys() == original.keys()
    failed = run(tmp_path / "missing", tmp_path / "x")
    assert failed.returncode == 1 and "missing" in failed.stderr


# --- bad input: each error names the file and the dataset or key ---------------------------------


@pytest.fixture
def weights_copy(fixture_dir, tmp_path):
    shutil.copy(fixture_dir / "options.json", tmp_path / "options.json")
    shutil.copy(fixture_dir / "lm_weights.hdf5", tmp_path / "weights.hdf5")
    return tmp_path


def test_missing_dataset(weights_copy):
    with h5py.File(weights_copy / "weights.hdf5", "a") as handle:
        del handle["CNN_high_1/W_carry"]
    with pytest.raises(WeightsError, match=r"weights\.hdf5.*missing dataset 'CNN_high_1/W_carry'"):
        load_bilm_tf(weights_copy / "options.json", weights_copy / "weights.hdf5")


def test_shape_mismatch(weights_copy):
    options = json.loads((weights_copy / "options.json").read_text())
    options["lstm"]["projection_dim"] = 32
    (weights_copy / "options.json").write_text(json.dumps(options))
    with pytest.raises(WeightsError, match=r"weights\.hdf5: dataset '.*' has shape .* options imply"):
        load_bilm_tf(weights_copy / "options.json", weights_copy / "weights.hdf5")


def test_truncated_file(weights_copy):
    path = weights_copy / "weights.hdf5"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match=r"weights\.hdf5"):
        load_bilm_tf(weights_copy / "options.json", path)


def test_not_hdf5(weights_copy):
    path = weights_copy / "weights.hdf5"
    path.write_text("this is not an HDF5 file")
    with pytest.raises(WeightsError, match=r"weights\.hdf5: not a readable HDF5 weight file"):
        load_bilm_tf(weights_copy / "options.json", path)


def test_missing_file(weights_copy):
    with pytest.raises(FileNotFoundError, match="nope.hdf5"):
        load_bilm_tf(weights_copy / "options.json", weights_copy / "nope.hdf5")


@pytest.mark.parametrize(
    "section,key,path",
    [
        ("lstm", "projection_dim", "lstm.projection_dim"),
        ("char_cnn", "filters", "char_cnn.filters"),
        ("lstm", "dim", "lstm.dim"),
        ("char_cnn", "n_highway", "char_cnn.n_highway"),
    ],
)
def test_missing_option(weights_copy, section, key, path):
    options = json.loads((weights_copy / "options.json").read_text())
    del options[section][key]
    (weights_copy / "options.json").write_text(json.dumps(options))
    with pytest.raises(OptionsError, match=rf"options\.json: missing option '{path}'"):
        load_bilm_tf(weights_copy / "options.json", weights_copy / "weights.hdf5")


def test_bad_option_values(weights_copy):
    options = json.loads((weights_copy / "options.json").read_text())
    options["char_cnn"]["activation"] = "gelu"
    (weights_copy / "options.json").write_text(json.dumps(options))
    with pytest.raises(OptionsError, match="char_cnn.activation"):
        load_bilm_tf(weights_copy / "options.json", weights_copy / "weights.hdf5")
    (weights_copy / "options.json").write_text("{not json")
    with pytest.raises(OptionsError, match="not a valid JSON"):
        load_bilm_tf(weights_copy / "options.json", weights_copy / "weights.hdf5")


def test_nan_weights_refused(weights_copy):
    with h5py.File(weights_copy / "weights.hdf5", "a") as handle:
        handle["CNN_proj/b_proj"][0] = numpy.nan
    with pytest.raises(WeightsError, match="CNN_proj/b_proj"):
        load_bilm_tf(weights_copy / "options.json", weights_copy / "weights.hdf5")


def test_corrupt_native_model(reference_bilm, tmp_path):
    data = bilm_to_bytes(reference_bilm)
    with pytest.raises(WeightsError, match="not a spacy-elmo model"):
        bilm_from_bytes(data[: len(data) // 3])
    with pytest.raises(WeightsError, match="not a spacy-elmo model"):
        bilm_from_bytes(b"\x93\x01\x02\x03")


def test_clip_absent_means_no_clipping(weights_copy, make_bilm):
    options = json.loads((weights_copy / "options.json").read_text())
    del options["lstm"]["cell_clip"], options["lstm"]["proj_clip"]
    (weights_copy / "options.json").write_text(json.dumps(options))
    bilm = load_bilm_tf(weights_copy / "options.json", weights_copy / "weights.hdf5")
    assert bilm.options.cell_clip is None and bilm.options.proj_clip is None
    assert "cell_clip" not in bilm.options.to_dict()["lstm"]


@pytest.mark.parametrize(
    "section,key,value,option,extra",
    [
        ("lstm", "n_layers", 1, "lstm.n_layers", "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/B"),
        ("char_cnn", "n_highway", 1, "char_cnn.n_highway", "CNN_high_1/W_carry"),
        ("char_cnn", "filters", [[1, 4], [2, 8], [3, 16], [4, 32]], "char_cnn.filters", "CNN/W_cnn_4"),
    ],
)
def test_weights_the_options_do_not_describe_are_refused(weights_copy, section, key, value, option, extra):
    """A file holding more than its options ask for used to load (2 layers out instead of 3)."""
    options = json.loads((weights_copy / "options.json").read_text())
    options[section][key] = value
    (weights_copy / "options.json").write_text(json.dumps(options))
    with pytest.raises(WeightsError) as error:
        load_bilm_tf(weights_copy / "options.json", weights_copy / "weights.hdf5")
    message = str(error.value)
    assert message.startswith(f"{weights_copy / 'weights.hdf5'}: ")
    assert f"'{extra}'" in message and f"option '{option}' probably disagrees" in message


def test_leftover_arrays_in_a_native_model_are_refused(reference_bilm):
    arrays = dict(bilm_arrays(reference_bilm))
    arrays["CNN_high_7/W_carry"] = arrays["CNN_high_0/W_carry"]
    with pytest.raises(WeightsError, match=r"^1 weight array\(s\) .*'CNN_high_7/W_carry'.*char_cnn.n_highway"):
        build_bilm(reference_bilm.options, arrays)
