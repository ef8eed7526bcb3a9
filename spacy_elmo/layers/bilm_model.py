"""The biLM as a thinc layer: docs in, one (n_layers, n_tokens, 2P) array of layer outputs per doc out.

The biLM's runner (`spacy_elmo.bilm.runner.BiLMRunner`) sits in a thinc `PyTorchShim`, so it follows
thinc's current device (`require_gpu`), is updated by thinc's optimizer when fine-tuned, and is
serialized with the native msgpack format of `spacy_elmo.io.native` (custom shim serializers: no
pickle, no `torch.load`). This layer cuts docs into sentences or windows (`segments.py`), batches them
with the one batcher and places the runner's outputs back on the docs' tokens.

Weights are loaded by the layer's `init` (`nlp.initialize()`), or by `from_bytes`/`from_disk` when a
saved pipeline is loaded (then the configured path is never read: it may not exist where the pipeline
is deployed). A pipe added with `nlp.add_pipe("elmo")` and used at once, with no `nlp.initialize()`,
loads on its first batch, before any doc is processed; a bad path fails there, naming it.

The settings are arguments of `spacy-elmo.BiLM.v1` and nothing else: the runner holds how the biLM
runs, and a frozen `BiLMLayerSettings` in the attrs (which thinc cannot serialize, so never saves) the
windows and fine-tuning; the shim saves only weights. The config a pipeline is loaded with decides them,
never a saved copy.
"""

import copy
import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy
import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, PyTorchShim, get_torch_default_device, torch2xp, xp2torch
from thinc.types import Floats3d

from ..bilm.batching import (
    DEFAULT_TOKEN_BUDGET,
    DEFAULT_WINDOW_CONTEXT,
    DEFAULT_WINDOW_SIZE,
    check_window,
    token_budget_batches,
)
from ..bilm.bilm import BiLM
from ..bilm.options import BiLMOptions
from ..bilm.precision import check_precision
from ..bilm.runner import BiLMRunner, token_slice
from ..io.digest import parse_pin
from ..io.native import bilm_from_bytes, bilm_to_bytes
from ..io.resolve import load_model
from .segments import segment_docs

BILM_LAYER_NAME = "elmo-bilm"
ARCHITECTURE = "spacy-elmo.BiLM.v1"
PATH_OPTION = f"{ARCHITECTURE} model.path"
SHA256_OPTION = f"{ARCHITECTURE} model.sha256"


@dataclass(frozen=True)
class BiLMLayerSettings:
    """The layer's own part of what `spacy-elmo.BiLM.v1` was built with (see its docstring for each); the
    weights path is the runner's loader's, and how the biLM runs (token budget, state, threads, precision)
    the runner's settings."""

    window_size: int
    window_context: int
    fine_tune: bool


def layer_settings(model: Model) -> BiLMLayerSettings:
    return model.attrs["settings"]


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
    runner.set_bilm(prepare_for_pipe(bilm_from_bytes(data, source="spacy-elmo pipeline weights")), device)
    return runner


def get_runner(model: Model) -> BiLMRunner:
    return model.shims[0]._model


def ensure_bilm(model: Model) -> BiLM:
    """Load the biLM if nothing has been loaded yet, and make the layer's dims match it."""
    bilm = get_runner(model).load()
    set_dims_from_options(model, bilm.options)
    return bilm


def set_dims_from_options(model: Model, options: BiLMOptions) -> None:
    for dim, value in (("nO", options.output_dim), ("nL", options.n_output_layers)):
        if model.has_dim(dim) and model.get_dim(dim) != value:
            raise ValueError(
                f"{model.name}: the biLM has {dim}={value} but the layer was saved with "
                f"{dim}={model.get_dim(dim)}; the weights do not belong to this pipeline"
            )
        if not model.has_dim(dim):
            model.set_dim(dim, value)


def set_bilm(model: Model, bilm: BiLM) -> None:
    """Give the layer a biLM (instead of loading the configured path)."""
    get_runner(model).set_bilm(prepare_for_pipe(bilm))


def forward(model: Model, docs: list[Doc], is_train: bool) -> tuple[list[Floats3d], Callable]:
    bilm = ensure_bilm(model)
    settings = layer_settings(model)
    ops = model.ops
    runner = get_runner(model)
    n_layers, width = model.get_dim("nL"), model.get_dim("nO")
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
    batch_arrays = [torch2xp(t, ops=ops) for t in torch_outputs]
    outputs = [ops.alloc3f(n_layers, len(doc), width) for doc in docs]
    xp = ops.xp

    def places():
        for b, batch in enumerate(batches):
            for row, index in enumerate(batch):
                seg = segments[index]
                keep = seg.positions[seg.keep_start : seg.keep_end]
                yield seg.doc, (keep if xp is numpy else xp.asarray(keep)), b, row, seg

    for doc_index, keep, b, row, seg in places():
        outputs[doc_index][:, keep] = batch_arrays[b][:, row, token_slice(seg.keep_start, seg.keep_end)]

    def backprop(d_outputs: list[Floats3d]) -> list[Doc]:
        if not fine_tune:
            return []
        grads = [xp.zeros_like(a) for a in batch_arrays]
        for doc_index, keep, b, row, seg in places():
            grads[b][:, row, token_slice(seg.keep_start, seg.keep_end)] = d_outputs[doc_index][:, keep]
        grad_tensors = [xp2torch(g, device=t.device) for g, t in zip(grads, torch_outputs)]
        if torch_outputs:
            shim_backprop(ArgsKwargs(args=(torch_outputs,), kwargs={"grad_tensors": grad_tensors}))
        return []

    return outputs, backprop


