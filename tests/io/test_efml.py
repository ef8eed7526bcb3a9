"""ELMoForManyLangs models: read safely, every part checked, every weight read exactly."""

import hashlib
import io
import json
import pickle
import re
import shutil
from pathlib import Path

import numpy
import pytest
import torch
from typer.testing import CliRunner

from efml_models import CHARS, WORDS, efml_bilm
from fixture_paths import FIXTURES
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.lexicon import ID_SHIFT
from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.cli import elmo_cli
from spacy_elmo.io.efml import EfmlError
from spacy_elmo.io.native import save_native
from spacy_elmo.io.resolve import load_model

SENTENCES = [["the", "cat", "Жжд", "中x"], ["a" * 40], ["👍🏽"], ["<bos>", "cat"]]


@pytest.fixture
def efml_dir(tmp_path):
    return Path(shutil.copytree(REFERENCE / "word_char", tmp_path / "efml"))


def same_parameters(a: BiLM, b: BiLM) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("name", ["word_char", "char_only"])
def test_efml_to_native_is_bit_for_bit(tmp_path, name):
    read = load_model(REFERENCE / name).bilm
    save_native(read, tmp_path / "native")
    native = load_model(tmp_path / "native").bilm
    assert same_parameters(read, native) and native.lexicon == read.lexicon
    first = BiLMRunner(read).embed_sentences(SENTENCES)
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
            load_model(model)
        (model / name).write_bytes(pickle.dumps(Payload(), protocol=2))
        with pytest.raises(EfmlError, match=rf"{name}: refused"):
            load_model(model)
        assert not marker.exists(), "the payload ran"


def test_missing_files_and_mismatched_shapes_are_named(efml_dir, tmp_path):
    words = (efml_dir / "word.dic").read_text(encoding="utf-8").splitlines(True)
    (efml_dir / "word.dic").write_text("".join(words[:-1]), encoding="utf-8")
    with pytest.raises(
        EfmlError,
        match=rf"token_embedder\.pkl: 'word_emb_layer\.embedding\.weight' has shape \({len(words)}, 12\), "
        rf"the architecture JSON and vocabularies imply \({len(words) - 1}, 12\)",
    ):
        load_model(efml_dir)
    (efml_dir / "word.dic").unlink()
    with pytest.raises(FileNotFoundError, match=r"word\.dic: missing"):
        load_model(efml_dir)
    broken = tmp_path / "broken"
    shutil.copytree(efml_dir, broken)
    (architecture_file,) = broken.glob("cnn_*.json")
    architecture = json.loads(architecture_file.read_text())
    architecture["encoder"]["dim"] = 20
    architecture_file.write_text(json.dumps(architecture))
    (broken / "word.dic").write_text("".join(words), encoding="utf-8")
    with pytest.raises(
        EfmlError,
        match=r"encoder\.pkl: 'forward_layer_0\.input_linearity\.weight' has shape \(96, 10\), .* imply \(80, 10\)",
    ):
        load_model(broken)
    (broken / "config.json").write_text(json.dumps({"config_path": "/home/someone/configs/mine.json"}))
    with pytest.raises(
        EfmlError, match=r"config_path '/home/someone/configs/mine\.json' names an architecture JSON that is neither"
    ):
        load_model(broken)


def test_a_released_models_packaged_architecture_is_known(efml_dir):
    """Released models name `cnn_50_100_512_4096_sample.json` of the EFML package without shipping it."""
    (efml_dir / "config.json").write_text(
        json.dumps({"config_path": "/home/x/configs/cnn_50_100_512_4096_sample.json"})
    )
    with pytest.raises(
        EfmlError,
        match=r"token_embedder\.pkl: .*'convolutions\.3\.weight' is missing \(expected shape \(128, 50, 4\)\)",
    ):
        load_model(efml_dir)


