"""TF-Hub ELMo modules (Google's and DeepPavlov's layouts) read without TensorFlow, held to TensorFlow's own
outputs (tests/fixtures/tfhub, made by make_fixtures.py with TensorFlow's ops and cells), and converted."""

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import h5py
import numpy
import pytest
import torch
from typer.testing import CliRunner

from fixture_paths import FIXTURES
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.cli import elmo_cli
from spacy_elmo.errors import ModelFileError
from spacy_elmo.io import resolve
from spacy_elmo.io.arrays import bilm_arrays
from spacy_elmo.io.files import ModelFiles
from spacy_elmo.io.formats import Container, LoadedModel
from spacy_elmo.io.tf_bundle import TensorBundle
from spacy_elmo.io.tfhub import FACTS, TFHUB, TFHUB_KEY, TfHubError, reference_name

TFHUB_FIXTURES = FIXTURES / "tfhub"
MANIFEST = json.loads((TFHUB_FIXTURES / "manifest.json").read_text(encoding="utf-8"))
SENTENCES: list[list[str]] = MANIFEST["sentences"]
LAYOUTS = ("google", "deeppavlov")
TOLERANCE = 1e-6  # of each layer's largest value, as for bilm-tf's and ELMoForManyLangs' references


def test_the_format_is_registered_first() -> None:
    """A module's folder holds no file another format takes; first, so that nothing else is tried on it."""
    assert resolve.FORMATS[0] is TFHUB


def same_parameters(a: BiLM, b: BiLM) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_the_modules_names_map_onto_bilm_tfs_datasets() -> None:
    """bilm-tf's own map (its loader's `_pretrained_initializer`), read backwards."""
    cell = "RNN_1/RNN/MultiRNNCell/Cell0"
    assert reference_name(f"bilm/{cell}/rnn/lstm_cell/kernel") == f"{cell}/LSTMCell/W_0"
    assert reference_name(f"bilm/{cell}/rnn/lstm_cell/bias") == f"{cell}/LSTMCell/B"
    assert reference_name(f"bilm/{cell}/rnn/lstm_cell/projection/kernel") == f"{cell}/LSTMCell/W_P_0"
    assert reference_name("bilm/CNN_high_1/W_carry") == "CNN_high_1/W_carry"
    assert reference_name("bilm/char_embed") == "char_embed"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_layout_loads_with_its_options_and_its_mix(layout: str) -> None:
    loaded = resolve.load_model(TFHUB_FIXTURES / layout)
    o = loaded.options
    assert loaded.source.kind == "tfhub"
    assert [Path(file.path).name for file in loaded.files] == ["variables.index", "variables.data-00000-of-00001"]
    assert (o.filters, o.char_embedding_dim, o.projection_dim, o.lstm_dim, o.n_layers) == (
        [(1, 4), (2, 8), (3, 12)],
        4,
        16,
        32,
        2,
    )
    assert o.n_highway == MANIFEST["layouts"][layout]["n_highway"]
    assert (o.cell_clip, o.proj_clip, o.use_skip_connections, o.activation) == (3.0, 3.0, True, "relu")
    assert (o.n_characters, o.max_characters_per_token) == (FACTS["n_characters"], FACTS["max_characters_per_token"])
    record = (o.model_extra or {})[TFHUB_KEY]
    scores_name, _, scale_name, _ = MANIFEST["layouts"][layout]["mix"]
    assert record["layout"] == layout and record["mix"]["variables"] == [scores_name, scale_name]
    with TensorBundle.open(TFHUB_FIXTURES / layout / "variables" / "variables") as bundle:
        scores, scale = bundle.read(scores_name), bundle.read(scale_name)
        assert record["mix"]["scores"] == scores.tolist() and record["mix"]["scale"] == float(scale.reshape(()))
        states = sorted(name for name in bundle.entries if name.startswith("bilm/Variable"))
    assert record["not_read"] == states  # DeepPavlov's carried LSTM states; Google's module has none
    assert len(states) == (8 if layout == "deeppavlov" else 0)


