"""The exported graph served by ONNX Runtime (`OnnxRunner`): the .onnx file alone is the model (options and
lexicon in its metadata), its layers are the torch runner's within 1e-5 relative (fixture, shipped,
ELMoForManyLangs-style and full-size models), and a foreign, damaged or edited graph is refused with its
name (a flipped weight byte by the digest the graph records, an edited option by the graph's shapes)."""

import hashlib
import json
import pickle
from typing import Callable

import numpy
import onnxruntime
import pytest
from typer.testing import CliRunner

import onnx
from efml_models import efml_bilm
from fixture_paths import ELMO_FIXTURE
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.lexicon import ByteLexicon
from spacy_elmo.bilm.options import full_options
from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.cli import elmo_cli
from spacy_elmo.io.onnx_graph import (
    FORMAT,
    FORMAT_KEY,
    GRAPH_SHA256_KEY,
    OPTIONS_KEY,
    OnnxModelError,
    declared_values,
    metadata_strings,
)
from spacy_elmo.io.resolve import load_model
from spacy_elmo.onnx.export import export_bytes
from spacy_elmo.onnx.runtime import OnnxRunner

SENTENCES = [
    ["The", "cat", "sat", "."],
    ["Ünïcödé", "日本語", "👍🏽", "\u3000"],
    ["x" * 300],
    [f"w{i}" for i in range(60)],
    [],
    ["a"],
]


def relative(got: numpy.ndarray, expected: numpy.ndarray) -> float:
    """max |difference| / max |expected| over each layer, the worst layer."""
    scale = numpy.abs(expected).max(axis=(1, 2))
    return float((numpy.abs(got - expected).max(axis=(1, 2)) / numpy.maximum(scale, 1e-30)).max())


def assert_same_layers(served: OnnxRunner, bilm: BiLM, sentences=SENTENCES) -> None:
    expected = BiLMRunner(bilm.eval()).embed_sentences(sentences)
    got = served.embed_sentences(sentences)
    for sentence, g, e in zip(sentences, got, expected):
        assert g.shape == e.shape == (bilm.options.n_output_layers, len(sentence), bilm.options.output_dim)
        assert g.dtype == numpy.float32
        if len(sentence):
            assert relative(g, e) <= 1e-5, (sentence[:3], relative(g, e))


@pytest.fixture(scope="module")
def fixture_graph(fixture_graph_file):
    """The reference model and its graph (the run's one export: read-only)."""
    return load_model(str(ELMO_FIXTURE)), fixture_graph_file.path


def test_the_file_alone_is_the_model(fixture_graph):
    loaded, path = fixture_graph
    served = OnnxRunner.from_file(path)
    assert served.options == loaded.bilm.options
    assert served.lexicon == ByteLexicon(loaded.bilm.options.max_characters_per_token)  # bytes, as bilm-tf reads
    assert served.metadata.source_sha256 == loaded.sha256
    assert served.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert_same_layers(served, loaded.bilm)


def test_the_shipped_model_serves_the_torch_layers(shipped_graph_file):
    loaded = load_model("en_elmo_small")
    assert_same_layers(OnnxRunner.from_file(shipped_graph_file.path), loaded.bilm)


@pytest.fixture(scope="module")
def efml_graph() -> tuple[BiLM, bytes]:
    """An ELMoForManyLangs-style model and its graph, exported once for the module."""
    bilm = efml_bilm(seed=3)
    return bilm, export_bytes(bilm)


def test_a_model_with_its_own_vocabularies_carries_them_in_the_graph(efml_graph):
    """An ELMoForManyLangs-style model (character and word vocabularies, input-gated highway, clips)."""
    bilm, graph = efml_graph
    served = OnnxRunner(graph)
    assert served.lexicon == bilm.lexicon
    sentences = [["the", "cat", "Жжд", "中x"], ["a" * 40], ["👍🏽"], ["<bos>", "cat", "\u3000"]]
    assert numpy.array_equal(served.batch_to_ids(sentences), bilm.batch_to_ids(sentences))
    assert_same_layers(served, bilm, sentences)


def test_a_full_size_model_serves_the_torch_layers():
    """The paper's 2x4096_512_2048cnn_2xhighway architecture, random weights."""
    bilm = BiLM(full_options())
    bilm.reset_parameters(0)
    served = OnnxRunner(export_bytes(bilm))
    assert_same_layers(served, bilm, [SENTENCES[0], SENTENCES[1], SENTENCES[3][:25], ["b"]])


