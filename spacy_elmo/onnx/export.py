"""The biLM as one ONNX graph: character ids in, every layer out, any batch size and length.

`ExportableBiLM` computes `BiLM.forward` in fp32, stateless: the CNN as convolutions, each LSTM layer as
one `scan` over the steps (an ONNX `Scan`, not a cell per step), with the biLM's own highway and cell.
"""

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Optional, Union

import torch
from torch import nn

from ..bilm.bilm import BiLM
from ..bilm.lstm import lstm_cell, reverse_within_lengths
from ..bilm.precision import Products, TorchFloat
from ..disk import atomic_write_bytes
from ..errors import require
from ..io.onnx_graph import GRAPH_SHA256_KEY, INPUT_NAME, OUTPUT_NAME, GraphMetadata, graph_sha256

OPSET = 18
# what torch's exporter says on every export about torch itself, not about the biLM
_EXPORTER_LOGGER = "torch.onnx._internal.exporter._registration"
_EXPORTER_NOISE = "torchvision is not installed"
_PYTREE_DEPRECATION = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


def _not_exporter_noise(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(_EXPORTER_NOISE)


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence only the exporter's messages about torch itself (above); any other warning still shows."""
    logger = logging.getLogger(_EXPORTER_LOGGER)
    logger.addFilter(_not_exporter_noise)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_PYTREE_DEPRECATION, category=FutureWarning)
            yield
    finally:
        logger.removeFilter(_not_exporter_noise)


class _MatMulAdd(TorchFloat):
    """fp32 products as the graph's MatMul and Add: the exporter's own ops, no fused or prepared weights."""

    kernels = "export"

    def multiply(self, x: torch.Tensor, prepared: object, bias: Optional[torch.Tensor]) -> torch.Tensor:
        assert isinstance(prepared, torch.Tensor)
        return x @ prepared if bias is None else x @ prepared + bias


EXPORT_PRODUCTS = Products("fp32", _MatMulAdd())


class ExportableBiLM(nn.Module):
    """(B, T, width) int64 ids (0 = no token) -> (L+1, B, T, 2P) float32 layers, zero past each row's end."""

    def __init__(self, bilm: BiLM) -> None:
        super().__init__()
        self.bilm = bilm

    def encode_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """(N, width) -> (N, P), as `CharacterEncoder` (convolutions instead of its unfolded products)."""
        enc = self.bilm.token_encoder
        words = None
        if enc.word_embedding is not None:
            words = nn.functional.embedding(ids[:, -1], enc.word_embedding)
            ids = ids[:, :-1]
        embedded = nn.functional.embedding(ids, enc.char_embedding).transpose(1, 2)  # (N, dim, chars)
        pooled = [nn.functional.conv1d(embedded, w).amax(dim=-1) for w in enc.conv_weights]
        return enc.encode_pooled(torch.cat(pooled, dim=1) + torch.cat(list(enc.conv_biases)), words, EXPORT_PRODUCTS)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        from ..bilm._torch_private import scan

        o, lstm = self.bilm.options, self.bilm.lstm
        n_rows, n_steps = char_ids.shape[0], char_ids.shape[1]
        mask = char_ids.gt(0).any(-1)  # (B, T)
        lengths = mask.sum(1)
        # each distinct token once through the CNN (an ONNX `Unique` over rows), as the torch path dedups
        distinct, where = torch.unique(char_ids.reshape(n_rows * n_steps, -1), dim=0, return_inverse=True)
        tokens = self.encode_tokens(distinct)[where].reshape(n_rows, n_steps, -1)
        keep = mask.unsqueeze(-1).to(tokens.dtype)
        tokens = tokens * keep
        both = torch.stack([tokens, reverse_within_lengths(tokens, lengths)])  # (2, B, T, P)
        frames = both.transpose(1, 2)  # (2, T, B, P)
        keep_steps = keep.transpose(0, 1).unsqueeze(0)  # (1, T, B, 1)
        layers = [torch.cat([tokens, tokens], dim=-1)]
        cell_clip, proj_clip = o.cell_clip, o.proj_clip
        for layer in range(o.n_layers):
            bias = (lstm.bias[layer] + lstm.forget_bias).unsqueeze(1).unsqueeze(1)  # (2, 1, 1, 4C)
            pre = torch.matmul(frames.unsqueeze(2), lstm.input_w[layer].unsqueeze(1).unsqueeze(1)).squeeze(2) + bias
            w_rec, w_proj = lstm.recurrent_w[layer], lstm.proj_w[layer]

            def step(carry, pre_t, w_rec=w_rec, w_proj=w_proj):
                h, c = carry
                m, c = lstm_cell(pre_t + torch.bmm(h, w_rec), c, cell_clip)
                h = torch.bmm(m, w_proj)
                if proj_clip is not None:
                    h = h.clamp(-proj_clip, proj_clip)
                return (h, c), h.clone()

            h0 = frames.new_zeros(2, n_rows, o.projection_dim)
            c0 = frames.new_zeros(2, n_rows, o.lstm_dim)
            _, steps = scan(step, (h0, c0), pre.transpose(0, 1))  # over T: (T, 2, B, P)
            out = steps.transpose(0, 1) * keep_steps
            if o.use_skip_connections and layer > 0:
                out = out + frames
            frames = out
            forward = out[0].transpose(0, 1)
            backward = reverse_within_lengths(out[1].transpose(0, 1), lengths)
            layers.append(torch.cat([forward, backward], dim=-1))
        return torch.stack(layers)


def export_bytes(bilm: BiLM, source_sha256: Optional[str] = None) -> bytes:
    """The biLM as a serialized ONNX graph, carrying its options, lexicon, `source_sha256` (the digest of
    the model it came from) and the digest of its own bytes. Needs the `[onnx]` extra: without it torch's
    exporter fails deep inside, so a missing package is named first, in one line (`MissingPackageError`)."""
    require("ONNX export", "onnx", "onnxscript", extra="onnx")
    was_training = bilm.training
    bilm.eval()
    module = ExportableBiLM(bilm).eval()
    example = torch.from_numpy(bilm.batch_to_ids([["a", "b", "c"], ["d"]])).long()
    assert example.shape[-1] == bilm.lexicon.width
    try:
        with torch.no_grad(), _quiet_exporter():
            program = torch.onnx.export(
                module,
                (example,),
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                dynamic_shapes=({0: torch.export.Dim("batch"), 1: torch.export.Dim("length")},),
                dynamo=True,
                opset_version=OPSET,
                verbose=False,
            )
    finally:
        bilm.train(was_training)
    if program is None:  # the dynamo exporter always returns a program
        raise RuntimeError("torch.onnx.export returned no program")
    proto = program.model_proto
    for key, value in GraphMetadata(bilm.options, bilm.lexicon, source_sha256).to_strings().items():
        proto.metadata_props.add(key=key, value=value)
    digest, _ = graph_sha256(proto.SerializeToString())
    proto.metadata_props.add(key=GRAPH_SHA256_KEY, value=digest)
    graph: bytes = proto.SerializeToString()
    if graph_sha256(graph) != (digest, digest):  # protobuf writes the same bytes again
        raise RuntimeError("the exported graph's recorded digest does not cover its bytes")
    return graph


def export_onnx(bilm: BiLM, path: Union[str, Path], source_sha256: Optional[str] = None) -> Path:
    """Write `export_bytes(bilm)` to `path` (atomically: a killed export leaves no partial file)."""
    target = Path(path)
    atomic_write_bytes(target, export_bytes(bilm, source_sha256))
    return target
