"""The biLM layer runs through the one runner: its out-of-memory split serves the pipe too."""

import re

import numpy
import pytest
import spacy

from fixture_paths import ELMO_FIXTURE
from spacy_elmo.errors import SettingError
from spacy_elmo.layers import bilm_model

TEXTS = [f"Sentence {i} talks about the bank of the river. And money {i}." for i in range(12)]


def fixture_nlp(precision: str = "fp32", **model_config) -> spacy.Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"model": {"path": str(ELMO_FIXTURE), "precision": precision, **model_config}})
    return nlp


def test_out_of_memory_in_the_pipe_is_split_and_gives_the_same_layers():
    expected = [doc._.elmo_layers for doc in fixture_nlp().pipe(TEXTS)]
    nlp = fixture_nlp()
    runner = bilm_model.runner_of(nlp.get_pipe("elmo").model)
    real_forward = runner._forward

    def forward_that_fits_3(char_ids):
        if char_ids.shape[0] > 3:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        return real_forward(char_ids)

    runner._forward = forward_that_fits_3
    got = [doc._.elmo_layers for doc in nlp.pipe(TEXTS)]
    assert runner.n_splits > 0 and runner.token_budget < 4096
    for a, b in zip(expected, got):
        assert numpy.array_equal(a, b)
    again = [doc._.elmo_layers for doc in nlp.pipe(TEXTS)]  # later batches keep to the lowered budget
    for a, b in zip(expected, again):
        assert numpy.array_equal(a, b)


def test_the_weights_load_at_initialize_and_give_the_layer_its_dims():
    nlp = fixture_nlp()
    model = nlp.get_pipe("elmo").model
    assert not bilm_model.runner_of(model).loaded  # building the pipe reads no file
    nlp.initialize()
    assert bilm_model.runner_of(model).loaded
    assert (model.get_dim("nO"), model.get_dim("nL")) == (32, 3)


def test_without_initialize_the_first_batch_loads_the_weights():
    nlp = fixture_nlp()
    doc = nlp("No initialize was called. The pipe loads on its first batch.")
    assert doc._.elmo_layers.shape == (3, len(doc), 32)
    assert bilm_model.runner_of(nlp.get_pipe("elmo").model).loaded


@pytest.mark.parametrize("when", ["initialize", "first doc"])
def test_a_missing_path_names_the_config_option_before_any_doc_is_processed(tmp_path, when):
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"model": {"path": str(tmp_path / "nowhere")}})
    seen = []
    elmo.set_annotations = lambda docs, layers: seen.extend(docs)
    with pytest.raises(FileNotFoundError, match=r"^spacy-elmo\.BiLM\.v1 model\.path: .*nowhere' does not exist"):
        nlp.initialize() if when == "initialize" else nlp("A doc that must not be processed.")
    assert not seen


@pytest.mark.parametrize("path", ["model.onnx", "/served/MODEL.ONNX"])
def test_an_onnx_graph_with_the_torch_runtime_is_refused_naming_the_setting(path):
    """Refused when the pipe is built, in one line: the torch runtime reads model directories, not graphs."""
    with pytest.raises(ValueError) as refused:
        fixture_nlp(path=path)
    assert str(refused.value) == (
        f'spacy-elmo.BiLM.v1 model.path = {path!r} is an ONNX graph, which runtime "torch" (the default) cannot '
        'load: set [components.elmo.model] runtime = "onnxruntime" (with add_pipe: config={"model": {"runtime": '
        '"onnxruntime", ...}})'
    )
    assert fixture_nlp(path=path, runtime="onnxruntime")  # that runtime takes it (read at initialize)


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_a_saved_pipe_keeps_its_precision_and_reproduces_its_outputs(tmp_path, precision):
    nlp = fixture_nlp(precision)
    before = [doc._.elmo_layers for doc in nlp.pipe(TEXTS)]
    fp32 = [doc._.elmo_layers for doc in fixture_nlp().pipe(TEXTS)]
    assert all(b.dtype == numpy.float32 for b in before)
    assert not any(numpy.array_equal(b, f) for b, f in zip(before, fp32)), "the precision did not run"
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.config["components"]["elmo"]["model"]["precision"] == precision
    assert bilm_model.runner_of(loaded.get_pipe("elmo").model).precision == precision
    after = [doc._.elmo_layers for doc in loaded.pipe(TEXTS)]
    assert all(numpy.array_equal(b, a) for b, a in zip(before, after))
    # the weights were saved as float32, whatever the precision they run at
    weights = bilm_model.bilm_parameters(loaded.get_pipe("elmo").model)
    assert all(w.dtype == numpy.float32 for w in weights.values())


