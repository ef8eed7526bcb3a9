"""The biLM's weights as named arrays in the bilm-tf/AllenNLP layout (which both file formats hold), and
back into the modules. The rules of the reference layout:
- `char_embed` has 261 rows; the AllenNLP id layout prepends a zero row for "no token" (id 0).
- `CNN/W_cnn_i` is a TF conv2d kernel (1, width, dim, n); PyTorch's conv1d wants (n, dim, width).
- Highway and projection matrices are (in, out), as stored here; the "carry" gate is the sigmoid one.
- `RNN_0` is the forward stack, `RNN_1` the backward one; `W_0` is (input + projection, 4C) with the
  input rows first; gates i, j, f, o; no forget bias in the file; `W_P_0` has no bias.
- ELMoForManyLangs-style models (not a bilm-tf layout, stored natively only): `char_embed` has one row
  per entry of the model's character vocabulary; `word_embed` (words, word_dim) is the word embedding,
  and `CNN_proj/W_proj` then has the word_dim rows of the word embedding first.
- Optional extras written by this package (bilm-tf's checkpoint has them, the AllenNLP dump does not):
  `softmax/W` (V, P) and `softmax/b` (V,), with the vocabulary in a text file beside.
Every transform is a transpose or a slice, so import -> export -> import is bit for bit.
"""

import re
from collections.abc import Iterable, Iterator
from typing import Optional

import numpy
import torch

from ..bilm.bilm import BiLM
from ..bilm.lexicon import AnyLexicon, ByteLexicon, Lexicon
from ..bilm.options import BiLMOptions
from ..errors import ModelFileError

RAW_CHARACTERS = 261
SOFTMAX_ARRAYS = ("softmax/W", "softmax/b")
# No trained ELMo comes near this magnitude (the released and shipped models stay under ~50), while one
# flipped high exponent bit turns any weight above ~1e-30 into something beyond it (near 1e37 for a
# typical weight): the cheapest check a checksum-free format allows.
MAX_ABS_WEIGHT = 1e4


class WeightsError(ModelFileError):
    """A weight file that cannot be read, or whose contents do not match its options."""


def lstm_name(direction: int, layer: int, leaf: str) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/{leaf}"


def expected_shapes(options: BiLMOptions, softmax_rows: Optional[int] = None) -> dict[str, tuple[int, ...]]:
    """Every dataset of the reference layout with the shape `options` implies (the softmax given its rows)."""
    o = options
    shapes: dict[str, tuple[int, ...]] = {"char_embed": (o.char_vocab_size or RAW_CHARACTERS, o.char_embedding_dim)}
    if o.word_dim:
        shapes["word_embed"] = (o.word_vocab_size, o.word_dim)
    for i, (width, n) in enumerate(o.filters):
        shapes[f"CNN/W_cnn_{i}"] = (1, width, o.char_embedding_dim, n)
        shapes[f"CNN/b_cnn_{i}"] = (n,)
    F = o.n_filters
    for k in range(o.n_highway):
        for leaf in ("carry", "transform"):
            shapes[f"CNN_high_{k}/W_{leaf}"] = (F, F)
            shapes[f"CNN_high_{k}/b_{leaf}"] = (F,)
    shapes["CNN_proj/W_proj"] = (o.word_dim + F, o.projection_dim)
    shapes["CNN_proj/b_proj"] = (o.projection_dim,)
    for direction in (0, 1):
        for layer in range(o.n_layers):
            shapes[lstm_name(direction, layer, "W_0")] = (2 * o.projection_dim, 4 * o.lstm_dim)
            shapes[lstm_name(direction, layer, "B")] = (4 * o.lstm_dim,)
            shapes[lstm_name(direction, layer, "W_P_0")] = (o.lstm_dim, o.projection_dim)
    if softmax_rows is not None:
        shapes["softmax/W"] = (softmax_rows, o.projection_dim)
        shapes["softmax/b"] = (softmax_rows,)
    return shapes


# The option whose value decides how many of a family of datasets there are: an extra dataset of the
# family most likely means that option disagrees with the weights.
_FAMILIES = (
    (re.compile(r"^CNN/[Wb]_cnn_\d+$"), "char_cnn.filters"),
    (re.compile(r"^CNN_high_\d+/"), "char_cnn.n_highway"),
    (re.compile(r"^RNN_\d+/RNN/MultiRNNCell/Cell\d+/"), "lstm.n_layers"),
)