def test_everything_that_takes_a_model_takes_an_efml_directory(efml_dir, tmp_path):
    import spacy

    loaded = load_model(efml_dir)
    assert loaded.source.kind == "efml" and loaded.describe()["sha256"] == loaded.sha256
    runner = CliRunner()
    verified = runner.invoke(elmo_cli, ["verify", str(efml_dir)])
    assert verified.exit_code == 0 and "(efml)" in verified.output, verified.output
    assert runner.invoke(elmo_cli, ["convert", str(efml_dir), str(tmp_path / "native")]).exit_code == 0
    refused = runner.invoke(elmo_cli, ["convert", str(tmp_path / "native"), str(tmp_path / "tf"), "--to", "bilm-tf"])
    assert refused.exit_code == 1 and "the bilm-tf/AllenNLP layout cannot hold this model" in refused.output
    assert not (tmp_path / "tf").exists()
    default = runner.invoke(elmo_cli, ["convert", str(tmp_path / "native"), str(tmp_path / "back")])
    assert default.exit_code == 1 and "the bilm-tf/AllenNLP layout cannot hold this model" in default.output
    nlp = spacy.blank("ru")
    nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.BiLM.v1", "path": str(efml_dir)}})
    doc = nlp("кот жд the cat")
    expected = BiLMRunner(loaded.bilm).embed_sentences([[t.text for t in doc]])[0]
    numpy.testing.assert_allclose(doc._.elmo_layers, expected, rtol=1e-5, atol=1e-6)


REFERENCE = FIXTURES / "elmoformanylangs"


@pytest.mark.parametrize("name", ["word_char", "char_only"])
def test_every_layer_matches_elmoformanylangs_on_its_own_models(name):
    """Against ELMoForManyLangs' float64 run (tests/fixtures/elmoformanylangs/make_fixtures.py), every sentence
    (the U+3000 one included): within 1e-6 of each layer's largest value, and no worse than twice
    ELMoForManyLangs' own float32 error."""
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
    assert (worst <= 1e-6).all(), worst
    assert (worst <= 2 * worst_efml).all(), (worst, worst_efml)


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


# What ELMoForManyLangs' `biLM.py train` writes: word.dic starts with these, char.dic ends with these (its
# other entries are the training text's characters in first-seen order, the stream starting with "<bos>").
EFML_WORD_SPECIALS = ["<oov>", "<bos>", "<eos>", "<pad>"]
EFML_CHAR_SPECIALS = ["<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"]
IDEOGRAPHIC_SPACE_TOKEN = "東京\u3000タワー"


def reference_sentences() -> list[list[str]]:
    return json.loads((REFERENCE / "sentences.json").read_text(encoding="utf-8"))


def dic_entries(path) -> list[str]:
    """A .dic file's entries as written (`entry<TAB>id` lines, ids 0, 1, 2, ... in order), no stripping."""
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "", path
    pairs = [line.split("\t") for line in lines[:-1]]
    assert [int(i) for _, i in pairs] == list(range(len(pairs))), path
    return [entry for entry, _ in pairs]


@pytest.mark.parametrize("name", ["word_char", "char_only"])
def test_ids_are_the_ones_elmoformanylangs_feeds_its_model(name):
    """Tokens cut, character ids (<eow> in front, <bow> behind, <pad>, <oov>) and word ids exactly as
    ELMoForManyLangs' read_list and create_one_batch make them (efml_ids.json), <bos>/<eos> rows included;
    each sentence alone and all in one padded batch."""
    sentences = reference_sentences()
    expected = json.loads((REFERENCE / name / "efml_ids.json").read_text(encoding="utf-8"))
    assert len(expected) == len(sentences) and IDEOGRAPHIC_SPACE_TOKEN in sentences[-1]
    bilm = load_model(REFERENCE / name).bilm
    lexicon = bilm.lexicon
    n_chars = lexicon.max_characters_per_token
    assert (lexicon.words is None) == (name == "char_only")
    batch = bilm.batch_to_ids(sentences)
    for i, (sentence, want) in enumerate(zip(sentences, expected)):
        framed = ["<bos>", *sentence, "<eos>"]
        assert [lexicon.cut(t) for t in framed] == want["tokens"], i
        assert not batch[i, len(framed) :].any(), i
        for ids in (bilm.batch_to_ids([sentence])[0], batch[i, : len(framed)]):
            assert ids.shape == (len(framed), lexicon.width), i
            numpy.testing.assert_array_equal(ids[:, :n_chars] - ID_SHIFT, want["char_ids"], err_msg=f"sentence {i}")
            if want["word_ids"] is None:
                assert ids.shape[1] == n_chars
            else:
                numpy.testing.assert_array_equal(ids[:, n_chars] - ID_SHIFT, want["word_ids"], err_msg=f"sentence {i}")
    assert any(want["tokens"][1:-1] != sentence for want, sentence in zip(expected, sentences)), "nothing was cut"


