"""The biLM as a thinc layer: docs in, one (n_layers, n_tokens, 2P) array of layer outputs per doc out.

The PyTorch biLM sits in a thinc `PyTorchShim`, so it follows thinc's current device (`require_gpu`),
is updated by thinc's optimizer when fine-tuned, and is serialized with the native msgpack format of
`spacy_elmo.bilm.serialize` (custom shim serializers: no pickle, no `torch.load`).

Weights are loaded on first use, not when the layer is built: `spacy.load` builds the layer from the
config and then fills it from the saved pipeline, so the weights path of the config (which may not
exist on the machine the pipeline is deployed to) is read only when no saved weights were given.
"""
import copy
import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy
import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, PyTorchShim, get_torch_default_device, torch2xp, xp2torch
from thinc.types import Floats3d

from .. import chars, loading
from ..bilm.bilm import BiLM
from ..bilm.config import BiLMOptions
from ..bilm.embedder import DEFAULT_TOKEN_BUDGET, length_sorted_batches
from ..bilm.carried_state import CarriedState
from ..bilm.serialize import OPTIONS_FILE, bilm_from_bytes, bilm_to_bytes
from .segments import DEFAULT_WINDOW_CONTEXT, DEFAULT_WINDOW_SIZE, Segment, check_window, segment_docs

BILM_LAYER_NAME = "elmo-bilm"


def describe_source(path: str) -> str:
    return f"the shipped default model '{loading.DEFAULT_MODEL}'" if not path else repr(path)


def resolve_source(path: str) -> Path:
    """The file or directory `path` names; "" is the shipped default model. Raises a clear error."""
    if not path:
        target = Path(loading.SHIPPED_MODELS_DIR) / loading.DEFAULT_MODEL
        if not target.exists():
            raise FileNotFoundError(
                f"the default biLM '{loading.DEFAULT_MODEL}' is not installed (expected a native model "
                f"directory at {target}). Give a model explicitly: add_pipe('elmo', config={{'model': "
                f"{{'@architectures': 'spacy-elmo.BiLM.v1', 'path': '/path/to/model'}}}}) with a native "
                f"model directory, a bilm-tf/AllenNLP directory or an .hdf5 weight file"
            )
        return target
    target = Path(path)
    if not target.exists() and (Path(loading.SHIPPED_MODELS_DIR) / path).exists():
        target = Path(loading.SHIPPED_MODELS_DIR) / path
    if not target.exists():
        raise FileNotFoundError(
            f"spacy-elmo.BiLM.v1: model path {path!r} does not exist (config option model.path). "
            f"Give a native model directory, a bilm-tf/AllenNLP directory (options.json + .hdf5) or an "
            f".hdf5 weight file with options.json beside it"
        )
    return target


def peek_options(path: str) -> Optional[BiLMOptions]:
    """The options of the model at `path` without loading its weights, or None if unreadable."""
    try:
        target = resolve_source(path)
        options_file = target / OPTIONS_FILE if target.is_dir() else target.with_name(OPTIONS_FILE)
        return BiLMOptions.from_dict(json.loads(options_file.read_text(encoding="utf-8")), source=str(options_file))
    except (OSError, ValueError):
        return None


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


class BiLMRunner(torch.nn.Module):
    """The PyTorch side: holds the biLM (loaded on demand) and runs several batches in one call.

    One call for all the batches of a doc batch keeps thinc's gradient scaling (mixed precision)
    to one backward pass per update. Stateful mode carries the LSTM state from call to call, row by
    row, as bilm-tf and AllenNLP do.
    """

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source
        self.bilm: Optional[BiLM] = None
        self.stateful = False
        self._carried = CarriedState()

    @property
    def loaded(self) -> bool:
        return self.bilm is not None

    def load(self) -> BiLM:
        if self.bilm is None:
            target = resolve_source(self.source)
            bilm = loading.load_bilm(target)
            self.set_bilm(bilm, get_torch_default_device())
        return self.bilm  # type: ignore[return-value]

    def set_bilm(self, bilm: BiLM, device: Optional[torch.device] = None) -> None:
        bilm = strip_lm_head(bilm)
        for param in bilm.parameters():
            param.requires_grad_(True)
        self.bilm = bilm.to(device) if device is not None else bilm
        self._carried.reset()

    def reset_state(self) -> None:
        self._carried.reset()

    def forward(self, batches: List[torch.Tensor]) -> List[torch.Tensor]:
        bilm = self.load()
        outputs = []
        for char_ids in batches:
            char_ids = char_ids.to(bilm.device)
            if self.stateful:
                initial = self._carried.rows(bilm.lstm, char_ids.shape[0], char_ids.device)
                result = bilm(char_ids, initial_state=initial, return_final_state=True)
                self._carried.store(result.final_state)
            else:
                result = bilm(char_ids)
            outputs.append(result.layers.float())
        return outputs


def serialize_runner(runner: BiLMRunner) -> bytes:
    """The shim's serializer: the native msgpack format (the biLM is loaded first if need be)."""
    return bilm_to_bytes(runner.load())


def deserialize_runner(runner: BiLMRunner, data: bytes, device: torch.device) -> BiLMRunner:
    runner.set_bilm(bilm_from_bytes(data, source="spacy-elmo pipeline weights"), device)
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


