"""The biLM layer's part of the "torch" runtime: its `BiLMRunner` in thinc's PyTorch shim (CPU or GPU,
trainable), saved in the native msgpack format (no pickle)."""

from typing import Callable, Optional, cast

import numpy
import torch
from thinc.api import ArgsKwargs, Ops, PyTorchShim, torch2xp, xp2torch
from thinc.types import Floats4d

from ..bilm.batching import SentenceRunner
from ..bilm.runner import BiLMRunner
from ..errors import reading
from ..io.native import bilm_from_bytes, bilm_to_bytes
from ..runtimes.torch import prepare
from .bilm_names import SAVED_REMEDY, saved_weights_source


def serialize_runner(runner: BiLMRunner) -> bytes:
    """The shim's serializer: the native msgpack format (the biLM is loaded first if need be)."""
    return bilm_to_bytes(runner.load())


def deserialize_runner(runner: BiLMRunner, data: bytes, device: torch.device) -> BiLMRunner:
    """The shim's deserializer; errors name the file the weights come from where it is known."""
    with reading(saved_weights_source(), SAVED_REMEDY):
        bilm = bilm_from_bytes(data)
    runner.set_bilm(prepare(bilm), device)
    return runner


class TorchRuntimeShim(PyTorchShim):
    """thinc's PyTorch shim around the `BiLMRunner`, with the one hook the layer calls."""

    def __init__(self, runner: SentenceRunner) -> None:
        super().__init__(runner, serialize_model=serialize_runner, deserialize_model=deserialize_runner)

    def run_batches(
        self, ids: list[numpy.ndarray], is_train: bool, ops: Ops
    ) -> tuple[list[Floats4d], Optional[Callable[[list[Floats4d]], None]]]:
        """Character ids of each batch -> its (L+1, rows, T, 2P) layers (and the backprop with `is_train`)."""
        inputs = ArgsKwargs(args=([torch.from_numpy(batch) for batch in ids],), kwargs={})
        if is_train:
            outputs, shim_backprop = self.begin_update(inputs)
        else:
            outputs = self.predict(inputs) if ids else []
        arrays = [cast(Floats4d, torch2xp(t, ops=ops)) for t in outputs]
        if not is_train:
            return arrays, None

        def backprop(grads: list[Floats4d]) -> None:
            grad_tensors = [xp2torch(g, device=t.device) for g, t in zip(grads, outputs)]
            if outputs:
                shim_backprop(ArgsKwargs(args=(outputs,), kwargs={"grad_tensors": grad_tensors}))

        return arrays, backprop
