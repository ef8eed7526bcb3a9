"""bilm-tf/AllenNLP weights (options.json + HDF5) <-> the PyTorch biLM, exactly.

The rules of the reference layout, all applied here and nowhere else:
- `char_embed` has 261 rows; the AllenNLP id layout prepends a zero row for "no token" (id 0).
- `CNN/W_cnn_i` is a TF conv2d kernel (1, width, dim, n); PyTorch's conv1d wants (n, dim, width).
- Highway and projection matrices are (in, out), as stored here; the "carry" gate is the sigmoid one.
- `RNN_0` is the forward stack, `RNN_1` the backward one; `W_0` is (input + projection, 4C) with the
  input rows first; gates i, j, f, o; no forget bias in the file; `W_P_0` has no bias.
- Optional extras written by this package (bilm-tf's checkpoint has them, the AllenNLP dump does not):
  `softmax/W` (V, P) and `softmax/b` (V,), with the vocabulary in a text file beside.
Every transform is a transpose or a slice, so import -> export -> import is bit for bit.
"""
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

import h5py
import numpy
import torch

from .bilm.bilm import BiLM
from .bilm.config import BiLMOptions

PathLike = Union[str, Path]
RAW_CHARACTERS = 261


class WeightsError(ValueError):
    """A weight file that cannot be read, or whose contents do not match its options."""


def _lstm_name(direction: int, layer: int, leaf: str) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/{leaf}"


def expected_shapes(options: BiLMOptions) -> Dict[str, Tuple[int, ...]]:
    """Every dataset of the reference layout (no softmax) with the shape `options` implies."""
    o = options
    shapes: Dict[str, Tuple[int, ...]] = {"char_embed": (RAW_CHARACTERS, o.char_embedding_dim)}
    for i, (width, n) in enumerate(o.filters):
        shapes[f"CNN/W_cnn_{i}"] = (1, width, o.char_embedding_dim, n)
        shapes[f"CNN/b_cnn_{i}"] = (n,)
    F = o.n_filters
    for k in range(o.n_highway):
        for leaf in ("carry", "transform"):
            shapes[f"CNN_high_{k}/W_{leaf}"] = (F, F)
            shapes[f"CNN_high_{k}/b_{leaf}"] = (F,)
    shapes["CNN_proj/W_proj"] = (F, o.projection_dim)
    shapes["CNN_proj/b_proj"] = (o.projection_dim,)
    for direction in (0, 1):
        for layer in range(o.n_layers):
            shapes[_lstm_name(direction, layer, "W_0")] = (2 * o.projection_dim, 4 * o.lstm_dim)
            shapes[_lstm_name(direction, layer, "B")] = (4 * o.lstm_dim,)
            shapes[_lstm_name(direction, layer, "W_P_0")] = (o.lstm_dim, o.projection_dim)
    return shapes


def bilm_arrays(bilm: BiLM) -> Iterator[Tuple[str, numpy.ndarray]]:
    """The model's weights as reference-layout arrays, in the reference orientation."""
    o = bilm.options
    enc, lstm = bilm.token_encoder, bilm.lstm

    def arr(t: torch.Tensor) -> numpy.ndarray:
        return t.detach().to("cpu", torch.float32).numpy()

    yield "char_embed", arr(enc.char_embedding[1:])
    for i, (weight, bias) in enumerate(zip(enc.conv_weights, enc.conv_biases)):
        yield f"CNN/W_cnn_{i}", numpy.ascontiguousarray(arr(weight).transpose(2, 1, 0)[None])
        yield f"CNN/b_cnn_{i}", arr(bias)
    for k in range(o.n_highway):
        yield f"CNN_high_{k}/W_carry", arr(enc.highway_carry_w[k])
        yield f"CNN_high_{k}/b_carry", arr(enc.highway_carry_b[k])
        yield f"CNN_high_{k}/W_transform", arr(enc.highway_transform_w[k])
        yield f"CNN_high_{k}/b_transform", arr(enc.highway_transform_b[k])
    yield "CNN_proj/W_proj", arr(enc.projection_w)
    yield "CNN_proj/b_proj", arr(enc.projection_b)
    for direction in (0, 1):
        for layer in range(o.n_layers):
            w0 = numpy.concatenate([arr(lstm.input_w[layer][direction]), arr(lstm.recurrent_w[layer][direction])])
            yield _lstm_name(direction, layer, "W_0"), w0
            yield _lstm_name(direction, layer, "B"), arr(lstm.bias[layer][direction])
            yield _lstm_name(direction, layer, "W_P_0"), arr(lstm.proj_w[layer][direction])
    if bilm.softmax is not None:
        yield "softmax/W", arr(bilm.softmax.weight)
        yield "softmax/b", arr(bilm.softmax.bias)