def tensorflow_outputs(layout: str) -> tuple[numpy.ndarray, list[numpy.ndarray], list[numpy.ndarray]]:
    with h5py.File(TFHUB_FIXTURES / f"{layout}.outputs.hdf5", "r") as handle:
        layers = [handle[f"{i}/layers"][...] for i in range(len(SENTENCES))]
        elmo = [handle[f"{i}/elmo"][...] for i in range(len(SENTENCES))]
        return handle["char_ids"][...], layers, elmo


def worst_relative(ours: list[numpy.ndarray], reference: list[numpy.ndarray]) -> numpy.ndarray:
    """Per layer: the largest difference over the batch, over the largest reference value (..., n, 2P) arrays."""
    difference = numpy.max([numpy.abs(a - b).max(axis=(-2, -1)) for a, b in zip(ours, reference)], axis=0)
    return difference / numpy.max([numpy.abs(b).max(axis=(-2, -1)) for b in reference], axis=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layer_matches_tensorflows_outputs(layout: str) -> None:
    """Sentences with Cyrillic, CJK, an emoji and a token of 70 UTF-8 bytes: the character ids TensorFlow's
    graph made from the strings, and each layer within 1e-6 of its largest value; the module's `elmo` output
    from the recorded mix weights likewise."""
    loaded = resolve.load_model(TFHUB_FIXTURES / layout)
    ids, layers, elmo = tensorflow_outputs(layout)
    assert numpy.array_equal(loaded.bilm.batch_to_ids(SENTENCES), ids)
    ours = BiLMRunner(loaded.bilm).embed_sentences(SENTENCES)
    assert [a.shape for a in ours] == [b.shape for b in layers]
    worst = worst_relative(ours, layers)
    assert (worst <= TOLERANCE).all(), worst
    weights = numpy.asarray((loaded.options.model_extra or {})[TFHUB_KEY]["mix"]["weights"], dtype=numpy.float32)
    mixed = [numpy.tensordot(weights, a, axes=(0, 0)) for a in ours]
    assert worst_relative(mixed, elmo) <= TOLERANCE
    clipped = MANIFEST["clipped"][layout]  # the fixture's weights reach both clips
    assert clipped["final_cells_at_cell_clip"] > 0 and clipped["first_layer_outputs_at_proj_clip"] > 0


def hdf5_datasets(path: Path) -> dict[str, numpy.ndarray]:
    found: dict[str, numpy.ndarray] = {}
    with h5py.File(path, "r") as handle:
        handle.visititems(
            lambda name, item: found.__setitem__(name, item[...]) if isinstance(item, h5py.Dataset) else None
        )
    return found


@pytest.mark.parametrize("layout", LAYOUTS)
def test_convert_writes_native_and_bilm_tf_bit_for_bit(layout: str, tmp_path: Path) -> None:
    module = TFHUB_FIXTURES / layout
    loaded = resolve.load_model(module)
    runner = CliRunner()
    for target in ("native", "bilm-tf"):
        done = runner.invoke(elmo_cli, ["convert", str(module), str(tmp_path / target), "--to", target])
        assert done.exit_code == 0, done.output
        again = resolve.load_model(tmp_path / target)
        assert same_parameters(loaded.bilm, again.bilm), target
        assert again.options.to_dict() == loaded.options.to_dict(), target  # the module's record kept
    exported = hdf5_datasets(tmp_path / "bilm-tf" / "weights.hdf5")
    assert exported.keys() == dict(bilm_arrays(loaded.bilm)).keys()
    with TensorBundle.open(module / "variables" / "variables") as bundle:
        for variable in bundle.entries:
            if variable.startswith("bilm/") and not variable.startswith("bilm/Variable"):
                stored = bundle.read(variable)
                stored = stored[1:] if variable == "bilm/char_embed" else stored  # the "no token" row
                assert exported[reference_name(variable)].tobytes() == stored.tobytes(), variable
    native = resolve.load_model(tmp_path / "native")
    assert native.converted_from is not None and native.converted_from["format"] == "tfhub"


def test_an_unpacked_tarballs_folder_and_a_zip_load_as_the_module(tmp_path: Path) -> None:
    """DeepPavlov publishes tarballs: the module may sit in the one folder the tarball unpacks to."""
    plain = resolve.load_model(TFHUB_FIXTURES / "deeppavlov")
    shutil.copytree(TFHUB_FIXTURES / "deeppavlov", tmp_path / "unpacked" / "elmo_ru-news")
    nested = resolve.load_model(tmp_path / "unpacked")
    archive = tmp_path / "module.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for path in sorted((TFHUB_FIXTURES / "deeppavlov").rglob("*")):
            if path.is_file():
                handle.write(path, "module/" + path.relative_to(TFHUB_FIXTURES / "deeppavlov").as_posix())
    zipped = resolve.load_model(archive)
    for other in (nested, zipped):
        assert other.source.kind == "tfhub" and same_parameters(plain.bilm, other.bilm)
        assert other.sha256 == plain.sha256  # one digest over the checkpoint's files, wherever they are


def test_a_pin_covers_the_checkpoint(tmp_path: Path) -> None:
    module = Path(shutil.copytree(TFHUB_FIXTURES / "google", tmp_path / "google"))
    loaded: LoadedModel = resolve.load_model(module, sha256=resolve.load_model(module).sha256)
    data = module / "variables" / "variables.data-00000-of-00001"
    assert loaded.files[1].sha256 == hashlib.sha256(data.read_bytes()).hexdigest()
    damaged = bytearray(data.read_bytes())
    damaged[100] ^= 0x01
    data.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="sha256|SHA-256|digest"):
        resolve.load_model(module, sha256=loaded.sha256)


