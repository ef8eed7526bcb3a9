"""Formats as objects: a new format is a class and a line in `resolve.FORMATS`. The toy format here (a native
model's bytes under another name, pinned by the digest of that one file) loads through `load_model` from a
directory and from an archive, its pin checked before its weights are parsed, and is gone once unregistered."""

import shutil
import zipfile
from typing import Optional

import pytest
import torch

from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.lexicon import ByteLexicon
from spacy_elmo.errors import reading
from spacy_elmo.io import resolve
from spacy_elmo.io.digest import ModelFile
from spacy_elmo.io.formats import Container, Format, LoadedModel, ModelSource, digested
from spacy_elmo.io.native import LEXICON_KEY, MODEL_FILE, bilm_from_bytes
from spacy_elmo.io.resolve import load_model, shipped_model_path

TOY_FILE = "toy.msgpack"


class ToyFormat(Format):
    name = "toy"

    def recognise(self, container: Container) -> Optional[ModelSource]:
        if not container.files.exists(TOY_FILE):
            return None
        return ModelSource(self, container.path, container.files, {"model": TOY_FILE})

    def model_files(self, source: ModelSource) -> list[ModelFile]:
        return [ModelFile("model", source.files.where(TOY_FILE), source.files.sha256(TOY_FILE))]

    def read(self, source: ModelSource, files: list[ModelFile]) -> LoadedModel:
        with reading(source.files.where(TOY_FILE)):
            return digested(bilm_from_bytes(source.files.read(TOY_FILE)), source, files)


@pytest.fixture
def toy_dir(tmp_path, monkeypatch):
    """A toy model, with the toy format registered first for this test only."""
    monkeypatch.setattr(resolve, "FORMATS", [ToyFormat(), *resolve.FORMATS])
    (tmp_path / "toy").mkdir()
    shutil.copyfile(shipped_model_path() / MODEL_FILE, tmp_path / "toy" / TOY_FILE)
    return tmp_path / "toy"


def same_parameters(a: BiLM, b: BiLM) -> bool:
    x, y = a.state_dict(), b.state_dict()
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_a_registered_format_loads_through_load_model_and_is_pinned_by_its_digest(toy_dir):
    loaded = load_model(toy_dir)
    assert loaded.source.kind == "toy" and loaded.describe()["format"] == "toy"
    assert same_parameters(loaded.bilm, load_model(shipped_model_path()).bilm)
    assert loaded.sha256_of == f"the model digest, over {TOY_FILE}"
    assert load_model(toy_dir, sha256=loaded.sha256.upper()).sha256 == loaded.sha256
    assert loaded.provenance() == {"format": "toy", "file": "toy", "sha256": loaded.sha256}


def test_a_toy_pin_is_checked_before_its_weights_are_parsed(toy_dir):
    pinned = load_model(toy_dir).sha256
    (toy_dir / TOY_FILE).write_bytes(b"not a model")  # parsing it would fail with a WeightsError
    with pytest.raises(ValueError, match=rf"differs from the pinned digest \({pinned}\)"):
        load_model(toy_dir, sha256=pinned)


def test_a_registered_format_loads_from_every_container_with_one_digest(toy_dir, tmp_path):
    archive = tmp_path / "toy.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.write(toy_dir / TOY_FILE, f"toy/{TOY_FILE}")
    zipped, plain = load_model(archive), load_model(toy_dir)
    assert zipped.source.files.zipped and zipped.sha256 == plain.sha256
    assert same_parameters(zipped.bilm, plain.bilm)


def test_an_unregistered_format_is_no_model(toy_dir, monkeypatch):
    monkeypatch.setattr(resolve, "FORMATS", [f for f in resolve.FORMATS if f.name != "toy"])
    with pytest.raises(FileNotFoundError, match=r"expected a native model \(model\.msgpack\)"):
        load_model(toy_dir)


def test_a_model_without_vocabularies_reads_bytes_and_stores_no_lexicon():
    loaded = load_model(shipped_model_path())
    assert loaded.bilm.lexicon == ByteLexicon(loaded.bilm.options.max_characters_per_token)
    import srsly

    assert LEXICON_KEY not in srsly.msgpack_loads((shipped_model_path() / MODEL_FILE).read_bytes())