def test_a_token_with_an_ideographic_space_reads_the_char_dic_entry_of_that_space():
    """char.dic's U+3000 line loses its entry to ELMoForManyLangs' `line.strip()`, which then puts U+3000 back."""
    for name in ("word_char", "char_only"):
        lexicon = load_model(REFERENCE / name).bilm.lexicon
        assert "\u3000" in dic_entries(REFERENCE / name / "char.dic")
        row = lexicon.token_row(IDEOGRAPHIC_SPACE_TOKEN) - ID_SHIFT
        assert row[3] == lexicon.characters.index("\u3000") != lexicon.characters.index("<oov>"), name
    words = load_model(REFERENCE / "word_char").bilm.lexicon.words
    assert IDEOGRAPHIC_SPACE_TOKEN in words  # a word.dic entry with U+3000 inside survives the strip
    row = load_model(REFERENCE / "word_char").bilm.lexicon.token_row(IDEOGRAPHIC_SPACE_TOKEN) - ID_SHIFT
    assert row[-1] == words.index(IDEOGRAPHIC_SPACE_TOKEN)


@pytest.mark.parametrize("name", ["word_char", "char_only"])
def test_dictionaries_in_elmoformanylangs_training_order_are_read_as_they_are(name):
    chars = dic_entries(REFERENCE / name / "char.dic")
    words = dic_entries(REFERENCE / name / "word.dic")  # written by training even when word_dim is 0
    assert chars[:5] == list("<bos>") and chars[-len(EFML_CHAR_SPECIALS) :] == EFML_CHAR_SPECIALS
    assert words[: len(EFML_WORD_SPECIALS)] == EFML_WORD_SPECIALS
    bilm = load_model(REFERENCE / name).bilm
    assert bilm.lexicon.characters == chars
    assert bilm.lexicon.words == (words if name == "word_char" else None)  # word_dim 0: word.dic is not read


def float64_layers(bilm: BiLM, sentences: list[list[str]]) -> list[numpy.ndarray]:
    """The biLM in float64, each sentence alone: (layers, tokens, 2 x projection), <bos>/<eos> dropped."""
    bilm = bilm.double().eval()
    with torch.no_grad():
        out = [bilm(torch.from_numpy(bilm.batch_to_ids([s]))).layers[:, 0, 1:-1].numpy() for s in sentences]
    assert all(layers.dtype == numpy.float64 for layers in out)
    return out


@pytest.mark.parametrize("name", ["word_char", "char_only"])
def test_in_float64_every_layer_is_elmoformanylangs_float64_run_to_rounding(name):
    """The same computation, not only a close one: in float64 the difference is rounding (~1e-14)."""
    sentences = reference_sentences()
    reference = numpy.load(REFERENCE / name / "activations.npz")
    for i, layers in enumerate(float64_layers(load_model(REFERENCE / name).bilm, sentences)):
        numpy.testing.assert_allclose(layers, reference[f"f64_{i}"], rtol=0, atol=1e-12, err_msg=f"sentence {i}")


def copy_with_architecture(name: str, target, **encoder) -> None:
    """A copy of a reference model whose architecture JSON's encoder section has `encoder` changed."""
    shutil.copytree(REFERENCE / name, target)
    (path,) = target.glob("cnn_*.json")
    architecture = json.loads(path.read_text(encoding="utf-8"))
    architecture["encoder"].update(encoder)
    path.write_text(json.dumps(architecture), encoding="utf-8")


