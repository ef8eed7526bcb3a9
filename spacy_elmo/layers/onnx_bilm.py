"""The biLM layer's onnxruntime runtime: an exported graph served by ONNX Runtime, with no torch.

What the pipe needs from the layer, without PyTorch: the graph (`spacy_elmo.onnx.runtime.OnnxBiLM`)
sits in a small thinc shim that saves its bytes as the layer's weights, so a pipeline saved with
`runtime = "onnxruntime"` carries its graph and loads where only spaCy, this package and onnxruntime are
installed. The graph comes from the configured `path` when the pipe is initialized: an `.onnx` file from
`spacy elmo export` is read as it is (no torch); any other model is exported then (torch and the
`[onnx]` extra needed at that moment only). A pipeline saved with the torch runtime can be loaded with
this one (its weights are exported as they load, which needs torch), then saved for serving:

    nlp = spacy.load("trained", config={"components": {"elmo": {"model": {"runtime": "onnxruntime"}}}})
    nlp.to_disk("serving")   # loads in a torch-free virtualenv

What it does not do, and why: fine-tuning (a graph has no gradients), stateful mode (the graph starts
every sentence from zero, which is what makes it batch-independent) and precisions other than fp32
(ONNX Runtime's int8 is measured in benchmarks/RESULTS.md, not served); the GPU (this runtime is for
CPU serving; the torch runtime runs on GPUs). Each is refused with a sentence when the layer is built.
"""

import functools
import hashlib
from pathlib import Path
from typing import Any, Callable, Optional, cast

from spacy.tokens import Doc
from thinc.api import Model
from thinc.shims import Shim
from thinc.types import Floats3d, Floats4d

from ..bilm.batching import token_budget_batches
from ..io.digest import check_pin
from ..onnx.metadata import EXPORT_AGAIN, names_onnx_graph
from ..onnx.runtime import OnnxBiLM
from .bilm_model import (
    ARCHITECTURE,
    BILM_LAYER_NAME,
    PATH_OPTION,
    SAVED_REMEDY,
    SHA256_OPTION,
    ensure_options,
    gather_outputs,
    saved_weights_source,
)
from .segments import segment_docs


def check_onnx_settings(stateful: bool, fine_tune: bool, precision: str) -> None:
    """Refuse, naming the option, what an exported graph cannot do (see the module docstring)."""
    where = f'{ARCHITECTURE} runtime = "onnxruntime"'
    if fine_tune:
        raise ValueError(f"{where}: fine_tune = true needs gradients, which a graph has none of; use runtime 'torch'")
    if stateful:
        raise ValueError(
            f"{where}: stateful = true carries LSTM state between batches, and the exported graph starts every "
            "sentence from zero; use runtime 'torch' for stateful embedding"
        )
    if precision != "fp32":
        raise ValueError(
            f"{where}: precision {precision!r}: the exported graph runs in fp32; use precision 'fp32', or "
            "runtime 'torch' for bf16/int8/fp16"
        )


def graph_from_model(path: str, sha256: Optional[str]) -> tuple[bytes, str]:
    """(graph bytes, source) for the configured path: an .onnx file as it is, any other model exported."""
    if names_onnx_graph(path):
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"{PATH_OPTION}: no such ONNX file: {path}")
        graph = file.read_bytes()
        check_pin(hashlib.sha256(graph).hexdigest(), sha256, path, SHA256_OPTION)
        return graph, path
    try:
        from ..io.resolve import load_model
        from ..onnx.export import export_bytes
    except ImportError as err:
        raise ImportError(
            f"{PATH_OPTION} = {path!r} is not an .onnx file, so the pipe exports it when initialized, which needs "
            f"torch and the [onnx] extra ({err}); or export it beforehand with `python -m spacy_elmo export` "
            "and give the .onnx file"
        ) from None
    loaded = load_model(path, option=PATH_OPTION, sha256=sha256, sha256_option=SHA256_OPTION)
    return export_bytes(loaded.bilm, source_sha256=loaded.sha256), str(loaded.source.path)


