"""The pipe with `runtime = "onnxruntime"`: the torch pipe's layers within 1e-5 relative, the graph saved
as the pipeline's weights, and a saved pipeline that loads and runs with torch hidden."""

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy
import pytest
import spacy

from fixture_paths import ELMO_FIXTURE, ROOT
from spacy_elmo.errors import SettingError
from spacy_elmo.io.onnx_graph import FORMAT, OPTIONS_KEY, OnnxModelError

TEXTS = [
    "The biLM reads every sentence in both directions. Then it reads the next one.",
    "Ünïcödé 日本語 👍🏽 and a 300-character token: " + "x" * 300,
    " ".join(f"w{i % 41}" for i in range(300)),  # one long sentence: cut into windows
    "",
    "A",
]


def relative(got: numpy.ndarray, expected: numpy.ndarray) -> float:
    scale = numpy.abs(expected).max(axis=(1, 2))
    return float((numpy.abs(got - expected).max(axis=(1, 2)) / numpy.maximum(scale, 1e-30)).max())


def make_nlp(**model) -> spacy.Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"model": {"path": str(ELMO_FIXTURE), **model}})
    return nlp


def assert_close_layers(got: list, expected: list) -> None:
    for text, a, b in zip(TEXTS, got, expected):
        assert a.shape == b.shape, text[:20]
        if a.size:
            assert relative(a, b) <= 1e-5, (text[:20], relative(a, b))


@pytest.fixture(scope="module")
def graph(tmp_path_factory, fixture_graph_file):
    """The run's export of the reference model, copied: a test here moves it."""
    return Path(shutil.copyfile(fixture_graph_file.path, tmp_path_factory.mktemp("graph") / "fixture.onnx"))


@pytest.fixture(scope="module")
def torch_layers():
    return [doc._.elmo_layers for doc in make_nlp().pipe(TEXTS)]


def test_an_exported_graph_gives_the_torch_pipes_layers(graph, torch_layers):
    nlp = make_nlp(path=str(graph), runtime="onnxruntime")
    assert nlp.get_pipe("elmo").runtime == "onnxruntime"
    assert_close_layers([doc._.elmo_layers for doc in nlp.pipe(TEXTS)], torch_layers)
    # a doc gets the same layers alone as in any batch
    for text, together in zip(TEXTS, [doc._.elmo_layers for doc in nlp.pipe(TEXTS[::-1], batch_size=2)][::-1]):
        alone = nlp(text)._.elmo_layers
        if alone.size:
            assert relative(together, alone) <= 1e-5


def test_any_other_model_is_exported_when_the_pipe_is_initialized(torch_layers):
    nlp = make_nlp(runtime="onnxruntime")
    nlp.initialize()
    assert_close_layers([doc._.elmo_layers for doc in nlp.pipe(TEXTS)], torch_layers)


def test_the_saved_pipeline_holds_the_graph_and_loads_the_same(graph, tmp_path):
    nlp = make_nlp(path=str(graph), runtime="onnxruntime")
    expected = [doc._.elmo_layers for doc in nlp.pipe(TEXTS)]
    nlp.to_disk(tmp_path / "served")
    assert FORMAT.encode() in (tmp_path / "served" / "elmo" / "model").read_bytes()
    graph.rename(graph.with_suffix(".moved"))  # the configured path is never read again
    try:
        loaded = spacy.load(tmp_path / "served")
    finally:
        graph.with_suffix(".moved").rename(graph)
    for a, b in zip([doc._.elmo_layers for doc in loaded.pipe(TEXTS)], expected):
        assert numpy.array_equal(a, b)


def test_a_torch_pipeline_loads_with_the_onnx_runtime_for_serving(tmp_path, torch_layers):
    make_nlp().to_disk(tmp_path / "trained")
    override = {"components": {"elmo": {"model": {"runtime": "onnxruntime"}}}}
    served = spacy.load(tmp_path / "trained", config=override)
    assert_close_layers([doc._.elmo_layers for doc in served.pipe(TEXTS)], torch_layers)
    served.to_disk(tmp_path / "served")
    assert spacy.load(tmp_path / "served").get_pipe("elmo").runtime == "onnxruntime"


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"fine_tune": True}, "fine_tune: true needs gradients"),
        ({"stateful": True}, "stateful: true carries LSTM state"),
        ({"precision": "bf16"}, "precision: 'bf16': the exported graph runs in fp32"),
        ({"runtime": "tensorflow"}, "runtime: must be one of torch, onnxruntime, got 'tensorflow'"),
    ],
)
def test_what_the_graph_cannot_do_is_refused_naming_the_setting(setting, message):
    with pytest.raises(SettingError, match=f"^spacy-elmo.BiLM.v1 {message}"):
        make_nlp(runtime="onnxruntime", **setting) if "runtime" not in setting else make_nlp(**setting)


def test_torch_only_access_says_which_runtime_runs(graph):
    pipe = make_nlp(path=str(graph), runtime="onnxruntime").get_pipe("elmo")
    with pytest.raises(ValueError, match="runtime 'onnxruntime'.*runtime = \"torch\""):
        pipe.bilm  # noqa: B018


