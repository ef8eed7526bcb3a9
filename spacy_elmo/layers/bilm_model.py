"""The biLM as a thinc layer: docs in, one (n_layers, n_tokens, 2P) array of layer outputs per doc out.

One forward and init for every runtime (`spacy_elmo.runtimes`): its runner in a thinc shim (`torch_bilm.py`
for a trainable one, else `onnx_bilm.py`), imported only when chosen, so that this module imports no torch.
Weights are loaded by `init`, by the first batch, or by `from_bytes` when a saved pipeline is loaded (then
`path` is never read).
"""

import copy
import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, cast

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, Ops, Shim
from thinc.types import Floats3d, Floats4d

from ..bilm.batching import (
    DEFAULT_WINDOW_CONTEXT,
    DEFAULT_WINDOW_SIZE,
    check_window,
    token_budget_batches,
    token_slice,
)
from ..errors import named_settings
from ..io.digest import parse_pin
from ..io.onnx_graph import names_onnx_graph
from ..runtimes import RUNTIMES, RunSettings
from .bilm_names import ARCHITECTURE, BILM_LAYER_NAME, PATH_OPTION, SHA256_OPTION
from .bilm_names import saved_weights_at as saved_weights_at  # the pipe's from_disk
from .segments import segment_docs

TORCH_MISSING = (
    f'{ARCHITECTURE}: this pipeline runs its biLM with runtime "torch", and torch is not installed: install '
    'torch, or serve it without torch with runtime "onnxruntime": where torch is installed, load it with '
    'spacy.load(PATH, config={"components": {"elmo": {"model": {"runtime": "onnxruntime"}}}}) and save it '
    "with nlp.to_disk (the README's recipe)"
)
LAYER_NAMES = {  # the settings as a config calls them
    **{
        s: f"{ARCHITECTURE} {s}" for s in ("runtime", "precision", "n_threads", "token_budget", "stateful", "fine_tune")
    },
    "path": PATH_OPTION,
    "sha256": SHA256_OPTION,
    "alignment": f"{ARCHITECTURE} alignment",
}


@dataclass(frozen=True)
class BiLMLayerSettings:
    """The layer's own settings of `spacy-elmo.BiLM.v1`; the rest are the runner's."""

    window_size: int
    window_context: int
    fine_tune: bool
    runtime: str = "torch"
    path: str = ""  # the model's, where alignment "auto" looks
    alignment: Optional[str] = None


class Runtime(Protocol):
    """What the layer asks of its shim: run the batches' ids; the backprop is None where nothing trains."""

    def run_batches(
        self, ids: list[numpy.ndarray], is_train: bool, ops: Ops
    ) -> tuple[list[Floats4d], Optional[Callable[[list[Floats4d]], None]]]: ...


def runner_of(model: Model) -> Any:
    """The runtime's runner: a `BiLMRunner` (torch) or an `OnnxRunner` (onnxruntime)."""
    return model.shims[0]._model


def load_named(runtime: str, path: str, sha256: Optional[str]) -> Any:
    """The layer's loader (module-level, so that it pickles): errors name the config's settings."""
    with named_settings(**LAYER_NAMES):
        return RUNTIMES[runtime].load(path, sha256)


def ensure_loaded(model: Model, X: Any = None, Y: Any = None) -> Any:
    """The biLM or graph, loaded if need be, with the layer's dims made to match it; also the layer's init,
    so that a bad path or a mismatched weight file fails at `nlp.initialize()`."""
    loaded = runner_of(model).load()
    for dim, value in (("nO", loaded.options.output_dim), ("nL", loaded.options.n_output_layers)):
        if model.has_dim(dim) and model.get_dim(dim) != value:
            raise ValueError(
                f"{model.name}: the biLM has {dim}={value} but the layer was saved with "
                f"{dim}={model.get_dim(dim)}; the weights do not belong to this pipeline"
            )
        if not model.has_dim(dim):
            model.set_dim(dim, value)
    settings: BiLMLayerSettings = model.attrs["settings"]
    if settings.alignment and model.attrs.get("alignment") is None:  # a saved pipeline has its matrix already
        from ..io.alignment import load_alignment

        with named_settings(path=LAYER_NAMES["alignment"], alignment=LAYER_NAMES["alignment"]):  # about its file
            model.attrs["alignment"], _ = load_alignment(settings.alignment, settings.path, model.get_dim("nO"))
    return loaded


