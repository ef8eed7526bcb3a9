"""The biLM as a thinc layer: docs in, one (n_layers, n_tokens, 2P) array of layer outputs per doc out.

`spacy-elmo.BiLM.v1` is registered here, and this module imports no torch: a pipeline saved with
`runtime = "onnxruntime"` loads and runs where torch is not installed. The runtime decides which layer
the architecture builds, each in its own module and imported only when chosen:
- "torch" (`torch_bilm.py`, the default): PyTorch on CPU or GPU, every precision, stateful mode,
  fine-tuning; the weights saved in the native msgpack format;
- "onnxruntime" (`onnx_bilm.py`): the biLM exported as one ONNX graph (`spacy elmo export`) and run by
  ONNX Runtime on the CPU: fp32, stateless, frozen; the graph is what the pipeline saves.
Both cut docs into sentences or windows (`segments.py`), batch them with the one batcher and place the
outputs back on the docs' tokens (`placements`), so they give the same layers to within float error.

Weights are loaded by the layer's `init` (`nlp.initialize()`), or by `from_bytes`/`from_disk` when a
saved pipeline is loaded (then the configured path is never read: it may not exist where the pipeline
is deployed). A pipe added with `nlp.add_pipe("elmo")` and used at once, with no `nlp.initialize()`,
loads on its first batch, before any doc is processed; a bad path fails there, naming it. Saved weights
that do not load are named by the file they were read from where spaCy's `from_disk` knows it (thinc's
`from_bytes`, which the shims see, does not: `saved_weights_at`), and the advice is the saved pipeline's
(save it again, or train it again), not the model's.

The settings are arguments of `spacy-elmo.BiLM.v1` and nothing else: the runner holds how the biLM
runs, and a frozen `BiLMLayerSettings` in the attrs (which thinc cannot serialize, so never saves) the
windows, fine-tuning and runtime; the shim saves only weights. The config a pipeline is loaded with
decides them, never a saved copy.
"""

import contextlib
import contextvars
import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats3d

from ..bilm.batching import (
    DEFAULT_TOKEN_BUDGET,
    DEFAULT_WINDOW_CONTEXT,
    DEFAULT_WINDOW_SIZE,
    check_window,
    token_slice,
)
from ..bilm.options import BiLMOptions
from ..io.digest import parse_pin
from ..onnx.metadata import names_onnx_graph
from .segments import Segment

BILM_LAYER_NAME = "elmo-bilm"
ARCHITECTURE = "spacy-elmo.BiLM.v1"
PATH_OPTION = f"{ARCHITECTURE} model.path"
SHA256_OPTION = f"{ARCHITECTURE} model.sha256"
RUNTIMES = ("torch", "onnxruntime")
TORCH_MISSING = (
    f'{ARCHITECTURE}: this pipeline runs its biLM with runtime "torch", and torch is not installed: install '
    'torch, or serve it without torch with runtime "onnxruntime": where torch is installed, load it with '
    'spacy.load(PATH, config={"components": {"elmo": {"model": {"runtime": "onnxruntime"}}}}) and save it '
    "with nlp.to_disk (the README's recipe)"
)
SAVED_WEIGHTS = "spacy-elmo pipeline weights"
SAVED_REMEDY = "save the pipeline again (nlp.to_disk) from a copy that loads, or train it again"
_saved_weights = contextvars.ContextVar("spacy_elmo_saved_weights", default=SAVED_WEIGHTS)


@contextlib.contextmanager
def saved_weights_at(path: str) -> Iterator[None]:
    """While saved weights are loaded from `path` (the pipe's `from_disk`), errors about them name it."""
    token = _saved_weights.set(path)
    try:
        yield
    finally:
        _saved_weights.reset(token)


def saved_weights_source() -> str:
    """How errors name the saved weights being loaded: their file, or `SAVED_WEIGHTS` where it is unknown."""
    return _saved_weights.get()


@dataclass(frozen=True)
class BiLMLayerSettings:
    """The layer's own part of what `spacy-elmo.BiLM.v1` was built with (see its docstring for each); the
    weights path is the runner's loader's, and how the biLM runs (token budget, state, threads, precision)
    the runner's settings."""

    window_size: int
    window_context: int
    fine_tune: bool
    runtime: str = "torch"