def test_a_pinned_graph_is_checked(graph):
    with pytest.raises(
        ValueError,
        match=r"^spacy-elmo\.BiLM\.v1 model\.sha256: .*fixture\.onnx: SHA-256 .* differs from the pinned digest",
    ):
        make_nlp(path=str(graph), runtime="onnxruntime", sha256="0" * 64)("A b.")
    import hashlib

    digest = hashlib.sha256(graph.read_bytes()).hexdigest()
    assert make_nlp(path=str(graph), runtime="onnxruntime", sha256=digest)("A b.")._.elmo_layers.shape[1] == 2


def test_an_option_edited_in_the_graphs_metadata_is_refused_by_the_pipe_naming_the_key(graph, tmp_path):
    import onnx

    proto = onnx.load(str(graph))
    (entry,) = [p for p in proto.metadata_props if p.key == OPTIONS_KEY]
    options = json.loads(entry.value)
    options["lstm"]["projection_dim"] += 1
    entry.value = json.dumps(options)
    onnx.save(proto, str(tmp_path / "edited.onnx"))
    nlp = make_nlp(path=str(tmp_path / "edited.onnx"), runtime="onnxruntime")
    edited = options["lstm"]["projection_dim"]
    with pytest.raises(OnnxModelError, match=rf"edited\.onnx: {OPTIONS_KEY} lstm\.projection_dim = {edited} disagrees"):
        nlp("A b.")


def test_a_damaged_saved_pipeline_is_refused_naming_its_file_and_how_to_mend_it(graph, tmp_path):
    """A saved pipeline's graph is its own: the advice is to save the pipeline again, not to export a model."""
    import onnx

    make_nlp(path=str(graph), runtime="onnxruntime").to_disk(tmp_path / "served")
    weights = tmp_path / "served" / "elmo" / "model"
    data = bytearray(weights.read_bytes())
    (weight,) = [i for i in onnx.load(str(graph)).graph.initializer if i.name.endswith("highway_carry_w.0")]
    at = bytes(data).find(weight.raw_data)
    assert at > 0
    data[at + len(weight.raw_data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    damaged = (
        r": the ONNX graph's content has SHA-256 [0-9a-f]{64}, not the [0-9a-f]{64} recorded in it .*: the file is "
    )
    mend = r"damaged or was edited; save the pipeline again \(nlp\.to_disk\) from a copy that loads, or train it again$"
    with pytest.raises(OnnxModelError, match=f"^{re.escape(str(weights))}{damaged}{mend}"):
        spacy.load(tmp_path / "served")
    # from bytes no file is known: the weights are named as the pipeline's, with the same advice
    model = make_nlp(path=str(graph), runtime="onnxruntime").get_pipe("elmo").model
    with pytest.raises(OnnxModelError, match=f"^spacy-elmo pipeline weights{damaged}{mend}"):
        model.from_bytes(bytes(data))


# as where torch is not installed: importing it fails as Python's import system fails it
HIDE_TORCH = """
import sys
class HideTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
sys.meta_path.insert(0, HideTorch())
"""
HIDDEN_TORCH = HIDE_TORCH + textwrap.dedent(
    """
    import json
    import numpy, spacy
    nlp = spacy.load(sys.argv[1])
    texts = json.loads(sys.argv[2])
    numpy.savez(sys.argv[3], *[doc._.elmo_layers for doc in nlp.pipe(texts)])
    print(json.dumps(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))))
    """
)


@pytest.mark.slow
def test_a_saved_pipeline_loads_and_runs_with_torch_hidden(graph, tmp_path):
    nlp = make_nlp(path=str(graph), runtime="onnxruntime")
    expected = [doc._.elmo_layers for doc in nlp.pipe(TEXTS)]
    nlp.to_disk(tmp_path / "served")
    out = tmp_path / "layers.npz"
    done = subprocess.run(
        [sys.executable, "-c", HIDDEN_TORCH, str(tmp_path / "served"), json.dumps(TEXTS), str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []  # no torch module was loaded
    with numpy.load(out) as got:
        for i, layers in enumerate(expected):
            assert numpy.array_equal(got[f"arr_{i}"], layers)


@pytest.mark.slow
def test_a_torch_pipeline_where_torch_is_not_installed_says_how_to_serve_it(tmp_path):
    make_nlp().to_disk(tmp_path / "trained")
    done = subprocess.run(
        [sys.executable, "-c", HIDE_TORCH + "import spacy; spacy.load(sys.argv[1])", str(tmp_path / "trained")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        'ModuleNotFoundError: spacy-elmo.BiLM.v1: this pipeline runs its biLM with runtime "torch", and torch is '
        'not installed: install torch, or serve it without torch with runtime "onnxruntime"'
    ), last
    assert '{"runtime": "onnxruntime"}' in last and "nlp.to_disk" in last
    assert "During handling" not in done.stderr  # the import's own traceback is not chained on