def ensure_bilm(model: Model, what: str = "the biLM") -> Any:
    """The PyTorch biLM, loaded if need be (runtime "torch" only; `what` names the caller's need)."""
    runtime = model.attrs["settings"].runtime
    if not RUNTIMES[runtime].trainable:
        raise ValueError(
            f"{what} needs the PyTorch biLM, and this pipe runs with runtime {runtime!r} (an exported graph, "
            f'no torch module): build the pipe with {ARCHITECTURE} runtime = "torch"'
        )
    return ensure_loaded(model)


def bilm_parameters(model: Model) -> dict[str, numpy.ndarray]:
    """A numpy copy of every biLM weight (for tests and checks: did training change them?)."""
    bilm = ensure_bilm(model, "bilm_parameters")
    return {name: p.detach().cpu().numpy().copy() for name, p in bilm.named_parameters()}


def forward(model: Model, docs: list[Doc], is_train: bool) -> tuple[list[Floats3d], Callable]:
    runner = runner_of(model)
    loaded = ensure_loaded(model)
    settings: BiLMLayerSettings = model.attrs["settings"]
    segments = segment_docs(docs, settings.window_size, settings.window_context)
    # stateful: text order, no row limit (row i continues row i); stateless: length-sorted
    max_rows = None if runner.stateful else runner.max_batch_size
    lengths = [len(s.positions) + 2 for s in segments]
    batches = token_budget_batches(lengths, runner.token_budget, max_rows, sort=not runner.stateful)
    ids = [
        loaded.batch_to_ids([[docs[segments[i].doc][int(p)].text for p in segments[i].positions] for i in batch])
        for batch in batches
    ]
    runtime = cast(Runtime, model.shims[0])
    arrays, backprop_batches = runtime.run_batches(ids, is_train and settings.fine_tune, model.ops)
    n_layers, width, xp = model.get_dim("nL"), model.get_dim("nO"), model.ops.xp
    outputs = [model.ops.alloc3f(n_layers, len(doc), width) for doc in docs]
    placed = []  # where each segment's rows go, for backprop too
    for b, batch in enumerate(batches):
        for row, index in enumerate(batch):
            seg = segments[index]
            keep = xp.asarray(seg.positions[seg.keep_start : seg.keep_end])
            columns = token_slice(seg.keep_start, seg.keep_end)  # counted after <S>, as the runners return them
            outputs[seg.doc][:, keep] = arrays[b][:, row, columns]
            placed.append((seg.doc, keep, b, row, columns))
    matrix = model.attrs.get("alignment")  # x -> x @ M.T, every layer alike (io.alignment)
    if matrix is not None:
        matrix = model.ops.asarray2f(matrix)
        outputs = [model.ops.xp.matmul(output, matrix.T) for output in outputs]

    def backprop(d_outputs: list[Floats3d]) -> list[Doc]:
        if backprop_batches is not None:
            if matrix is not None:
                d_outputs = [model.ops.xp.matmul(d, matrix) for d in d_outputs]
            grads = [xp.zeros_like(a) for a in arrays]
            for doc_index, keep, b, row, columns in placed:
                grads[b][:, row, columns] = d_outputs[doc_index][:, keep]
            backprop_batches(grads)
        return []

    return outputs, backprop


def replace_listener(model: Model, listener: Model, pipe: Any) -> Model:
    """`nlp.replace_listeners`: a listener is replaced by a copy of this layer (same outputs)."""
    return model


