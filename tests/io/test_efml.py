"""ELMoForManyLangs models: read safely, every part checked, and written back bit for bit."""

import io
import json
import pickle
import shutil

import numpy
import pytest
import torch
from typer.testing import CliRunner

from fixture_paths import FIXTURES
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.lexicon import Lexicon
from spacy_elmo.bilm.options import BiLMOptions
from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.cli import elmo_cli
from spacy_elmo.io.efml import CHARACTER_ROLES, WORD_ROLES, EfmlError, load_efml, save_efml
from spacy_elmo.io.native import load_native, save_native
from spacy_elmo.io.resolve import load_model

CHARS = ["<bow>", "<eow>", "<pad>", "<oov>", "<bos>", "<eos>", "\u3000", *"abcdeéЖжд中文👍"]
WORDS = ["<oov>", "<pad>", "<bos>", "<eos>", "the", "cat", "жд"]
SENTENCES = [["the", "cat", "Жжд", "中x"], ["a" * 40], ["👍🏽"], ["<bos>", "cat"]]


def efml_bilm(word_dim: int = 5, seed: int = 0) -> BiLM:
    options = BiLMOptions(
        filters=[(1, 4), (2, 8), (3, 6)],
        char_embedding_dim=6,
        n_highway=2,
        activation="tanh",
        lstm_dim=20,
        projection_dim=8,
        n_layers=2,
        max_characters_per_token=12,
        char_vocab_size=len(CHARS),
        word_vocab_size=len(WORDS) if word_dim else 0,
        word_dim=word_dim,
        highway_gate="input",
        forget_bias=0.0,
        cell_clip=2.5,
        proj_clip=2.0,
    )
    bilm = BiLM(options)
    bilm.reset_parameters(seed)
    with torch.no_grad():  # nonzero biases everywhere, so that where each one goes is tested
        generator = torch.Generator().manual_seed(seed + 1)
        for name, param in bilm.named_parameters():
            if "bias" in name or name.endswith("_b"):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    bilm.lexicon = Lexicon(
        CHARS, dict(CHARACTER_ROLES), 12, WORDS if word_dim else None, dict(WORD_ROLES) if word_dim else {}
    )
    return bilm.eval()


@pytest.fixture
def efml_dir(tmp_path):
    return save_efml(efml_bilm(), tmp_path / "efml")


def same_parameters(a: BiLM, b: BiLM) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("word_dim", [5, 0])
def test_efml_native_efml_is_bit_for_bit(tmp_path, word_dim):
    bilm = efml_bilm(word_dim)
    save_efml(bilm, tmp_path / "a")
    read = load_efml(tmp_path / "a")
    assert same_parameters(bilm, read) and read.lexicon == bilm.lexicon
    save_native(read, tmp_path / "native")
    native = load_native(tmp_path / "native")
    assert same_parameters(bilm, native) and native.lexicon == bilm.lexicon
    save_efml(native, tmp_path / "b")
    for name in ("token_embedder.pkl", "encoder.pkl"):
        a = torch.load(tmp_path / "a" / name, weights_only=True)
        b = torch.load(tmp_path / "b" / name, weights_only=True)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for name in ("char.dic", "config.json", *(["word.dic"] if word_dim else [])):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    first = BiLMRunner(bilm).embed_sentences(SENTENCES)
    again = BiLMRunner(native).embed_sentences(SENTENCES)
    assert all(numpy.array_equal(x, y) for x, y in zip(first, again))


def test_tokens_are_cut_and_unknowns_mapped_as_efml_does():
    lexicon = efml_bilm().lexicon
    row = lexicon.token_row("Жx" + "a" * 20)  # cut to 10 code points; x is not in the vocabulary
    ids = {c: i + 1 for i, c in enumerate(CHARS)}
    assert row[0] == ids["<eow>"] and row[11] == ids["<bow>"]  # EFML's markers, used swapped
    assert list(row[1:3]) == [ids["Ж"], ids["<oov>"]] and list(row[3:11]) == [ids["a"]] * 8
    assert row[-1] == WORDS.index("<oov>") + 1  # the cut word, unknown
    assert lexicon.token_row("жд")[-1] == WORDS.index("жд") + 1
    framed = lexicon.batch_to_ids([["cat"]])
    assert list(framed[0, 0, :4]) == [ids["<eow>"], ids["<bos>"], ids["<bow>"], ids["<pad>"]]
    assert framed[0, 0, -1] == WORDS.index("<bos>") + 1 and framed[0, 2, -1] == WORDS.index("<eos>") + 1