def check_accounted_for(names: Iterable[str], options: BiLMOptions) -> None:
    """Refuse arrays the options do not describe (the softmax aside): loading would silently drop layers."""
    known = set(expected_shapes(options)) | set(SOFTMAX_ARRAYS)
    extra = sorted(set(names) - known)
    if not extra:
        return
    suspects = sorted({option for name in extra for pattern, option in _FAMILIES if pattern.search(name)})
    hint = (
        f"option {', '.join(repr(s) for s in suspects)} probably disagrees with the weights"
        if suspects
        else "the options and the weights are probably from different models"
    )
    shown = ", ".join(repr(n) for n in extra[:6]) + (f" and {len(extra) - 6} more" if len(extra) > 6 else "")
    raise WeightsError(f"{len(extra)} weight array(s) that the options do not account for ({shown}): {hint}")


def check_values(name: str, array: numpy.ndarray) -> None:
    """Refuse NaN, infinite and absurdly large weights, naming the array and where."""
    if array.size == 0:
        return
    finite = numpy.isfinite(array)
    if not finite.all():
        where = tuple(int(i) for i in numpy.argwhere(~finite)[0])
        raise WeightsError(
            f"dataset '{name}' holds a NaN or infinite value at {where} (a damaged file or a diverged model)"
        )
    magnitude = numpy.abs(array)
    if float(magnitude.max()) > MAX_ABS_WEIGHT:
        where = tuple(int(i) for i in numpy.unravel_index(int(magnitude.argmax()), array.shape))
        raise WeightsError(
            f"dataset '{name}' holds {array[where]:.6g} at {where}, beyond the {MAX_ABS_WEIGHT:g} that no "
            "trained ELMo reaches: the file is damaged (a flipped bit?); copy or download it again"
        )


def weight_range(arrays: Iterable[tuple[str, numpy.ndarray]]) -> tuple[float, str]:
    """The largest |weight| over the arrays and the (first) array that holds it."""
    largest = [(float(numpy.abs(value).max()), name) for name, value in arrays if value.size]
    return max([(0.0, ""), *largest], key=lambda pair: pair[0])


def _layout(bilm: BiLM) -> Iterator[tuple[str, tuple[torch.Tensor, ...]]]:
    """Each reference array, in order, with the parameters it holds (`W_0`: the input and recurrent matrices;
    the embeddings without their "no token" row)."""
    o, enc, lstm = bilm.options, bilm.token_encoder, bilm.lstm
    yield "char_embed", (enc.char_embedding[1:],)
    if enc.word_embedding is not None:
        yield "word_embed", (enc.word_embedding[1:],)
    for i, (weight, bias) in enumerate(zip(enc.conv_weights, enc.conv_biases)):
        yield f"CNN/W_cnn_{i}", (weight,)
        yield f"CNN/b_cnn_{i}", (bias,)
    for k in range(o.n_highway):
        yield f"CNN_high_{k}/W_carry", (enc.highway_carry_w[k],)
        yield f"CNN_high_{k}/b_carry", (enc.highway_carry_b[k],)
        yield f"CNN_high_{k}/W_transform", (enc.highway_transform_w[k],)
        yield f"CNN_high_{k}/b_transform", (enc.highway_transform_b[k],)
    yield "CNN_proj/W_proj", (enc.projection_w,)
    yield "CNN_proj/b_proj", (enc.projection_b,)
    for direction in (0, 1):
        for layer in range(o.n_layers):
            stacked = (lstm.input_w[layer][direction], lstm.recurrent_w[layer][direction])
            yield lstm_name(direction, layer, "W_0"), stacked
            yield lstm_name(direction, layer, "B"), (lstm.bias[layer][direction],)
            yield lstm_name(direction, layer, "W_P_0"), (lstm.proj_w[layer][direction],)
    if bilm.softmax is not None:
        yield "softmax/W", (bilm.softmax.weight,)
        yield "softmax/b", (bilm.softmax.bias,)