@pytest.mark.parametrize("name", ["word_char", "char_only"])
@pytest.mark.parametrize("clip", ["cell_clip", "proj_clip"])
def test_the_clips_cut_and_are_applied(name, clip, tmp_path):
    """Each clip cuts these models' activations: without it (0, as ELMoForManyLangs reads a falsy clip) the
    layers are far from ELMoForManyLangs' run, so matching it means the clip is applied, at its value."""
    copy_with_architecture(name, tmp_path / "unclipped", **{clip: 0})
    sentences = reference_sentences()
    reference = numpy.load(REFERENCE / name / "activations.npz")
    unclipped = load_model(tmp_path / "unclipped").bilm
    assert getattr(unclipped.options, clip) is None and getattr(load_model(REFERENCE / name).bilm.options, clip) > 0
    layers = float64_layers(unclipped, sentences)
    gap = max(numpy.abs(x - reference[f"f64_{i}"]).max() for i, x in enumerate(layers))
    assert gap > 1e-2, gap
    for i, x in enumerate(layers):  # the token layer, before the LSTMs, is the same
        numpy.testing.assert_allclose(x[0], reference[f"f64_{i}"][0], rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "config_path, moved_to",
    [
        ("{file}", None),  # the bare file name (word_char's, as trained)
        ("/home/efml/ELMoForManyLangs/configs/{file}", None),  # the training machine's path (char_only's)
        ("configs/{file}", None),  # relative, nothing there: the file of that name beside config.json
        ("configs/{file}", "configs/{file}"),  # relative, and there: found as given
        ("{absolute}", "../elsewhere/{file}"),  # absolute, and there (outside the model directory)
        ("C:\\Users\\efml\\configs\\{file}", None),  # a Windows path: its file name (as EFML on Windows)
    ],
)
@pytest.mark.parametrize("name", ["word_char", "char_only"])
def test_config_path_finds_the_architecture_json_as_elmoformanylangs_does(name, config_path, moved_to, tmp_path):
    """ELMoForManyLangs' Embedder tries `os.path.join(model_dir, config_path)`, then the file of that name in
    the model directory."""
    model = tmp_path / "model"
    shutil.copytree(REFERENCE / name, model)
    (architecture,) = model.glob("cnn_*.json")
    file = architecture.name
    if moved_to is not None:
        target = model / moved_to.format(file=file)
        target.parent.mkdir(parents=True, exist_ok=True)
        architecture.rename(target)  # and gone from beside config.json
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    absolute = str((tmp_path / "elsewhere" / file).resolve())
    config["config_path"] = config_path.format(file=file, absolute=absolute)
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    loaded, original = load_model(model).bilm, load_model(REFERENCE / name).bilm
    assert same_parameters(loaded, original) and loaded.lexicon == original.lexicon
    assert loaded.options == original.options


def test_the_reference_models_name_their_architecture_json_as_trained():
    """word_char's config_path is the bare file name, char_only's a training-machine path that does not exist."""
    word_char = json.loads((REFERENCE / "word_char" / "config.json").read_text(encoding="utf-8"))["config_path"]
    char_only = json.loads((REFERENCE / "char_only" / "config.json").read_text(encoding="utf-8"))["config_path"]
    assert (REFERENCE / "word_char" / word_char).is_file() and "/" not in word_char
    assert char_only.startswith("/") and not Path(char_only).exists()
    assert (REFERENCE / "char_only" / Path(char_only).name).is_file()


def test_the_weights_are_the_ones_the_reference_activations_were_computed_from():
    """manifest.json's digest of each state dict (key, then the float32 bytes, in order), which the legacy
    container's own bytes cannot give (they name storages by memory address)."""
    manifest = json.loads((REFERENCE / "manifest.json").read_text(encoding="utf-8"))
    for name in ("word_char", "char_only"):
        for part in ("token_embedder.pkl", "encoder.pkl"):
            digest = hashlib.sha256()
            for key, tensor in torch.load(REFERENCE / name / part, weights_only=True).items():
                digest.update(key.encode() + tensor.contiguous().numpy().tobytes())
            assert digest.hexdigest() == manifest["models"][name]["tensor_sha256"][part], (name, part)


def copy_with_dic(name: str, target: Path, dic: str, edit) -> Path:
    """A copy of a reference model whose `dic` (char.dic or word.dic) has its lines passed through `edit`."""
    shutil.copytree(REFERENCE / name, target)
    lines = (target / dic).read_text(encoding="utf-8").splitlines(True)
    (target / dic).write_text("".join(edit(lines)), encoding="utf-8")
    return target


