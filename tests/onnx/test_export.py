"""`spacy elmo export`: one ONNX graph with a Scan over the run-time length, ONNX Runtime's layers within
1e-5 of the torch fp32 path (relative to each layer's largest value), any batch size and length."""

import hashlib

import numpy
import onnxruntime
import pytest
import torch
from typer.testing import CliRunner

import onnx
from spacy_elmo.cli import elmo_cli
from spacy_elmo.io.resolve import load_model
from spacy_elmo.onnx.export import INPUT_NAME, ExportableBiLM

SENTENCES = [["The", "cat", "sat", "."], ["Ünïcödé", "日本語", "👍🏽"], ["x" * 300], [f"w{i}" for i in range(60)]]
LONG = [[f"t{i % 37}" for i in range(300)]]


def relative(got: numpy.ndarray, expected: numpy.ndarray) -> numpy.ndarray:
    """Per layer: max |difference| / max |expected|."""
    return numpy.abs(got - expected).max(axis=(1, 2, 3)) / numpy.abs(expected).max(axis=(1, 2, 3))


@pytest.fixture(scope="module")
def exported(fixture_graph_file, shipped_graph_file):
    """Each model exported by the command (the run's shared exports)."""
    out = {}
    for name, graph in (("tests/fixtures/elmo-fixture", fixture_graph_file), ("en_elmo_small", shipped_graph_file)):
        assert f"sha256 {hashlib.sha256(graph.path.read_bytes()).hexdigest()}" in graph.output
        out[name] = (load_model(name).bilm.eval(), onnxruntime.InferenceSession(str(graph.path)), graph.path)
        out[name, "said"] = graph.said
    return out


@pytest.mark.parametrize("name", ["tests/fixtures/elmo-fixture", "en_elmo_small"])
def test_export_says_nothing_of_torchs_own_noise(exported, name):
    """torch's exporter warns that torchvision is absent and trips its own deprecation, on every export."""
    assert exported[name, "said"] == []


def test_export_help_names_the_onnx_extra():
    done = CliRunner().invoke(elmo_cli, ["export", "--help"])
    # as a clone installs it (the package is not on PyPI); the help's lines joined as the terminal wraps them
    assert done.exit_code == 0 and 'the [onnx] extra: `pip install ".[onnx]"`' in " ".join(done.output.split()), (
        done.output
    )


@pytest.mark.parametrize("name", ["tests/fixtures/elmo-fixture", "en_elmo_small"])
def test_onnx_runtime_matches_torch_on_every_layer_at_any_length(exported, name):
    bilm, session, path = exported[name]
    graph = onnx.load(str(path)).graph
    ops = {node.op_type for node in graph.node}
    assert "Scan" in ops  # a loop over the run-time length, not unrolled
    assert "Unique" in ops  # each distinct token once through the character CNN
    for batch in (SENTENCES, SENTENCES[:1], [["a"]], LONG, [*LONG, ["b"]]):
        ids = bilm.batch_to_ids(batch).astype(numpy.int64)
        got = session.run(None, {INPUT_NAME: ids})[0]
        with torch.no_grad():
            expected = bilm(torch.from_numpy(ids)).layers.numpy()
        assert got.shape == expected.shape == (bilm.options.n_layers + 1, *ids.shape[:2], bilm.options.output_dim)
        assert (relative(got, expected) <= 1e-5).all(), relative(got, expected)


def test_a_sentence_gets_the_same_layers_alone_or_in_a_batch(exported):
    bilm, session, _ = exported["en_elmo_small"]
    together = session.run(None, {INPUT_NAME: bilm.batch_to_ids(SENTENCES).astype(numpy.int64)})[0]
    for row, sentence in enumerate(SENTENCES):
        alone = session.run(None, {INPUT_NAME: bilm.batch_to_ids([sentence]).astype(numpy.int64)})[0]
        n = len(sentence) + 2
        assert (relative(together[:, row : row + 1, :n], alone[:, :, :n]) <= 1e-5).all()
        assert not together[:, row, n:].any()  # zero past the row's end


def test_the_export_module_is_the_biLM(reference_bilm):
    """The graph's source computes what `BiLM.forward` computes (here in torch, before any export)."""
    ids = torch.from_numpy(reference_bilm.batch_to_ids(SENTENCES)).long()
    with torch.no_grad():
        expected = reference_bilm(ids).layers.numpy()
        got = ExportableBiLM(reference_bilm)(ids).numpy()
    assert (relative(got, expected) <= 1e-6).all()


def test_export_refuses_a_model_that_does_not_load_naming_it(tmp_path):
    done = CliRunner().invoke(elmo_cli, ["export", str(tmp_path / "nowhere"), str(tmp_path / "m.onnx")])
    assert done.exit_code == 1 and "nowhere" in done.output and not (tmp_path / "m.onnx").exists()