def graph_from_weights(data: bytes, source: str) -> bytes:
    """Saved weights (`source` names them) as a graph: a graph as it is; a torch-runtime pipeline's weights
    (thinc's PyTorch shim message around the native msgpack model) exported."""
    if data.startswith(b"\x08"):  # an ONNX ModelProto starts with its ir_version field
        return data
    try:
        import srsly

        native = srsly.msgpack_loads(data)["state"]
    except Exception:  # msgpack raises several unrelated types on corrupt input
        raise ValueError(
            f"{source}: neither an ONNX graph nor the weights of a torch-runtime pipeline (a damaged file?): "
            + SAVED_REMEDY
        ) from None
    try:
        from ..io.native import bilm_from_bytes
        from ..onnx.export import export_bytes
    except ImportError as err:
        raise ImportError(
            "these pipeline weights were saved with runtime 'torch'; loading them with runtime 'onnxruntime' "
            f"exports them first, which needs torch and the [onnx] extra ({err}). Save the pipeline for "
            "serving where torch is installed (load it with runtime 'onnxruntime', then nlp.to_disk)"
        ) from None
    bilm = bilm_from_bytes(native, source=source, remedy=SAVED_REMEDY)
    return export_bytes(bilm)


class OnnxRunner:
    """The layer's runner: the `OnnxBiLM`, made from the configured path on first use."""

    stateful = False

    def __init__(self, load: Callable[[], tuple[bytes, str]], n_threads: int, token_budget: int) -> None:
        self._load = load
        self.n_threads = n_threads
        self.token_budget = token_budget
        self.bilm: Optional[OnnxBiLM] = None

    @property
    def loaded(self) -> bool:
        return self.bilm is not None

    def load(self) -> OnnxBiLM:
        if self.bilm is None:
            self.set_graph(*self._load())
        assert self.bilm is not None
        return self.bilm

    def set_graph(self, graph: bytes, source: str, remedy: str = EXPORT_AGAIN) -> None:
        """remedy: what errors about a damaged graph advise (a saved pipeline's: `SAVED_REMEDY`)."""
        self.bilm = OnnxBiLM(
            graph, source=source, n_threads=self.n_threads, token_budget=self.token_budget, remedy=remedy
        )

    def reset_state(self) -> None:
        """Nothing is carried between batches."""


class OnnxRuntimeShim(Shim):
    """Saves and loads the graph as the layer's weights; the layer calls the runner directly."""

    _model: OnnxRunner

    def to_bytes(self) -> bytes:
        return self._model.load().graph

    def from_bytes(self, data: bytes) -> "OnnxRuntimeShim":
        source = saved_weights_source()
        self._model.set_graph(graph_from_weights(data, source), source, SAVED_REMEDY)
        return self

    def to_device(self, device_type: str, device_id: int) -> None:
        if device_type != "cpu":
            raise ValueError(
                f"{ARCHITECTURE} runtime 'onnxruntime' runs on the CPU; on a GPU use runtime 'torch' (or keep the "
                "elmo pipe on the CPU)"
            )

    def finish_update(self, optimizer: Any) -> None:
        """A frozen graph: nothing to update (the listeners' mixes are updated by their own layers)."""


def forward(model: Model, docs: list[Doc], is_train: bool) -> tuple[list[Floats3d], Callable]:
    ensure_options(model)
    settings = model.attrs["settings"]
    bilm: OnnxBiLM = model.shims[0]._model.load()
    segments = segment_docs(docs, settings.window_size, settings.window_context)
    batches = token_budget_batches([s.words + 2 for s in segments], bilm.token_budget, bilm.max_batch_size)
    arrays = []
    for batch in batches:
        words = [[docs[segments[i].doc][int(p)].text for p in segments[i].positions] for i in batch]
        layers = cast(Floats4d, bilm.run(bilm.batch_to_ids(words)))
        arrays.append(model.ops.asarray4f(layers))
    outputs = gather_outputs(model, docs, segments, batches, arrays)

    def backprop(d_outputs: list[Floats3d]) -> list[Doc]:
        return []

    return outputs, backprop


def init(model: Model, X: Optional[list[Doc]] = None, Y: Any = None) -> None:
    """Read (or export) the configured graph, unless saved weights were loaded, and take its dims."""
    ensure_options(model)


def build_onnx_layer(
    path: str, sha256: Optional[str], token_budget: int, n_threads: int, attrs: dict[str, Any]
) -> Model[list[Doc], list[Floats3d]]:
    """The layer `spacy-elmo.BiLM.v1` builds for `runtime = "onnxruntime"` (arguments checked there)."""
    load = functools.partial(graph_from_model, path, sha256)  # a module-level function: the runner pickles
    runner = OnnxRunner(load, n_threads=n_threads, token_budget=token_budget)
    return Model(
        BILM_LAYER_NAME,
        forward,
        init=init,
        dims={"nO": None, "nL": None},
        shims=[OnnxRuntimeShim(runner)],
        attrs=attrs,
    )