def layer_settings(model: Model) -> BiLMLayerSettings:
    return model.attrs["settings"]


# --- what the pipe asks of either runtime ----------------------------------------------------------


def runner_of(model: Model) -> Any:
    """The runtime's runner: a `BiLMRunner` (torch) or an `OnnxRunner` (onnxruntime). Both offer `load()`
    (the biLM, with its `options`), `loaded`, `stateful` and `reset_state()`."""
    return model.shims[0]._model


def ensure_options(model: Model) -> BiLMOptions:
    """Load the biLM if nothing has been loaded yet, make the layer's dims match it, return its options."""
    options = runner_of(model).load().options
    set_dims_from_options(model, options)
    return options


def set_dims_from_options(model: Model, options: BiLMOptions) -> None:
    for dim, value in (("nO", options.output_dim), ("nL", options.n_output_layers)):
        if model.has_dim(dim) and model.get_dim(dim) != value:
            raise ValueError(
                f"{model.name}: the biLM has {dim}={value} but the layer was saved with "
                f"{dim}={model.get_dim(dim)}; the weights do not belong to this pipeline"
            )
        if not model.has_dim(dim):
            model.set_dim(dim, value)


def placements(segments: Sequence[Segment], batches: Sequence[Sequence[int]], xp: Any) -> Iterator[tuple]:
    """Where each segment's answer sits: (doc index, token positions in the doc, batch, row, columns of
    the row), the columns counted as the runners return them (after `<S>`)."""
    for b, batch in enumerate(batches):
        for row, index in enumerate(batch):
            seg = segments[index]
            keep = seg.positions[seg.keep_start : seg.keep_end]
            columns = token_slice(seg.keep_start, seg.keep_end)
            yield seg.doc, (keep if xp is numpy else xp.asarray(keep)), b, row, columns


def gather_outputs(
    model: Model, docs: Sequence[Doc], segments: Sequence[Segment], batches: Sequence[Sequence[int]], arrays: list
) -> list[Floats3d]:
    """One (L+1, n_tokens, 2P) array per doc from the runner's (L+1, rows, T, 2P) batch outputs."""
    n_layers, width = model.get_dim("nL"), model.get_dim("nO")
    outputs = [model.ops.alloc3f(n_layers, len(doc), width) for doc in docs]
    for doc_index, keep, b, row, columns in placements(segments, batches, model.ops.xp):
        outputs[doc_index][:, keep] = arrays[b][:, row, columns]
    return outputs


# --- the torch runtime's own (the PyTorch biLM itself) ----------------------------------------------


def _torch_layer(model: Model, what: str) -> Any:
    runtime = layer_settings(model).runtime
    if runtime != "torch":
        raise ValueError(
            f"{what} needs the PyTorch biLM, and this pipe runs with runtime {runtime!r} (an exported graph, "
            f'no torch module): build the pipe with {ARCHITECTURE} runtime = "torch"'
        )
    from . import torch_bilm

    return torch_bilm


def get_runner(model: Model) -> Any:
    """The torch runtime's `BiLMRunner`."""
    return _torch_layer(model, "get_runner").get_runner(model)


def ensure_bilm(model: Model) -> Any:
    """The PyTorch biLM (torch runtime), loaded if need be."""
    return _torch_layer(model, "the biLM").ensure_bilm(model)


def set_bilm(model: Model, bilm: Any) -> None:
    """Give the layer a biLM (instead of loading the configured path)."""
    _torch_layer(model, "set_bilm").set_bilm(model, bilm)


def bilm_parameters(model: Model) -> dict[str, Any]:
    """A numpy copy of every biLM weight (for tests and checks: did training change them?)."""
    return _torch_layer(model, "bilm_parameters").bilm_parameters(model)


# --- listeners ---------------------------------------------------------------------------------------


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