def test_the_metadata_read_from_the_bytes_is_what_onnx_runtime_reads(fixture_graph, efml_graph):
    """`metadata_strings` and `declared_values` walk the graph's bytes (no session); ONNX Runtime's own reading
    is the reference, non-ASCII vocabularies included."""
    for graph in (fixture_graph[1].read_bytes(), efml_graph[1]):
        session = onnxruntime.InferenceSession(graph, providers=["CPUExecutionProvider"])
        assert metadata_strings(graph) == dict(session.get_modelmeta().custom_metadata_map)
        inputs, outputs = declared_values(graph)
        assert inputs == [(value.name, value.shape) for value in session.get_inputs()]
        assert outputs == [(value.name, value.shape) for value in session.get_outputs()]
    assert any(not text.isascii() for text in metadata_strings(efml_graph[1]).values())


def test_a_sentence_gets_the_same_layers_alone_or_in_any_batch(fixture_graph):
    served = OnnxRunner.from_file(fixture_graph[1])
    together = served.embed_batch(SENTENCES)
    reversed_batch = served.embed_batch(SENTENCES[::-1])[::-1]
    for sentence, a, b in zip(SENTENCES, together, reversed_batch):
        alone = served.embed_batch([sentence])[0]
        if len(sentence):
            assert relative(a, alone) <= 1e-5 and relative(b, alone) <= 1e-5


def test_a_pickled_copy_runs_the_same(fixture_graph):
    served = OnnxRunner.from_file(fixture_graph[1])
    expected = served.embed_sentences(SENTENCES[:2])
    copy = pickle.loads(pickle.dumps(served))
    assert copy.session() is not served.session()  # a session is never pickled: the copy makes its own
    for a, b in zip(expected, copy.embed_sentences(SENTENCES[:2])):
        assert numpy.array_equal(a, b)