def bilm_arrays(bilm: BiLM) -> Iterator[tuple[str, numpy.ndarray]]:
    """The model's weights as reference-layout arrays, in the reference orientation."""
    for name, tensors in _layout(bilm):
        parts = [tensor.detach().to("cpu", torch.float32).numpy() for tensor in tensors]
        if name.startswith("CNN/W_cnn_"):  # PyTorch's conv1d (n, dim, width) -> TF's conv2d (1, width, dim, n)
            yield name, numpy.ascontiguousarray(parts[0].transpose(2, 1, 0)[None])
        else:
            yield name, parts[0] if len(parts) == 1 else numpy.concatenate(parts)


def build_bilm(
    options: BiLMOptions,
    arrays: dict[str, numpy.ndarray],
    vocab: Optional[list[str]] = None,
    lexicon: Optional[AnyLexicon] = None,
) -> BiLM:
    """A BiLM from reference-layout arrays, every name, shape and value checked; a model with a character
    vocabulary needs its `lexicon` (by default it reads bytes). The caller names the file (`errors.reading`)."""
    options = BiLMOptions.from_dict(options.to_dict())
    lexicon = lexicon or ByteLexicon(options.max_characters_per_token)
    check_lexicon(options, lexicon)
    check_accounted_for(arrays, options)
    with_softmax = "softmax/W" in arrays
    n_vocab = arrays["softmax/W"].shape[0] if with_softmax else None
    if n_vocab is not None:
        if options.n_tokens_vocab and options.n_tokens_vocab != n_vocab:
            raise WeightsError(
                f"dataset 'softmax/W' has {n_vocab} rows but option 'n_tokens_vocab' is {options.n_tokens_vocab}"
            )
        options.n_tokens_vocab = n_vocab
    for name, shape in expected_shapes(options, n_vocab).items():
        if name not in arrays:
            raise WeightsError(f"missing dataset '{name}' (expected shape {shape} from the options)")
        if tuple(arrays[name].shape) != shape:
            raise WeightsError(f"dataset '{name}' has shape {tuple(arrays[name].shape)}, but the options imply {shape}")
    if vocab is not None and with_softmax and len(vocab) != options.n_tokens_vocab:
        raise WeightsError(f"vocabulary has {len(vocab)} words but the softmax has {options.n_tokens_vocab} rows")
    for name in sorted(arrays):
        check_values(name, arrays[name])
    bilm = BiLM(options, with_softmax=with_softmax)
    load_arrays(bilm, arrays)
    bilm.vocab = list(vocab) if vocab is not None else None
    bilm.lexicon = lexicon
    return bilm


def check_lexicon(options: BiLMOptions, lexicon: AnyLexicon) -> None:
    """The vocabularies must be the ones the options and the embedding tables were made for."""
    if not isinstance(lexicon, Lexicon):
        if options.char_vocab_size:
            raise WeightsError("option 'char_cnn.char_vocab_size' is set, but the model has no character vocabulary")
        return
    if not options.char_vocab_size:
        raise WeightsError("a character vocabulary is given, but option 'char_cnn.char_vocab_size' is 0")
    pairs = (
        ("char_cnn.char_vocab_size", options.char_vocab_size, len(lexicon.characters), "character vocabulary entries"),
        ("char_cnn.word_vocab_size", options.word_vocab_size, len(lexicon.words or []), "word vocabulary entries"),
        (
            "char_cnn.max_characters_per_token",
            options.max_characters_per_token,
            lexicon.max_characters_per_token,
            "characters a token in the vocabulary's settings",
        ),
    )
    for option, expected, actual, what in pairs:
        if expected != actual:
            raise WeightsError(f"option '{option}' is {expected}, but the model has {actual} {what}")


def load_arrays(bilm: BiLM, arrays: dict[str, numpy.ndarray]) -> None:
    """Copy reference-layout arrays into the model's parameters (`_layout`)."""
    enc = bilm.token_encoder
    with torch.no_grad():
        enc.char_embedding.zero_()  # row 0: "no token"
        if enc.word_embedding is not None:
            enc.word_embedding.zero_()
        for name, tensors in _layout(bilm):
            value = arrays[name]
            if name.startswith("CNN/W_cnn_"):
                value = value[0].transpose(2, 1, 0)
            parts = numpy.split(value, [bilm.options.projection_dim]) if len(tensors) == 2 else [value]
            for tensor, part in zip(tensors, parts):
                tensor.copy_(torch.from_numpy(numpy.ascontiguousarray(part)))