def efml_ids_of(path: Path) -> dict[str, int]:
    """A .dic file as ELMoForManyLangs' Embedder reads it (the test's oracle): each line stripped and split at
    tabs, one field meaning the entry U+3000, entry -> int(id), the last line of an entry winning."""
    pairs = [line.strip().split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
    return {(pair if len(pair) == 2 else ["\u3000", *pair])[0]: int(pair[-1]) for pair in pairs}


@pytest.mark.parametrize("dic", ["char.dic", "word.dic"])
def test_a_dictionary_with_an_interior_line_removed_is_refused_naming_the_line(dic, tmp_path):
    """ELMoForManyLangs sizes the embedding by the number of entries: one line fewer no longer fits the
    weights (its load_state_dict fails), and the last id is past the table's end."""
    n = len((REFERENCE / "word_char" / dic).read_text(encoding="utf-8").splitlines())
    model = copy_with_dic("word_char", tmp_path / "model", dic, lambda lines: lines[:20] + lines[21:])
    last = (REFERENCE / "word_char" / dic).read_text(encoding="utf-8").splitlines()[-1].split("\t")[0]
    with pytest.raises(
        EfmlError,
        match=rf"{dic}, line {n - 1}: id {n - 1} of {re.escape(repr(last))} is out of range: the file has {n - 1} "
        rf"entries, .* \(no entry has id 20: a line removed\?\)$",
    ):
        load_model(model)


@pytest.mark.parametrize("dic", ["char.dic", "word.dic"])
def test_an_id_written_twice_reads_that_row_for_both_entries_as_elmoformanylangs_does(dic, tmp_path):
    """Entry 21's line given entry 20's id: ELMoForManyLangs still has one row per entry (the weights fit) and
    looks both entries up at row 20 (row 21 is read by nothing)."""

    def share(lines):
        entry, _ = lines[21].split("\t")
        return [*lines[:21], f"{entry}\t20\n", *lines[22:]]

    model = copy_with_dic("word_char", tmp_path / "model", dic, share)
    expected = efml_ids_of(model / dic)
    first, second = (line.split("\t")[0] for line in (model / dic).read_text(encoding="utf-8").splitlines()[20:22])
    assert expected[first] == expected[second] == 20 and 21 not in expected.values()
    bilm = load_model(model).bilm
    lexicon = bilm.lexicon
    n_chars = lexicon.max_characters_per_token
    for entry, i in expected.items():  # every entry reads the id ELMoForManyLangs reads it at
        if dic == "word.dic":
            assert lexicon.token_row(entry)[n_chars] - ID_SHIFT == i, entry
        elif len(entry) == 1:
            assert lexicon.token_row(entry)[1] - ID_SHIFT == i, entry
    if dic == "char.dic":  # a word spelled with either reads the same rows: the same vector
        layers = BiLMRunner(bilm).embed_sentences([[f"a{first}b", f"a{second}b"]])[0]
        numpy.testing.assert_array_equal(layers[0, 0], layers[0, 1])
    save_native(bilm, tmp_path / "native")
    again = load_model(tmp_path / "native").bilm
    assert again.lexicon == lexicon and same_parameters(again, bilm)


def test_ids_are_read_with_int_as_elmoformanylangs_reads_them(tmp_path):
    """`int(i)`: a sign, digits of any script and underscores are ids; a superscript digit is not."""
    spelled = {5: "+5", 6: "\u0666", 10: "1_0"}

    def respell(lines):
        return [f"{line.split(chr(9))[0]}\t{spelled[k]}\n" if k in spelled else line for k, line in enumerate(lines)]

    model = copy_with_dic("word_char", tmp_path / "model", "char.dic", respell)
    assert load_model(model).bilm.lexicon == load_model(REFERENCE / "word_char").bilm.lexicon
    broken = copy_with_dic("word_char", tmp_path / "broken", "char.dic", lambda lines: [*lines[:7], "x\t\u00b2\n"])
    with pytest.raises(EfmlError, match=r"char\.dic, line 8: expected 'entry<TAB>id', got 'x\\t²'"):
        load_model(broken)


def test_an_id_far_out_of_range_is_refused_before_anything_is_allocated_per_id(tmp_path):
    import tracemalloc

    def far(lines):
        entry, _ = lines[30].split("\t")
        return [*lines[:30], f"{entry}\t{10**8}\n", *lines[31:]]

    model = copy_with_dic("word_char", tmp_path / "model", "char.dic", far)
    tracemalloc.start()
    try:
        with pytest.raises(EfmlError, match=r"char\.dic, line 31: id 100000000 of .* is out of range: the file has 90"):
            load_model(model)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak


@pytest.mark.parametrize("name", ["encoder.pkl", "token_embedder.pkl"])
def test_a_cut_state_dict_is_refused_naming_it(name, tmp_path):
    """Cut anywhere (inside the header, the pickle, the storages), one line naming the file."""
    data = (REFERENCE / "word_char" / name).read_bytes()
    shutil.copytree(REFERENCE / "word_char", tmp_path / "model")
    for cut in (3, 10, 30, 60, 200, len(data) // 2, len(data) - 1):
        (tmp_path / "model" / name).write_bytes(data[:cut])
        with pytest.raises(EfmlError) as caught:
            load_model(tmp_path / "model")
        message = str(caught.value)
        assert message.startswith(f"{tmp_path / 'model' / name}: ") and "\n" not in message, (cut, message)
