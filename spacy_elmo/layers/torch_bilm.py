"""The biLM layer's torch runtime: the biLM run by PyTorch, on CPU or GPU, trainable.

The biLM's runner (`spacy_elmo.bilm.runner.BiLMRunner`) sits in a thinc `PyTorchShim`, so it follows
thinc's current device (`require_gpu`), is updated by thinc's optimizer when fine-tuned, and is
serialized with the native msgpack format of `spacy_elmo.io.native` (custom shim serializers: no
pickle, no `torch.load`). The forward pass cuts docs into sentences or windows (`segments.py`), batches
them with the one batcher and places the runner's outputs back on the docs' tokens.

`bilm_model.py` (the registered architecture, torch-free) builds this layer for `runtime = "torch"`.
"""

import copy
import functools
from typing import Any, Callable, Optional

import numpy
import torch
from spacy.tokens import Doc
from thinc.api import ArgsKwargs, Model, PyTorchShim, get_torch_default_device, torch2xp, xp2torch
from thinc.types import Floats3d

from ..bilm.batching import token_budget_batches
from ..bilm.bilm import BiLM
from ..bilm.runner import BiLMRunner
from ..io.native import bilm_from_bytes, bilm_to_bytes
from ..io.resolve import load_model
from .bilm_model import (
    BILM_LAYER_NAME,
    PATH_OPTION,
    SAVED_REMEDY,
    SHA256_OPTION,
    gather_outputs,
    layer_settings,
    placements,
    saved_weights_source,
    set_dims_from_options,
)
from .segments import segment_docs


def strip_lm_head(bilm: BiLM) -> BiLM:
    """Drop the language-model softmax: a pipe never uses it, and it can be most of the weights."""
    if bilm.softmax is not None or bilm.options.n_tokens_vocab:
        bilm.softmax = None
        options = copy.copy(bilm.options)
        options.n_tokens_vocab = 0
        bilm.options = options
        bilm.token_encoder.options = options
        bilm.lstm.options = options
    bilm.vocab = None
    return bilm


def prepare_for_pipe(bilm: BiLM) -> BiLM:
    """A biLM as the layer holds it: no LM head, trainable (fine-tuning), on thinc's current device."""
    bilm = strip_lm_head(bilm)
    for param in bilm.parameters():
        param.requires_grad_(True)
    return bilm.to(get_torch_default_device())


def load_for_pipe(path: str, sha256: Optional[str] = None) -> BiLM:
    """The runner's loader (a module-level function, so the runner stays picklable)."""
    return prepare_for_pipe(load_model(path, option=PATH_OPTION, sha256=sha256, sha256_option=SHA256_OPTION).bilm)


def serialize_runner(runner: BiLMRunner) -> bytes:
    """The shim's serializer: the native msgpack format (the biLM is loaded first if need be)."""
    return bilm_to_bytes(runner.load())


def deserialize_runner(runner: BiLMRunner, data: bytes, device: torch.device) -> BiLMRunner:
    """The shim's deserializer; errors name the file the weights come from where it is known."""
    runner.set_bilm(prepare_for_pipe(bilm_from_bytes(data, source=saved_weights_source(), remedy=SAVED_REMEDY)), device)
    return runner


def get_runner(model: Model) -> BiLMRunner:
    return model.shims[0]._model


def ensure_bilm(model: Model) -> BiLM:
    """Load the biLM if nothing has been loaded yet, and make the layer's dims match it."""
    bilm = get_runner(model).load()
    set_dims_from_options(model, bilm.options)
    return bilm


def set_bilm(model: Model, bilm: BiLM) -> None:
    """Give the layer a biLM (instead of loading the configured path)."""
    get_runner(model).set_bilm(prepare_for_pipe(bilm))


def forward(model: Model, docs: list[Doc], is_train: bool) -> tuple[list[Floats3d], Callable]:
    bilm = ensure_bilm(model)
    settings = layer_settings(model)
    runner = get_runner(model)
    segments = segment_docs(docs, settings.window_size, settings.window_context)
    lengths = [s.words + 2 for s in segments]
    # stateful: text order, no row limit (row i continues row i); stateless: length-sorted.
    # After running out of memory the runner keeps to the lower budget it set itself.
    max_rows = None if runner.stateful else runner.max_batch_size
    batches = token_budget_batches(lengths, runner.token_budget, max_rows, sort=not runner.stateful)
    tensors = []
    for batch in batches:
        words = [[docs[segments[i].doc][int(p)].text for p in segments[i].positions] for i in batch]
        tensors.append(torch.from_numpy(bilm.batch_to_ids(words)))
    shim = model.shims[0]
    fine_tune = is_train and settings.fine_tune
    inputs = ArgsKwargs(args=(tensors,), kwargs={})
    if fine_tune:
        torch_outputs, shim_backprop = shim.begin_update(inputs)
    else:
        torch_outputs = shim.predict(inputs) if tensors else []
    batch_arrays = [torch2xp(t, ops=model.ops) for t in torch_outputs]
    outputs = gather_outputs(model, docs, segments, batches, batch_arrays)
    xp = model.ops.xp

    def backprop(d_outputs: list[Floats3d]) -> list[Doc]:
        if not fine_tune:
            return []
        grads = [xp.zeros_like(a) for a in batch_arrays]
        for doc_index, keep, b, row, columns in placements(segments, batches, xp):
            grads[b][:, row, columns] = d_outputs[doc_index][:, keep]
        grad_tensors = [xp2torch(g, device=t.device) for g, t in zip(grads, torch_outputs)]
        if torch_outputs:
            shim_backprop(ArgsKwargs(args=(torch_outputs,), kwargs={"grad_tensors": grad_tensors}))
        return []

    return outputs, backprop


def init(model: Model, X: Optional[list[Doc]] = None, Y: Any = None) -> None:
    """Load and check the configured weights (unless saved ones were loaded) and take their dims."""
    ensure_bilm(model)


def build_torch_layer(
    path: str,
    sha256: Optional[str],
    token_budget: int,
    stateful: bool,
    n_threads: int,
    precision: str,
    attrs: dict[str, Any],
) -> Model[list[Doc], list[Floats3d]]:
    """The layer `spacy-elmo.BiLM.v1` builds for `runtime = "torch"` (arguments checked there)."""
    runner = BiLMRunner(
        load=functools.partial(load_for_pipe, path, sha256),
        precision=precision,
        token_budget=token_budget,
        stateful=stateful,
        n_threads=n_threads,
    )
    shim = PyTorchShim(runner, serialize_model=serialize_runner, deserialize_model=deserialize_runner)
    return Model(
        BILM_LAYER_NAME,
        forward,
        init=init,
        dims={"nO": None, "nL": None},
        shims=[shim],
        attrs=attrs,
    )


def bilm_parameters(model: Model) -> dict[str, numpy.ndarray]:
    """A numpy copy of every biLM weight (for tests and checks: did training change them?)."""
    bilm = ensure_bilm(model)
    return {name: p.detach().cpu().numpy().copy() for name, p in bilm.named_parameters()}