def test_a_graph_without_spacy_elmo_metadata_is_refused_by_name(fixture_graph, tmp_path):
    proto = onnx.load(str(fixture_graph[1]))
    kept = [p for p in proto.metadata_props if p.key != FORMAT_KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    foreign = tmp_path / "foreign.onnx"
    onnx.save(proto, str(foreign))
    with pytest.raises(OnnxModelError, match=r"foreign\.onnx.*no spacy-elmo metadata.*spacy_elmo export"):
        OnnxRunner.from_file(foreign)


def test_damaged_or_missing_graphs_are_refused_by_name(fixture_graph, tmp_path):
    damaged = tmp_path / "damaged.onnx"
    damaged.write_bytes(fixture_graph[1].read_bytes()[:10_000])
    with pytest.raises(OnnxModelError, match=r"damaged\.onnx: not a readable ONNX graph"):
        OnnxRunner.from_file(damaged)
    with pytest.raises(FileNotFoundError, match=r"absent\.onnx"):
        OnnxRunner.from_file(tmp_path / "absent.onnx")


def test_serving_imports_no_torch_module_of_its_own():
    """The runtime's modules name torch nowhere (the subprocess test in tests/layers runs them with it hidden)."""
    import spacy_elmo.io.onnx_graph
    import spacy_elmo.onnx.runtime

    for module in (spacy_elmo.onnx.runtime, spacy_elmo.io.onnx_graph):
        source = open(module.__file__, encoding="utf-8").read()
        assert "import torch" not in source and "from torch" not in source, module.__name__


def edited(path, target, edit: Callable[[onnx.ModelProto], None]):
    """A copy of the graph at `path`, edited with the `onnx` package, at `target`."""
    proto = onnx.load(str(path))
    edit(proto)
    onnx.save(proto, str(target))
    return target


def edit_option(section: str, key: str, value: int) -> Callable[[onnx.ModelProto], None]:
    def edit(proto: onnx.ModelProto) -> None:
        (entry,) = [p for p in proto.metadata_props if p.key == OPTIONS_KEY]
        options = json.loads(entry.value)
        options[section][key] = value
        entry.value = json.dumps(options)

    return edit


def test_the_graph_records_the_digest_of_its_own_bytes(fixture_graph):
    data = fixture_graph[1].read_bytes()
    (recorded,) = [p.value for p in onnx.load(str(fixture_graph[1])).metadata_props if p.key == GRAPH_SHA256_KEY]
    entry = onnx.StringStringEntryProto(key=GRAPH_SHA256_KEY, value=recorded).SerializeToString()
    record = b"\x72" + bytes([len(entry)]) + entry  # ModelProto field 14, length-delimited
    assert data.count(record) == 1
    assert hashlib.sha256(data.replace(record, b"")).hexdigest() == recorded


def flip_a_weight_byte(path) -> None:
    """One bit of a weight of the graph at `path` flipped in place; ONNX Runtime alone would serve the file."""
    data = bytearray(path.read_bytes())
    (weight,) = [i for i in onnx.load(str(path)).graph.initializer if i.name.endswith("highway_carry_w.0")]
    at = bytes(data).find(weight.raw_data)
    assert at > 0 and bytes(data).count(weight.raw_data) == 1
    data[at + len(weight.raw_data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    onnxruntime.InferenceSession(bytes(data))


def test_a_flipped_byte_in_a_weight_is_refused_naming_the_file(fixture_graph, tmp_path):
    damaged = tmp_path / "damaged.onnx"
    damaged.write_bytes(fixture_graph[1].read_bytes())
    flip_a_weight_byte(damaged)
    with pytest.raises(OnnxModelError, match=rf"^{damaged}: the ONNX graph's content has SHA-256 [0-9a-f]{{64}}, not"):
        OnnxRunner.from_file(damaged)


def forget_digest(proto: onnx.ModelProto) -> None:
    kept = [p for p in proto.metadata_props if p.key != GRAPH_SHA256_KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)


def in_format(graph_format: str) -> Callable[[onnx.ModelProto], None]:
    def edit(proto: onnx.ModelProto) -> None:
        (entry,) = [p for p in proto.metadata_props if p.key == FORMAT_KEY]
        entry.value = graph_format

    return edit


def test_export_writes_the_format_that_requires_the_digest(fixture_graph):
    strings = {p.key: p.value for p in onnx.load(str(fixture_graph[1])).metadata_props}
    assert strings[FORMAT_KEY] == FORMAT == "spacy-elmo.onnx.v2"
    assert len(strings[GRAPH_SHA256_KEY]) == 64


@pytest.mark.parametrize("flip", [False, True], ids=["as exported", "a weight byte flipped"])
def test_a_graph_whose_digest_entry_was_deleted_is_refused_naming_the_file(fixture_graph, tmp_path, flip):
    """Format 2 requires the digest: deleting its entry (with a damaged weight or not) is no way around it."""
    stripped = edited(fixture_graph[1], tmp_path / "stripped.onnx", forget_digest)
    if flip:
        flip_a_weight_byte(stripped)
    message = (
        rf"^{stripped}: the ONNX graph is in format '{FORMAT}' \({FORMAT_KEY}\), which records the digest of its "
        rf"content, and its {GRAPH_SHA256_KEY} entry is missing: the file was edited or damaged; export it again"
    )
    with pytest.raises(OnnxModelError, match=message):
        OnnxRunner.from_file(stripped)


def test_a_format_entry_edited_to_another_format_is_refused_naming_both(fixture_graph, tmp_path):
    """Only the format export writes is served: an older development format is not read."""
    changed = edited(fixture_graph[1], tmp_path / "changed.onnx", in_format("spacy-elmo.onnx.v1"))
    message = rf"^{changed}: the ONNX graph is in format 'spacy-elmo.onnx.v1', expected 'spacy-elmo.onnx.v2'"
    with pytest.raises(OnnxModelError, match=message):
        OnnxRunner.from_file(changed)


EDITS = [
    ("char_cnn", "max_characters_per_token", 40, "input's last dim is 50"),
    ("lstm", "projection_dim", 17, "output's last dim is 32"),
    ("lstm", "n_layers", 3, "output's first dim is 3"),
]


@pytest.mark.parametrize("section, key, value, graph_says", EDITS)
def test_an_option_edited_in_the_metadata_is_refused_naming_the_key(
    fixture_graph, tmp_path, section, key, value, graph_says
):
    changed = edited(fixture_graph[1], tmp_path / "edited.onnx", edit_option(section, key, value))
    message = rf"^{changed}: {OPTIONS_KEY} {section}\.{key} = {value} disagrees with the graph, whose {graph_says}"
    with pytest.raises(OnnxModelError, match=message):
        OnnxRunner.from_file(changed)
    # `embed` loads through the same class: refused there too, in one line, before writing anything
    (tmp_path / "in.txt").write_text("The cat sat .\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    done = CliRunner().invoke(
        elmo_cli, ["embed", str(changed), str(tmp_path / "in.txt"), str(out), "--runtime", "onnxruntime"]
    )
    assert done.exit_code == 1 and not out.exists(), done.output
    assert f"{OPTIONS_KEY} {section}.{key} = {value} disagrees" in done.output


def test_a_lexicon_that_disagrees_with_the_options_is_refused_naming_both(efml_graph, tmp_path):
    bilm, graph = efml_graph
    width = bilm.lexicon.max_characters_per_token
    path = tmp_path / "efml.onnx"
    path.write_bytes(graph)
    changed = edited(path, tmp_path / "edited.onnx", edit_option("char_cnn", "max_characters_per_token", width + 3))
    message = rf"max_characters_per_token = {width + 3} but spacy_elmo\.lexicon max_characters_per_token = {width};"
    with pytest.raises(OnnxModelError, match=message):
        OnnxRunner.from_file(changed)