def known_options(model: Model) -> Optional[BiLMOptions]:
    """The biLM's options if they can be known without loading weights (None if not)."""
    runner = get_runner(model)
    if runner.bilm is not None:
        return runner.bilm.options
    return peek_options(runner.source)


def plan_batches(segments: Sequence[Segment], token_budget: int, stateful: bool) -> List[List[int]]:
    """Stateless: length-sorted batches under the token budget. Stateful: text order, kept in order."""
    lengths = [s.words + 2 for s in segments]
    if not stateful:
        return length_sorted_batches(lengths, token_budget)
    batches: List[List[int]] = []
    current: List[int] = []
    width = 0
    for index, length in enumerate(lengths):
        if current and (len(current) + 1) * max(width, length) > token_budget:
            batches.append(current)
            current, width = [], 0
        current.append(index)
        width = max(width, length)
    if current:
        batches.append(current)
    return batches


def forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    bilm = ensure_bilm(model)
    ops = model.ops
    runner = get_runner(model)
    runner.stateful = bool(model.attrs["stateful"])
    n_layers, width = model.get_dim("nL"), model.get_dim("nO")
    segments = segment_docs(docs, model.attrs["window_size"], model.attrs["window_context"])
    batches = plan_batches(segments, int(model.attrs["token_budget"]), runner.stateful)
    max_chars = bilm.options.max_characters_per_token
    tensors = []
    for batch in batches:
        words = [[docs[segments[i].doc][int(p)].text for p in segments[i].positions] for i in batch]
        tensors.append(torch.from_numpy(chars.batch_to_ids(words, max_characters_per_token=max_chars)))
    shim = model.shims[0]
    fine_tune = is_train and bool(model.attrs["fine_tune"])
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
        outputs[doc_index][:, keep] = batch_arrays[b][:, row, 1 + seg.keep_start : 1 + seg.keep_end]

    def backprop(d_outputs: List[Floats3d]) -> List[Doc]:
        if not fine_tune:
            return []
        grads = [xp.zeros_like(a) for a in batch_arrays]
        for doc_index, keep, b, row, seg in places():
            grads[b][:, row, 1 + seg.keep_start : 1 + seg.keep_end] = d_outputs[doc_index][:, keep]
        grad_tensors = [xp2torch(g, device=t.device) for g, t in zip(grads, torch_outputs)]
        if torch_outputs:
            shim_backprop(ArgsKwargs(args=(torch_outputs,), kwargs={"grad_tensors": grad_tensors}))
        return []

    return outputs, backprop


def init(model: Model, X: Optional[List[Doc]] = None, Y: Any = None) -> None:
    ensure_bilm(model)


def replace_listener(model: Model, listener: Model, pipe: Any) -> Model:
    """`nlp.replace_listeners`: a listener is replaced by a copy of this layer (same outputs)."""
    return model


def replace_listener_cfg(bilm_cfg: Dict[str, Any], listener_owner_cfg: Dict[str, Any]) -> Dict[str, Any]:
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


@registry.architectures("spacy-elmo.BiLM.v1")
def BiLM_v1(
    path: str = "",
    window_size: int = DEFAULT_WINDOW_SIZE,
    window_context: int = DEFAULT_WINDOW_CONTEXT,
    mixed_precision: bool = False,
) -> Model[List[Doc], List[Floats3d]]:
    """The biLM layer: docs -> one (L+1, n_tokens, 2P) array of layer outputs per doc.

    path: a native model directory, a bilm-tf/AllenNLP directory (options.json + one .hdf5 [+ vocab.txt]),
        an .hdf5 weight file with options.json beside it, or a shipped model name; "" is the shipped
        default (`spacy_elmo.loading.DEFAULT_MODEL`). Read on first use, only if no saved weights were
        loaded (spacy.load never needs it).
    window_size: the longest sequence the biLM reads at once; docs without sentence boundaries (and
        longer sentences) are cut into overlapping windows of this many tokens.
    window_context: tokens of context each window reads on each side of the part it answers for.
    mixed_precision: run the biLM under CUDA autocast (GPU only; no effect on CPU).
    """
    check_window(window_size, window_context)
    runner = BiLMRunner(path)
    shim = PyTorchShim(
        runner,
        # autocast is CUDA-only: without CUDA the setting is a no-op (and torch would warn each call)
        mixed_precision=mixed_precision and torch.cuda.is_available(),
        serialize_model=serialize_runner,
        deserialize_model=deserialize_runner,
    )
    return Model(
        BILM_LAYER_NAME,
        forward,
        init=init,
        dims={"nO": None, "nL": None},
        shims=[shim],
        attrs={
            "path": path,
            "window_size": window_size,
            "window_context": window_context,
            "token_budget": DEFAULT_TOKEN_BUDGET,
            "stateful": False,
            "fine_tune": False,
            "replace_listener": replace_listener,
            "replace_listener_cfg": replace_listener_cfg,
        },
    )


def bilm_parameters(model: Model) -> Dict[str, numpy.ndarray]:
    """A numpy copy of every biLM weight (for tests and checks: did training change them?)."""
    bilm = ensure_bilm(model)
    return {name: p.detach().cpu().numpy().copy() for name, p in bilm.named_parameters()}
