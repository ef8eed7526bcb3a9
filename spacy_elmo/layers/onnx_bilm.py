"""The biLM layer's onnxruntime runtime: an exported graph served by ONNX Runtime on the CPU, with no torch.

The shim saves the graph as the layer's weights, so a saved pipeline loads where only spaCy, this package
and onnxruntime are installed. A graph is fp32, stateless and frozen (`build_onnx_shim`).
"""

import functools
from typing import Any, Callable, Optional, cast

import numpy
import srsly
from thinc.api import Ops
from thinc.shims import Shim
from thinc.types import Floats4d

from ..onnx.runtime import OnnxRunner, load_graph
from .bilm_names import ARCHITECTURE, PATH_OPTION, SAVED_REMEDY, SHA256_OPTION, saved_weights_source


def graph_from_weights(data: bytes, source: str) -> bytes:
    """Saved weights as a graph: a graph as it is, a torch-runtime pipeline's weights exported."""
    if data.startswith(b"\x08"):  # an ONNX ModelProto starts with its ir_version field
        return data
    try:
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
    return export_bytes(bilm_from_bytes(native, source=source, remedy=SAVED_REMEDY))


class OnnxRuntimeShim(Shim):
    """Runs the `OnnxRunner` for the layer, and saves and loads its graph as the layer's weights."""

    _model: OnnxRunner

    def run_batches(
        self, ids: list[numpy.ndarray], is_train: bool, ops: Ops
    ) -> tuple[list[Floats4d], Optional[Callable[[list[Floats4d]], None]]]:
        """Character ids of each batch -> its (L+1, rows, T, 2P) layers; a frozen graph: no backprop."""
        return [ops.asarray4f(cast(Floats4d, self._model.run(batch))) for batch in ids], None

    def to_bytes(self) -> bytes:
        return self._model.graph

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
        """A frozen graph: nothing to update."""


def build_onnx_shim(
    path: str, sha256: Optional[str], token_budget: int, stateful: bool, fine_tune: bool, n_threads: int, precision: str
) -> OnnxRuntimeShim:
    """The runtime `spacy-elmo.BiLM.v1` builds for `runtime = "onnxruntime"`; it refuses, naming the option, what
    an exported graph cannot do (the other arguments are checked there)."""
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
    load = functools.partial(load_graph, path, sha256, PATH_OPTION, SHA256_OPTION)  # module-level: it pickles
    return OnnxRuntimeShim(OnnxRunner(load=load, n_threads=n_threads, token_budget=token_budget))
