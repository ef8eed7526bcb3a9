"""The biLM layer's torch runtime: `BiLMRunner` in thinc's PyTorch shim (CPU or GPU, trainable), saved in
the native msgpack format (no pickle)."""

import functools
from typing import Callable, Optional, cast

import numpy
import torch
from thinc.api import ArgsKwargs, Ops, PyTorchShim, get_torch_default_device, torch2xp, xp2torch
from thinc.types import Floats4d

from ..bilm.bilm import BiLM
from ..bilm.precision import check_precision
from ..bilm.runner import BiLMRunner
from ..io.native import bilm_from_bytes, bilm_to_bytes
from ..io.resolve import load_model
from .bilm_names import ARCHITECTURE, PATH_OPTION, SAVED_REMEDY, SHA256_OPTION, saved_weights_source


def prepare_for_pipe(bilm: BiLM) -> BiLM:
    """A biLM as the layer holds it: no language-model softmax (a pipe never uses it, and it can be most of the
    weights), trainable (fine-tuning), on thinc's current device."""
    if bilm.softmax is not None or bilm.options.n_tokens_vocab:
        bilm.softmax = None
        options = bilm.options.model_copy(update={"n_tokens_vocab": 0})
        for module in (bilm, bilm.token_encoder, bilm.lstm):
            module.options = options
    bilm.vocab = None
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


class TorchRuntimeShim(PyTorchShim):
    """thinc's PyTorch shim around the `BiLMRunner`, with the one hook the layer calls."""

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


def build_torch_shim(
    path: str, sha256: Optional[str], token_budget: int, stateful: bool, fine_tune: bool, n_threads: int, precision: str
) -> TorchRuntimeShim:
    """The runtime `spacy-elmo.BiLM.v1` builds for `runtime = "torch"` (its other arguments checked there)."""
    check_precision(precision, f"{ARCHITECTURE} precision")
    if fine_tune and precision == "int8":
        raise ValueError(
            f"{ARCHITECTURE}: fine_tune = true needs gradients, and precision 'int8' has none; fine-tune with "
            "precision 'fp32' or 'bf16', or keep the biLM frozen (fine_tune = false) to use int8"
        )
    runner = BiLMRunner(
        load=functools.partial(load_for_pipe, path, sha256),
        precision=precision,
        token_budget=token_budget,
        stateful=stateful,
        n_threads=n_threads,
    )
    return TorchRuntimeShim(runner, serialize_model=serialize_runner, deserialize_model=deserialize_runner)