def test_a_load_parses_the_index_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`model_files` parses the index (to list the shards the pin covers); `read` reuses it."""
    from spacy_elmo.io import tf_bundle

    parsed: list[str] = []
    table_entries = tf_bundle.table_entries

    def counted(table: memoryview, source: str):  # type: ignore[no-untyped-def]
        parsed.append(source)
        return table_entries(table, source)

    monkeypatch.setattr(tf_bundle, "table_entries", counted)
    loaded = resolve.load_model(TFHUB_FIXTURES / "google")
    assert len(parsed) == 1 and loaded.source.kind == "tfhub"


def test_damaged_and_foreign_modules_are_refused(tmp_path: Path) -> None:
    module = Path(shutil.copytree(TFHUB_FIXTURES / "google", tmp_path / "google"))
    data = module / "variables" / "variables.data-00000-of-00001"
    with TensorBundle.open(module / "variables" / "variables") as bundle:
        offset = bundle.entries["bilm/CNN_proj/W_proj"].offset
    original = data.read_bytes()
    flipped = bytearray(original)
    flipped[offset + 5] ^= 0x01  # a low mantissa bit: in range, caught by the tensor's CRC-32C
    data.write_bytes(bytes(flipped))
    with pytest.raises(ModelFileError, match=r"data-00000-of-00001: variable 'bilm/CNN_proj/W_proj' fails its CRC"):
        resolve.load_model(module)
    data.write_bytes(original[:-10])
    with pytest.raises(
        ModelFileError, match=r"variables\.data-00000-of-00001: variable 'bilm/char_embed' .* truncated"
    ):
        resolve.load_model(module)
    dtypes = tmp_path / "dtypes"  # a checkpoint with a module's files, but no ELMo in it
    shutil.copytree(TFHUB_FIXTURES / "dtypes", dtypes / "variables")
    (dtypes / "saved_model.pb").write_bytes(b"")
    with pytest.raises(TfHubError, match=r"variables\.index: no layer-mix variables .* not a TF-Hub ELMo module"):
        resolve.load_model(dtypes)
    (module / "saved_model.pb").unlink()
    (module / "tfhub_module.pb").unlink()
    assert TFHUB.recognise(Container(module, ModelFiles(module), {})) is None  # variables alone: not a module