def _read_dataset(handle: h5py.File, name: str, shape: Tuple[int, ...], path: Path) -> numpy.ndarray:
    if name not in handle:
        raise WeightsError(f"{path}: missing dataset '{name}' (expected shape {shape} from the options)")
    dataset = handle[name]
    if not isinstance(dataset, h5py.Dataset):
        raise WeightsError(f"{path}: '{name}' is a group, expected a dataset of shape {shape}")
    if tuple(dataset.shape) != tuple(shape):
        raise WeightsError(
            f"{path}: dataset '{name}' has shape {tuple(dataset.shape)}, but the options imply {shape}; "
            "are the options.json and the weight file from the same model?"
        )
    try:
        data = dataset[...]
    except (OSError, RuntimeError, ValueError) as err:
        raise WeightsError(f"{path}: dataset '{name}' cannot be read (truncated or corrupt file?): {err}") from None
    if not numpy.issubdtype(data.dtype, numpy.floating):
        raise WeightsError(f"{path}: dataset '{name}' has dtype {data.dtype}, expected floating point")
    if not numpy.all(numpy.isfinite(data)):
        raise WeightsError(f"{path}: dataset '{name}' holds NaN or infinite values")
    return data.astype(numpy.float32, copy=False)


def _open_hdf5(path: Path, mode: str = "r") -> h5py.File:
    if mode == "r" and not path.exists():
        raise FileNotFoundError(f"weight file not found: {path}")
    try:
        return h5py.File(path, mode)
    except OSError as err:
        raise WeightsError(f"{path}: not a readable HDF5 weight file ({err})") from None


def load_bilm_tf(
    options_file: PathLike, weight_file: PathLike, vocab_file: Optional[PathLike] = None
) -> BiLM:
    """A BiLM from bilm-tf/AllenNLP `options.json` + HDF5 weights (+ softmax and vocabulary if present)."""
    options = BiLMOptions.from_file(options_file)
    weight_path = Path(weight_file)
    with _open_hdf5(weight_path) as handle:
        shapes = expected_shapes(options)
        if "softmax/W" in handle:
            rows = handle["softmax/W"].shape[0]
            shapes["softmax/W"] = (rows, options.projection_dim)
            shapes["softmax/b"] = (rows,)
        arrays = {name: _read_dataset(handle, name, shape, weight_path) for name, shape in shapes.items()}
    vocab = read_vocab(vocab_file) if vocab_file is not None else None
    return build_bilm(options, arrays, source=str(weight_path), vocab=vocab)


def build_bilm(
    options: BiLMOptions,
    arrays: Dict[str, numpy.ndarray],
    source: str = "weights",
    vocab: Optional[List[str]] = None,
) -> BiLM:
    """A BiLM from reference-layout arrays, every name and shape checked against the options."""
    options = BiLMOptions.from_dict(options.to_dict(), source=source)
    shapes = expected_shapes(options)
    with_softmax = "softmax/W" in arrays
    if with_softmax:
        n_vocab = arrays["softmax/W"].shape[0]
        if options.n_tokens_vocab and options.n_tokens_vocab != n_vocab:
            raise WeightsError(
                f"{source}: dataset 'softmax/W' has {n_vocab} rows but option 'n_tokens_vocab' is "
                f"{options.n_tokens_vocab}"
            )
        options.n_tokens_vocab = n_vocab
        shapes["softmax/W"] = (n_vocab, options.projection_dim)
        shapes["softmax/b"] = (n_vocab,)
    for name, shape in shapes.items():
        if name not in arrays:
            raise WeightsError(f"{source}: missing dataset '{name}' (expected shape {shape} from the options)")
        if tuple(arrays[name].shape) != shape:
            raise WeightsError(
                f"{source}: dataset '{name}' has shape {tuple(arrays[name].shape)}, but the options imply {shape}"
            )
    if vocab is not None and with_softmax and len(vocab) != options.n_tokens_vocab:
        raise WeightsError(f"{source}: vocabulary has {len(vocab)} words but the softmax has {options.n_tokens_vocab} rows")
    bilm = BiLM(options, with_softmax=with_softmax)
    load_arrays(bilm, arrays)
    bilm.vocab = list(vocab) if vocab is not None else None
    return bilm


