"""The biLM layer's part of the "onnxruntime" runtime: an exported graph served on the CPU, with no torch.

The shim saves the graph as the layer's weights, so a saved pipeline loads where only spaCy, this package
and onnxruntime are installed. A graph is fp32, stateless and frozen (`runtimes.onnx`).
"""

from typing import Any, Callable, Optional, cast

import numpy
import srsly
from thinc.api import Ops
from thinc.shims import Shim
from thinc.types import Floats4d

from ..errors import reading
from ..onnx.runtime import OnnxRunner
from .bilm_names import ARCHITECTURE, SAVED_REMEDY, saved_weights_source


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
    with reading(source, SAVED_REMEDY):
        bilm = bilm_from_bytes(native)
    return export_bytes(bilm)


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