def test_a_pickle_payload_is_refused_and_never_runs(efml_dir, tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    for name in ("token_embedder.pkl", "encoder.pkl"):
        model = tmp_path / name.replace(".", "_")
        shutil.copytree(efml_dir, model)
        state = torch.load(model / name, weights_only=True)
        buffer = io.BytesIO()
        torch.save({**state, "extra": Payload()}, buffer, _use_new_zipfile_serialization=False)
        (model / name).write_bytes(buffer.getvalue())
        with pytest.raises(EfmlError, match=rf"{name}: refused: it holds something other than tensors"):
            load_efml(model)
        (model / name).write_bytes(pickle.dumps(Payload(), protocol=2))
        with pytest.raises(EfmlError, match=rf"{name}: refused"):
            load_efml(model)
        assert not marker.exists(), "the payload ran"


def test_missing_files_and_mismatched_shapes_are_named(efml_dir, tmp_path):
    (efml_dir / "word.dic").write_text("".join(f"{w}\t{i}\n" for i, w in enumerate(WORDS[:-1])), encoding="utf-8")
    with pytest.raises(
        EfmlError,
        match=r"token_embedder\.pkl: 'word_emb_layer\.embedding\.weight' has shape \(7, 5\), "
        r"the architecture JSON and vocabularies imply \(6, 5\)",
    ):
        load_efml(efml_dir)
    (efml_dir / "word.dic").unlink()
    with pytest.raises(FileNotFoundError, match=r"word\.dic: missing"):
        load_efml(efml_dir)
    broken = tmp_path / "broken"
    shutil.copytree(efml_dir, broken)
    architecture = json.loads((broken / "elmo_architecture.json").read_text())
    architecture["encoder"]["dim"] = 24
    (broken / "elmo_architecture.json").write_text(json.dumps(architecture))
    (broken / "word.dic").write_text("".join(f"{w}\t{i}\n" for i, w in enumerate(WORDS)), encoding="utf-8")
    with pytest.raises(
        EfmlError,
        match=r"encoder\.pkl: 'forward_layer_0\.input_linearity\.weight' has shape \(80, 8\), .* imply \(96, 8\)",
    ):
        load_efml(broken)
    (broken / "config.json").write_text(json.dumps({"config_path": "/home/someone/configs/mine.json"}))
    with pytest.raises(
        EfmlError, match=r"config_path '/home/someone/configs/mine\.json' names an architecture JSON that is neither"
    ):
        load_efml(broken)


def test_a_released_models_packaged_architecture_is_known(efml_dir):
    """Released models name `cnn_50_100_512_4096_sample.json` of the EFML package without shipping it."""
    (efml_dir / "config.json").write_text(
        json.dumps({"config_path": "/home/x/configs/cnn_50_100_512_4096_sample.json"})
    )
    with pytest.raises(
        EfmlError,
        match=r"token_embedder\.pkl: .*'convolutions\.3\.weight' is missing \(expected shape \(128, 50, 4\)\)",
    ):
        load_efml(efml_dir)


def test_everything_that_takes_a_model_takes_an_efml_directory(efml_dir, tmp_path):
    import spacy

    loaded = load_model(efml_dir)
    assert loaded.source.kind == "efml" and loaded.sha256 == loaded.content_sha256
    runner = CliRunner()
    verified = runner.invoke(elmo_cli, ["verify", str(efml_dir)])
    assert verified.exit_code == 0 and "(efml)" in verified.output, verified.output
    assert runner.invoke(elmo_cli, ["convert", str(efml_dir), str(tmp_path / "native")]).exit_code == 0
    refused = runner.invoke(elmo_cli, ["convert", str(tmp_path / "native"), str(tmp_path / "tf"), "--to", "bilm-tf"])
    assert refused.exit_code == 1 and "the bilm-tf/AllenNLP layout cannot hold this model" in refused.output
    assert not (tmp_path / "tf").exists()
    back = runner.invoke(elmo_cli, ["convert", str(tmp_path / "native"), str(tmp_path / "back")])
    assert back.exit_code == 0 and same_parameters(load_efml(tmp_path / "back"), loaded.bilm)
    nlp = spacy.blank("ru")
    nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.BiLM.v1", "path": str(efml_dir)}})
    doc = nlp("кот жд the cat")
    expected = BiLMRunner(loaded.bilm).embed_sentences([[t.text for t in doc]])[0]
    numpy.testing.assert_allclose(doc._.elmo_layers, expected, rtol=1e-5, atol=1e-6)


REFERENCE = FIXTURES / "elmoformanylangs"


@pytest.mark.parametrize("name", ["word_char", "char_only"])
def test_every_layer_matches_elmoformanylangs_on_its_own_models(name):
    """Against ELMoForManyLangs' float64 run (tests/fixtures/elmoformanylangs/make_fixtures.py): within 2e-6
    of each layer's largest value, and no worse than twice ELMoForManyLangs' own float32 error."""
    sentences = json.loads((REFERENCE / "sentences.json").read_text(encoding="utf-8"))
    reference = numpy.load(REFERENCE / name / "activations.npz")
    loaded = load_model(REFERENCE / name)
    assert loaded.source.kind == "efml"
    ours = BiLMRunner(loaded.bilm).embed_sentences(sentences)
    worst, worst_efml = numpy.zeros(3), numpy.zeros(3)
    for i, layers in enumerate(ours):
        f64, f32 = reference[f"f64_{i}"], reference[f"f32_{i}"]
        assert layers.shape == f64.shape == (3, len(sentences[i]), 2 * loaded.bilm.options.projection_dim)
        scale = numpy.abs(f64).max(axis=(1, 2))
        worst = numpy.maximum(worst, numpy.abs(layers - f64).max(axis=(1, 2)) / scale)
        worst_efml = numpy.maximum(worst_efml, numpy.abs(f32 - f64).max(axis=(1, 2)) / scale)
    assert (worst <= 2e-6).all(), worst
    assert (worst <= 2 * worst_efml).all(), (worst, worst_efml)


def test_the_reference_models_round_trip_through_native_bit_for_bit(tmp_path):
    for name in ("word_char", "char_only"):
        original = load_efml(REFERENCE / name)
        save_native(original, tmp_path / name / "native")
        save_efml(load_native(tmp_path / name / "native"), tmp_path / name / "efml")
        for part in ("token_embedder.pkl", "encoder.pkl"):
            a = torch.load(REFERENCE / name / part, weights_only=True)
            b = torch.load(tmp_path / name / "efml" / part, weights_only=True)
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), (name, part)
        assert same_parameters(original, load_efml(tmp_path / name / "efml"))


@pytest.mark.parametrize("folder", ["", "ru_model/"])
def test_a_zipped_efml_model_loads_in_place_as_its_directory(tmp_path, folder):
    """Some NLPL entries are ELMoForManyLangs models, zipped."""
    import zipfile

    directory = REFERENCE / "word_char"
    archive = tmp_path / "201.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(directory.iterdir()):
            if path.name != "activations.npz":
                handle.write(path, folder + path.name)
        handle.writestr(folder + "meta.json", json.dumps({"algorithm": {"name": "ELMo"}}))
    before = sorted(p.name for p in tmp_path.iterdir())
    zipped, plain = load_model(archive), load_model(directory)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert zipped.source.kind == "efml" and same_parameters(zipped.bilm, plain.bilm)
    assert zipped.bilm.lexicon == plain.bilm.lexicon
    sentences = json.loads((REFERENCE / "sentences.json").read_text(encoding="utf-8"))
    a = BiLMRunner(zipped.bilm).embed_sentences(sentences)
    b = BiLMRunner(plain.bilm).embed_sentences(sentences)
    assert all(numpy.array_equal(x, y) for x, y in zip(a, b))