def load_arrays(bilm: BiLM, arrays: Dict[str, numpy.ndarray]) -> None:
    """Copy reference-layout arrays into the model's parameters."""
    o = bilm.options
    enc, lstm = bilm.token_encoder, bilm.lstm

    def put(param: torch.Tensor, value: numpy.ndarray) -> None:
        with torch.no_grad():
            param.copy_(torch.from_numpy(numpy.ascontiguousarray(value)))

    with torch.no_grad():
        enc.char_embedding.zero_()
        put(enc.char_embedding[1:], arrays["char_embed"])
    for i in range(len(o.filters)):
        put(enc.conv_weights[i], arrays[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0))
        put(enc.conv_biases[i], arrays[f"CNN/b_cnn_{i}"])
    for k in range(o.n_highway):
        put(enc.highway_carry_w[k], arrays[f"CNN_high_{k}/W_carry"])
        put(enc.highway_carry_b[k], arrays[f"CNN_high_{k}/b_carry"])
        put(enc.highway_transform_w[k], arrays[f"CNN_high_{k}/W_transform"])
        put(enc.highway_transform_b[k], arrays[f"CNN_high_{k}/b_transform"])
    put(enc.projection_w, arrays["CNN_proj/W_proj"])
    put(enc.projection_b, arrays["CNN_proj/b_proj"])
    P = o.projection_dim
    for direction in (0, 1):
        for layer in range(o.n_layers):
            w0 = arrays[_lstm_name(direction, layer, "W_0")]
            put(lstm.input_w[layer][direction], w0[:P])
            put(lstm.recurrent_w[layer][direction], w0[P:])
            put(lstm.bias[layer][direction], arrays[_lstm_name(direction, layer, "B")])
            put(lstm.proj_w[layer][direction], arrays[_lstm_name(direction, layer, "W_P_0")])
    if bilm.softmax is not None:
        put(bilm.softmax.weight, arrays["softmax/W"])
        put(bilm.softmax.bias, arrays["softmax/b"])


def save_bilm_tf(
    bilm: BiLM,
    options_file: PathLike,
    weight_file: PathLike,
    vocab_file: Optional[PathLike] = None,
) -> None:
    """Write options.json + HDF5 in the reference layout (+ softmax and vocabulary when the model has them)."""
    weight_path = Path(weight_file)
    weight_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = weight_path.with_name(weight_path.name + ".tmp")
    with _open_hdf5(tmp, "w") as handle:
        for name, value in bilm_arrays(bilm):
            handle.create_dataset(name, data=value, dtype="float32")
    tmp.replace(weight_path)
    bilm.options.to_file(options_file)
    if vocab_file is not None and bilm.vocab is not None:
        write_vocab(bilm.vocab, vocab_file)


def read_vocab(path: PathLike) -> List[str]:
    """A vocabulary file: one word a line, `<S>`, `</S>`, `<UNK>` first in bilm-tf's convention."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"vocabulary file not found: {path}")
    words = path.read_text(encoding="utf-8").split("\n")
    if words and words[-1] == "":
        words.pop()
    return words


def write_vocab(words: List[str], path: PathLike) -> None:
    Path(path).write_text("".join(f"{w}\n" for w in words), encoding="utf-8")