def init(model: Model, X: Optional[list[Doc]] = None, Y: Any = None) -> None:
    """Load and check the configured weights (unless saved ones were loaded) and take their dims."""
    ensure_bilm(model)


def replace_listener(model: Model, listener: Model, pipe: Any) -> Model:
    """`nlp.replace_listeners`: a listener is replaced by a copy of this layer (same outputs)."""
    return model


def replace_listener_cfg(bilm_cfg: dict[str, Any], listener_owner_cfg: dict[str, Any]) -> dict[str, Any]:
    """`nlp.replace_listeners`: the config at the listener path with every `ElmoListener` in it
    replaced by a standalone `spacy-elmo.Elmo.v1` holding a copy of the elmo pipe's model config."""
    from .listener import LISTENER_ARCHITECTURE, STANDALONE_ARCHITECTURE

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if node.get("@architectures") == LISTENER_ARCHITECTURE:
                return {
                    "@architectures": STANDALONE_ARCHITECTURE,
                    "bilm": copy.deepcopy(dict(bilm_cfg)),
                    "mix": copy.deepcopy(node["mix"]),
                }
            return {key: walk(value) for key, value in node.items()}
        return node

    return walk(copy.deepcopy(dict(listener_owner_cfg)))


@registry.architectures(ARCHITECTURE)
def BiLM_v1(
    path: str = "",
    window_size: int = DEFAULT_WINDOW_SIZE,
    window_context: int = DEFAULT_WINDOW_CONTEXT,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    stateful: bool = False,
    fine_tune: bool = False,
    n_threads: int = 0,
    precision: str = "fp32",
    sha256: Optional[str] = None,
) -> Model[list[Doc], list[Floats3d]]:
    """The biLM layer: docs -> one (L+1, n_tokens, 2P) array of layer outputs per doc.

    path: a native model directory, a bilm-tf/AllenNLP directory (options.json + one .hdf5 [+ vocab.txt]),
        an .hdf5 weight file with options.json beside it, or a shipped model name; "" is the shipped
        default (`spacy_elmo.io.resolve.DEFAULT_MODEL`). Read by `nlp.initialize()` (or the first batch),
        never when saved weights are loaded.
    window_size: the longest sequence the biLM reads at once; docs without sentence boundaries (and
        longer sentences) are cut into overlapping windows of this many tokens.
    window_context: tokens of context each window reads on each side of the part it answers for.
    token_budget: tokens per biLM batch (padded size; sentences are sorted by length first).
    stateful: carry the LSTM state from batch to batch as bilm-tf/AllenNLP do (results then depend on
        what was embedded before; no sorting, no cache). Default: every sentence starts from zero.
    fine_tune: train the biLM's weights with the listening components (default: frozen biLM).
    n_threads: torch threads while the biLM runs (0 = torch's setting); the caller's is restored after.
    precision: the biLM's matrix products, on CPU and GPU alike: "fp32" (default), "bf16", "int8" (CPU
        only, inference only: dynamic quantization, weights quantized once when loaded, never saved so)
        or "fp16" (GPU). Outputs are float32 whatever the precision; `spacy_elmo.bilm.precision` says
        how each is computed, benchmarks/RESULTS.md what each costs.
    sha256: pin the weights: loading refuses a model whose digest (as `spacy elmo verify` prints it: a
        native model's recorded digest, or the SHA-256 of a bilm-tf .hdf5 file) is not this one.
    """
    parse_pin(sha256, SHA256_OPTION)
    check_window(window_size, window_context)
    check_precision(precision, f"{ARCHITECTURE} precision")
    if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 0:
        raise ValueError(
            f"{ARCHITECTURE}: n_threads must be an integer >= 0 (0 = torch's own setting), got {n_threads!r}"
        )
    if isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1:
        raise ValueError(f"{ARCHITECTURE}: token_budget must be an integer >= 1, got {token_budget!r}")
    if fine_tune and precision == "int8":
        raise ValueError(
            f"{ARCHITECTURE}: fine_tune = true needs gradients, and precision 'int8' has none; fine-tune with "
            "precision 'fp32' or 'bf16', or keep the biLM frozen (fine_tune = false) to use int8"
        )
    settings = BiLMLayerSettings(window_size, window_context, fine_tune)
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
        attrs={
            # not serializable by thinc, so never saved: the config owns the settings
            "settings": settings,
            "replace_listener": replace_listener,
            "replace_listener_cfg": replace_listener_cfg,
        },
    )


def bilm_parameters(model: Model) -> dict[str, numpy.ndarray]:
    """A numpy copy of every biLM weight (for tests and checks: did training change them?)."""
    bilm = ensure_bilm(model)
    return {name: p.detach().cpu().numpy().copy() for name, p in bilm.named_parameters()}