# --- the architecture ----------------------------------------------------------------------------------


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
    runtime: str = "torch",
) -> Model[list[Doc], list[Floats3d]]:
    """The biLM layer: docs -> one (L+1, n_tokens, 2P) array of layer outputs per doc.

    path: a native model directory, a bilm-tf/AllenNLP directory (options.json + one .hdf5 [+ vocab.txt]),
        an .hdf5 weight file with options.json beside it, an NLPL/ELMoForManyLangs model, or a shipped
        model name; "" is the shipped default (`spacy_elmo.io.resolve.DEFAULT_MODEL`). With runtime
        "onnxruntime" also an .onnx graph written by `spacy elmo export` (read without torch; any other
        model is exported when the pipe is initialized, which needs torch and the `[onnx]` extra). Read by
        `nlp.initialize()` (or the first batch), never when saved weights are loaded.
    window_size: the longest sequence the biLM reads at once; docs without sentence boundaries (and
        longer sentences) are cut into overlapping windows of this many tokens.
    window_context: tokens of context each window reads on each side of the part it answers for.
    token_budget: tokens per biLM batch (padded size; sentences are sorted by length first).
    stateful: carry the LSTM state from batch to batch as bilm-tf/AllenNLP do (results then depend on
        what was embedded before; no sorting, no cache). Default: every sentence starts from zero.
    fine_tune: train the biLM's weights with the listening components (default: frozen biLM).
    n_threads: threads while the biLM runs (0 = the runtime's own setting); torch's setting is restored
        after each batch, ONNX Runtime's is its session's.
    precision: the biLM's matrix products, on CPU and GPU alike: "fp32" (default), "bf16", "int8" (CPU
        only, inference only: dynamic quantization, weights quantized once when loaded, never saved so)
        or "fp16" (GPU). Outputs are float32 whatever the precision; `spacy_elmo.bilm.precision` says
        how each is computed, benchmarks/RESULTS.md what each costs. The onnxruntime runtime is fp32.
    sha256: pin the model: loading refuses a model whose digest is not this one (the model digest
        `spacy elmo verify` prints, covering every file that makes the model: options, weights and
        vocabularies; for an .onnx file, the file's SHA-256).
    runtime: "torch" (default) or "onnxruntime": serve the exported graph on the CPU, without torch
        (fp32, stateless and frozen only; see `spacy_elmo.layers.onnx_bilm`).
    """
    parse_pin(sha256, SHA256_OPTION)
    check_window(window_size, window_context)
    if runtime not in RUNTIMES:
        raise ValueError(f"{ARCHITECTURE}: runtime must be one of {RUNTIMES}, got {runtime!r}")
    if runtime == "torch" and names_onnx_graph(path):
        raise ValueError(
            f'{PATH_OPTION} = {path!r} is an ONNX graph, which runtime "torch" (the default) cannot load: set '
            '[components.elmo.model] runtime = "onnxruntime" (with add_pipe: config={"model": {"runtime": '
            '"onnxruntime", ...}})'
        )
    if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 0:
        raise ValueError(
            f"{ARCHITECTURE}: n_threads must be an integer >= 0 (0 = the runtime's own setting), got {n_threads!r}"
        )
    if isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1:
        raise ValueError(f"{ARCHITECTURE}: token_budget must be an integer >= 1, got {token_budget!r}")
    settings = BiLMLayerSettings(window_size, window_context, fine_tune, runtime)
    # not serializable by thinc, so never saved: the config owns the settings
    attrs = {"settings": settings, "replace_listener": replace_listener, "replace_listener_cfg": replace_listener_cfg}
    if runtime == "onnxruntime":
        from .onnx_bilm import build_onnx_layer, check_onnx_settings

        check_onnx_settings(stateful=stateful, fine_tune=fine_tune, precision=precision)
        return build_onnx_layer(path, sha256, token_budget, n_threads, attrs)
    try:
        from ..bilm.precision import check_precision
        from .torch_bilm import build_torch_layer
    except ModuleNotFoundError as err:
        if err.name != "torch" and not (err.name or "").startswith("torch."):
            raise
        raise ModuleNotFoundError(TORCH_MISSING, name=err.name) from None

    check_precision(precision, f"{ARCHITECTURE} precision")
    if fine_tune and precision == "int8":
        raise ValueError(
            f"{ARCHITECTURE}: fine_tune = true needs gradients, and precision 'int8' has none; fine-tune with "
            "precision 'fp32' or 'bf16', or keep the biLM frozen (fine_tune = false) to use int8"
        )
    return build_torch_layer(path, sha256, token_budget, stateful, n_threads, precision, attrs)
