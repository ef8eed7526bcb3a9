"""A bilm-tf model in a zip archive (the NLPL repository's layout), read in place."""

import json
import shutil
import zipfile

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo.cli import elmo_cli
from spacy_elmo.io.archive import ArchiveError
from spacy_elmo.io.resolve import load_model

META = {"id": 0, "corpus": [{"description": "the bilm-tf test fixture"}], "algorithm": {"name": "ELMo"}}


def nlpl_zip(fixture_dir, path, folder="", compression=zipfile.ZIP_DEFLATED, members=None):
    """The fixture as the NLPL repository packs a model: model.hdf5, options.json, meta.json."""
    members = members or {
        "model.hdf5": (fixture_dir / "lm_weights.hdf5").read_bytes(),
        "options.json": (fixture_dir / "options.json").read_bytes(),
        "meta.json": json.dumps(META).encode(),
    }
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(folder + name, data)
    return path


@pytest.fixture
def unzipped(fixture_dir, tmp_path):
    target = tmp_path / "unzipped"
    target.mkdir()
    shutil.copy(fixture_dir / "lm_weights.hdf5", target / "model.hdf5")
    shutil.copy(fixture_dir / "options.json", target / "options.json")
    return target


@pytest.mark.parametrize("folder", ["", "209/"])
@pytest.mark.parametrize("compression", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED])
def test_an_nlpl_zip_loads_as_its_unzipped_directory_bit_for_bit(fixture_dir, tmp_path, unzipped, folder, compression):
    archive = nlpl_zip(fixture_dir, tmp_path / "209.zip", folder, compression)
    before = sorted(p.name for p in tmp_path.iterdir())
    zipped, plain = load_model(archive), load_model(unzipped)
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing is unpacked on disk"
    a, b = zipped.bilm.state_dict(), plain.bilm.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (zipped.sha256, zipped.content_sha256) == (plain.sha256, plain.content_sha256)
    assert zipped.sha256_of == "of model.hdf5 in 209.zip"
    assert zipped.source.archive is not None and zipped.source.archive.metadata() == META


def test_the_cli_and_the_pipe_take_an_archive(fixture_dir, tmp_path, unzipped):
    import spacy

    archive = nlpl_zip(fixture_dir, tmp_path / "model.zip")
    runner = CliRunner()
    verified = runner.invoke(elmo_cli, ["verify", str(archive)])
    assert verified.exit_code == 0 and "of model.hdf5 in model.zip" in verified.output, verified.output
    assert runner.invoke(elmo_cli, ["convert", str(archive), str(tmp_path / "native")]).exit_code == 0
    native = load_model(tmp_path / "native")
    assert native.converted_from == {"format": "bilm-tf", "file": "model.hdf5", "sha256": load_model(unzipped).sha256}
    outputs = {}
    for name, model in (("zip", archive), ("dir", unzipped)):
        nlp = spacy.blank("xx")
        nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.BiLM.v1", "path": str(model)}})
        outputs[name] = nlp("Один два three 四")._.elmo_layers
    assert (outputs["zip"] == outputs["dir"]).all()


def test_an_archive_without_a_model_or_not_a_zip_is_named(fixture_dir, tmp_path):
    no_options = nlpl_zip(fixture_dir, tmp_path / "a.zip", members={"model.hdf5": b"x", "meta.json": b"{}"})
    with pytest.raises(
        ArchiveError, match=r"a\.zip: expected a bilm-tf model in the archive .* found meta\.json, model\.hdf5"
    ):
        load_model(no_options)
    broken = tmp_path / "b.zip"
    broken.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ArchiveError, match=r"b\.zip: not a readable zip archive"):
        load_model(broken)
    bad_weights = nlpl_zip(
        fixture_dir,
        tmp_path / "c.zip",
        members={"model.hdf5": b"junk", "options.json": (fixture_dir / "options.json").read_bytes()},
    )
    with pytest.raises(ValueError, match=r"c\.zip/model\.hdf5: not a readable HDF5 weight file"):
        load_model(bad_weights)


def test_the_zipped_fixture_reproduces_the_reference_activations(fixture_dir, tmp_path):
    """The AllenNLP reference run of the bilm-tf fixture (stateless batch 0), from its NLPL-layout zip."""
    import h5py
    import numpy

    from spacy_elmo.bilm.runner import BiLMRunner

    bilm = load_model(nlpl_zip(fixture_dir, tmp_path / "fixture.zip", "fixture/")).bilm
    groups = json.loads((fixture_dir / "sentences.json").read_text())
    outputs = BiLMRunner(bilm).embed_sentences([groups[k][0].split() for k in range(3)])
    for k, layers in enumerate(outputs):
        with h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") as handle:
            expected = handle["0"][...]  # (forward, backward) top layer
        top = layers[-1]
        got = numpy.stack([top[:, : top.shape[1] // 2], top[:, top.shape[1] // 2 :]])
        numpy.testing.assert_allclose(got, expected, atol=1e-6, rtol=1e-5)
