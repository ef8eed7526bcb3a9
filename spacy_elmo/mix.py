"""The layer mix, sum_j w_j * h_j: the pipe's default mix, a listener's learned mix (`softmax`) and
`embed`'s `--layers` reduction, on numpy and cupy arrays alike."""

from collections.abc import Sequence
from typing import Any, Union

import numpy
from thinc.api import get_array_module

MIX_NAMES = ("average", "top")
REDUCTIONS = ("all", "top", "average")


def softmax(s: Any) -> Any:
    """softmax over a 1-d array of layer scores (the learned mix's weights)."""
    xp = get_array_module(s)
    e = xp.exp(s - s.max())
    return e / e.sum()


def named_mix_weights(mix: Union[str, Sequence[float]], n_layers: int) -> numpy.ndarray:
    """The float32 weights of the `elmo` pipe's default_mix: "average", "top", or `n_layers` given weights."""
    if mix == "average":
        return numpy.full((n_layers,), 1.0 / n_layers, dtype="float32")
    if mix == "top":
        return numpy.eye(n_layers, dtype="float32")[-1]
    weights = numpy.asarray(mix, dtype="float32")
    if weights.shape != (n_layers,):
        raise ValueError(
            f"elmo: default_mix has {weights.size} weights but the biLM has {n_layers} layers "
            f"(token layer + {n_layers - 1} LSTM layers); give {n_layers} weights, 'average' or 'top'"
        )
    return weights


def mix_layers(layers: Any, weights: Any) -> Any:
    """(n_layers, n_tokens, width) layers under (n_layers,) weights -> (n_tokens, width), summed in
    float32 and returned in the layers' dtype (float16 storage stays float16)."""
    xp = get_array_module(layers)
    out = xp.tensordot(xp.asarray(weights, dtype="float32"), layers.astype("float32", copy=False), axes=(0, 0))
    return out.astype(layers.dtype, copy=False)


def reduce_layers(layers: numpy.ndarray, how: str) -> numpy.ndarray:
    """`embed --layers`: "all" (n_layers, n_tokens, width), "top" the last layer, "average" their mean."""
    if how == "all":
        return layers
    if how == "top":
        return layers[-1]
    if how == "average":
        return layers.mean(axis=0)
    raise ValueError(f"layers must be one of {REDUCTIONS}, got {how!r}")