def test_fine_tuning_with_int8_is_refused():
    with pytest.raises(ValueError, match="fine_tune.*int8"):
        fixture_nlp("int8", fine_tune=True)


def test_a_bad_precision_names_the_option_and_the_allowed_values():
    with pytest.raises(
        ValueError, match="^spacy-elmo.BiLM.v1 precision: must be one of 'fp32', 'bf16', 'fp16', 'int8'"
    ):
        fixture_nlp("float8")
    with pytest.raises(ValueError, match="mixed_precision"):
        spacy.blank("en").add_pipe("elmo", config={"model": {"precision": "bf16", "mixed_precision": True}})


@pytest.mark.parametrize(
    "setting,value,said",
    [
        ("n_threads", "2", "n_threads: must be an integer >= 0 (0 = the runtime's own setting), got '2'"),
        ("n_threads", -1, "n_threads: must be an integer >= 0"),
        ("token_budget", -1, "token_budget: must be an integer >= 0 (0 = the device's default), got -1"),
    ],
)
def test_a_bad_run_setting_names_itself(setting, value, said):
    with pytest.raises(SettingError, match="^" + re.escape(f"spacy-elmo.BiLM.v1 {said}")):
        spacy.blank("en").add_pipe("elmo", config={"model": {setting: value}})


def test_fp16_on_the_cpu_is_refused_before_any_doc_is_processed():
    nlp = fixture_nlp("fp16")
    with pytest.raises(ValueError, match="^precision: 'fp16' is for GPUs"):
        nlp("No fp16 products on a CPU.")


def alignment_file(path, width: int = 32, seed: int = 0):
    """A matrix as the published ones are saved: torch.save of a numpy array (the legacy layout)."""
    import torch

    matrix = numpy.random.default_rng(seed).normal(size=(width, width)).astype(numpy.float32)
    torch.save(matrix, path, _use_new_zipfile_serialization=False)
    return matrix


def test_an_alignment_maps_every_layer_and_is_saved_with_the_pipeline(tmp_path):
    """x -> x @ M.T on every layer, as AllenNLP aligns its mix; the matrix travels with nlp.to_disk."""
    matrix = alignment_file(tmp_path / "es_best_mapping.pth")
    plain = [doc._.elmo_layers for doc in fixture_nlp().pipe(TEXTS[:3])]
    nlp = fixture_nlp(alignment=str(tmp_path / "es_best_mapping.pth"))
    aligned = [doc._.elmo_layers for doc in nlp.pipe(TEXTS[:3])]
    for a, b in zip(plain, aligned):
        numpy.testing.assert_allclose(b, numpy.matmul(a, matrix.T), rtol=1e-5, atol=1e-5)
    nlp.to_disk(tmp_path / "pipeline")
    (tmp_path / "es_best_mapping.pth").unlink()  # the saved pipeline does not read it again
    again = [doc._.elmo_layers for doc in spacy.load(tmp_path / "pipeline").pipe(TEXTS[:3])]
    for a, b in zip(aligned, again):
        assert numpy.array_equal(a, b)


def test_auto_takes_the_matrix_beside_the_model_and_a_wrong_one_is_refused_naming_it(tmp_path, monkeypatch):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(ELMO_FIXTURE, model)
    matrix = alignment_file(model / "en_best_mapping.pth", seed=1)
    doc = fixture_nlp(path=str(model), alignment="auto")("A sentence .")
    plain = fixture_nlp(path=str(model))("A sentence .")
    numpy.testing.assert_allclose(doc._.elmo_layers, numpy.matmul(plain._.elmo_layers, matrix.T), rtol=1e-5, atol=1e-5)
    alignment_file(model / "de_best_mapping.pth")
    with pytest.raises(
        SettingError, match=r'^spacy-elmo\.BiLM\.v1 alignment: "auto" takes the one \.pth file .* holds 2'
    ):
        fixture_nlp(path=str(model), alignment="auto").initialize()
    alignment_file(tmp_path / "cwd.pth")  # the default model ("") is the shipped one: "auto" looks beside it
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingError, match=r"spacy-elmo\.BiLM\.v1 alignment: .*en_elmo_small holds 0"):
        fixture_nlp(path="", alignment="auto").initialize()
    alignment_file(tmp_path / "wide.pth", width=8)
    with pytest.raises(
        ValueError,
        match=r"^spacy-elmo\.BiLM\.v1 alignment: \S*wide\.pth: a 8-wide matrix, and the model's vectors are 32 wide",
    ):
        fixture_nlp(alignment=str(tmp_path / "wide.pth")).initialize()
