"""The `elmo` pipe and `spacy train` on a GPU (issue 38): the CPU's layers, arrays where `to_cpu` puts
them, listeners that learn there, and a pipeline trained there that predicts the same on the CPU.

Skipped without CUDA; run on a GPU machine with `pytest -m gpu tests`.
"""

from collections.abc import Iterator
from pathlib import Path

import numpy
import pytest
import spacy
import torch
from spacy.tokens import DocBin
from thinc.api import require_cpu

from fixture_paths import FIXTURES
from spacy_elmo.layers.bilm_model import runner_of

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SAMPLES = FIXTURES / "spacy"
TEXTS = [
    "The bank raised its rates while we sat on the river bank.",
    "ELMo vectors depend on context: bank and bank differ here.",
    "Short one.",
    " ".join(["word"] * 300) + " and a very long sentence ends here .",
    "Zürich, 東京 and Москва are three cities ; ☃ is a snowman .",
]


@pytest.fixture
def on_gpu() -> Iterator[None]:
    """thinc and torch on the GPU with real fp32 products (TF32 off), restored after the test."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    spacy.require_gpu()
    yield
    require_cpu()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def elmo_nlp(**config) -> spacy.Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=config)
    return nlp


def layers_of(nlp: spacy.Language) -> list[numpy.ndarray]:
    return [numpy.asarray(doc._.elmo_layers) for doc in nlp.pipe(TEXTS)]


@pytest.fixture(scope="module")
def cpu_layers() -> list[numpy.ndarray]:
    """The shipped model's layers on the CPU: the reference for the GPU runs."""
    require_cpu()
    return layers_of(elmo_nlp())


def test_the_pipe_on_the_gpu_gives_the_cpus_layers_in_fp32(on_gpu, cpu_layers) -> None:
    nlp = elmo_nlp()
    runner = runner_of(nlp.get_pipe("elmo").model)
    got = layers_of(nlp)
    assert next(runner.load().parameters()).device.type == "cuda"
    assert [g.shape for g in got] == [c.shape for c in cpu_layers]
    assert max(float(numpy.abs(g - c).max()) for g, c in zip(got, cpu_layers)) <= 1e-5


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_pipe_on_the_gpu_in_mixed_precision_is_within_2e_2(on_gpu, cpu_layers, precision: str) -> None:
    got = layers_of(elmo_nlp(model={"precision": precision}))
    for g, c in zip(got, cpu_layers):
        assert g.dtype == numpy.float32
        assert float(numpy.linalg.norm(g - c) / numpy.linalg.norm(c)) <= 2e-2


def test_to_cpu_says_where_the_arrays_land(on_gpu) -> None:
    import cupy

    on_host = elmo_nlp(to_cpu=True)(TEXTS[0])
    assert isinstance(on_host._.elmo_layers, numpy.ndarray) and isinstance(on_host._.elmo, numpy.ndarray)
    on_device = elmo_nlp(to_cpu=False, store="both")(TEXTS[0])
    assert isinstance(on_device._.elmo_layers, cupy.ndarray)
    for value in (on_device._.elmo, on_device[1:4]._.elmo, on_device[2]._.elmo):
        assert isinstance(value, cupy.ndarray)
    numpy.testing.assert_allclose(cupy.asnumpy(on_device._.elmo), on_host._.elmo, atol=1e-5)


def test_the_out_of_memory_split_completes_with_the_same_outputs(on_gpu) -> None:
    """A batch that cannot fit (the process's memory fraction lowered) is split and still embedded."""
    from spacy_elmo.bilm.bilm import BiLM
    from spacy_elmo.bilm.options import full_options
    from spacy_elmo.bilm.runner import BiLMRunner

    bilm = BiLM(full_options()).eval()
    bilm.reset_parameters(0)
    bilm.to("cuda")
    words = TEXTS[0].split()
    sentences = [[words[(i + j) % len(words)] for j in range(40 - i % 5)] for i in range(2048)]
    expected = BiLMRunner(bilm, token_budget=8192).embed_sentences(sentences[:64])
    torch.cuda.empty_cache()
    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(min(1.0, (torch.cuda.memory_allocated() + 2 * 1024**3) / total))
    try:
        runner = BiLMRunner(bilm, token_budget=10**7)
        got = runner.embed_sentences(sentences)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert runner.n_splits > 0 and len(got) == len(sentences)
    assert max(float(numpy.abs(a - b).max()) for a, b in zip(expected, got)) <= 1e-5


def predictions(nlp: spacy.Language) -> tuple[list[list[tuple[int, int, str]]], numpy.ndarray]:
    ents, cats = [], []
    for name in ("wnut17", "mr"):
        docs = DocBin().from_disk(SAMPLES / "dev" / f"{name}.spacy").get_docs(nlp.vocab)
        for doc in nlp.pipe(d.text for d in docs):
            ents.append([(e.start, e.end, e.label_) for e in doc.ents])
            cats.append([doc.cats[k] for k in sorted(doc.cats)])
    return ents, numpy.asarray(cats)


def test_spacy_train_on_the_gpu_learns_and_the_pipeline_predicts_the_same_on_the_cpu(tmp_path: Path) -> None:
    """`spacy train --gpu-id 0` (the same function) with ner + textcat listening to one elmo pipe."""
    from test_training import dev_scores, mix_of, spacy_train

    try:
        on_gpu = spacy_train(tmp_path, use_gpu=0, **{"training.max_epochs": 6})
        assert next(runner_of(on_gpu.get_pipe("elmo").model).load().parameters()).device.type == "cuda"
        for component in ("ner", "textcat"):
            weights, gamma = mix_of(on_gpu, component)
            assert float(abs(weights).max()) > 1e-3 and abs(gamma - 1.0) > 1e-3, component
        assert dev_scores(on_gpu, "wnut17")["ents_f"] > 0.6
        assert dev_scores(on_gpu, "mr")["cats_macro_f"] > 0.65
        gpu_ents, gpu_cats = predictions(on_gpu)
    finally:
        require_cpu()
    on_cpu = spacy.load(tmp_path / "out" / "model-last")
    cpu_ents, cpu_cats = predictions(on_cpu)
    assert cpu_ents == gpu_ents
    assert float(numpy.abs(cpu_cats - gpu_cats).max()) <= 1e-4