def replace_listener_cfg(bilm_cfg: dict[str, Any], listener_owner_cfg: dict[str, Any]) -> dict[str, Any]:
    """`nlp.replace_listeners`: every `ElmoListener` in the config becomes a `spacy-elmo.Elmo.v1`."""
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
    token_budget: int = 0,
    stateful: bool = False,
    fine_tune: bool = False,
    n_threads: int = 0,
    precision: str = "fp32",
    sha256: Optional[str] = None,
    runtime: str = "torch",
    alignment: Optional[str] = None,
) -> Model[list[Doc], list[Floats3d]]:
    """The biLM layer: docs -> one (L+1, n_tokens, 2P) array of layer outputs per doc.

    path: any model `spacy_elmo.io.resolve` reads (native, bilm-tf/AllenNLP, .hdf5 with options.json beside
        it, NLPL/ELMoForManyLangs, a shipped name; "" the shipped default), or with runtime "onnxruntime" an
        .onnx graph from `spacy elmo export` (read without torch; any other model is exported at initialize,
        which needs torch and the `[onnx]` extra). Read by `nlp.initialize()` or the first batch, never when
        saved weights are loaded.
    window_size, window_context: docs without sentence boundaries, and longer sentences, are cut into
        overlapping windows of window_size tokens, each reading window_context more on each side.
    token_budget: padded tokens per biLM batch (length-sorted); 0: the device's, 4,096 on CPU, 32,768 on GPU.
    stateful: carry the LSTM state between batches as bilm-tf/AllenNLP do (results then depend on what came
        before; no sorting, no cache). Default: every sentence starts from zero.
    fine_tune: train the biLM with the listening components (default: frozen).
    n_threads: threads while the biLM runs (0: the runtime's own setting, at most the CPUs this process may
        use); torch's setting is restored after each batch, ONNX Runtime's is its session's.
    precision: the matrix products: "fp32" (default), "bf16", "int8" (CPU inference only: weights quantized
        once when loaded, never saved so) or "fp16" (GPU); outputs are float32 whatever it is (see
        `spacy_elmo.bilm.precision`, costs in benchmarks/RESULTS.md). The onnxruntime runtime is fp32.
    sha256: refuse a model whose digest is not this one (what `spacy elmo verify` prints, over options,
        weights and vocabularies; for an .onnx file, the file's SHA-256).
    runtime: "torch" (default) or "onnxruntime": the exported graph on the CPU without torch (fp32,
        stateless and frozen; `spacy_elmo.runtimes.onnx`).
    alignment: an aligned multilingual model's matrix (Schuster et al. 2019; the catalog's
        allennlp/multilingual-*), its path or "auto" (the one beside the model): every layer's x becomes
        x @ M.T, as AllenNLP aligns its mix, so languages share one space; read at initialize, saved with
        the pipeline. Default: none.
    """
    with named_settings(**LAYER_NAMES):
        parse_pin(sha256)
    check_window(window_size, window_context)
    if runtime == "torch" and names_onnx_graph(path):
        raise ValueError(
            f'{PATH_OPTION} = {path!r} is an ONNX graph, which runtime "torch" (the default) cannot load: set '
            '[components.elmo.model] runtime = "onnxruntime" (with add_pipe: config={"model": {"runtime": '
            '"onnxruntime", ...}})'
        )
    shim: Shim
    try:
        with named_settings(**LAYER_NAMES):
            run = RunSettings(runtime, None, precision, n_threads, token_budget, stateful, fine_tune)
        chosen = RUNTIMES[runtime]
        runner = chosen.runner(run, load=functools.partial(load_named, runtime, path, sha256))
        if chosen.trainable:
            from .torch_bilm import TorchRuntimeShim

            shim = TorchRuntimeShim(runner)
        else:
            from .onnx_bilm import OnnxRuntimeShim

            shim = OnnxRuntimeShim(runner)
    except ModuleNotFoundError as err:
        if err.name != "torch" and not (err.name or "").startswith("torch."):
            raise
        raise ModuleNotFoundError(TORCH_MISSING, name=err.name) from None
    attrs = {
        "settings": BiLMLayerSettings(window_size, window_context, fine_tune, runtime, path, alignment),
        "alignment": None,  # the matrix, read at initialize and saved with the pipeline
        "replace_listener": replace_listener,
        "replace_listener_cfg": replace_listener_cfg,
    }
    return Model(BILM_LAYER_NAME, forward, init=ensure_loaded, dims={"nO": None, "nL": None}, shims=[shim], attrs=attrs)
