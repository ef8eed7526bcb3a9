"""The layer mix: ELMo vectors as a weighted sum of the biLM's layers, sum_j w_j * h_j.

One home for every place that mixes layers: the pipe's default mix behind `doc._.elmo` ("average",
"top" or given weights), the learned mix of a listener (`layers/scalar_mix.py` takes `softmax` from
here and adds gamma, layer norm and dropout), and `embed`'s `--layers` reduction. Works on numpy and
cupy arrays alike.
"""

from collections.abc import Sequence
from typing import Any, Union

import numpy

MIX_NAMES = ("average", "top")
REDUCTIONS = ("all", "top", "average")


def array_module(array: Any) -> Any:
    """numpy for numpy arrays, cupy for cupy arrays (cupy is imported only when one is given)."""
    if isinstance(array, numpy.ndarray):
        return numpy
    import cupy

    return cupy


def softmax(s: Any) -> Any:
    """softmax over a 1-d array of layer scores (the learned mix's weights)."""
    xp = array_module(s)
    e = xp.exp(s - s.max())
    return e / e.sum()


def named_mix_weights(mix: Union[str, Sequence[float]], n_layers: int, owner: str = "elmo") -> numpy.ndarray:
    """The float32 weights of a mix over `n_layers` layers: "average", "top", or `n_layers` weights used
    as given; `owner` names the setting in the error."""
    if mix == "average":
        return numpy.full((n_layers,), 1.0 / n_layers, dtype="float32")
    if mix == "top":
        weights = numpy.zeros((n_layers,), dtype="float32")
        weights[-1] = 1.0
        return weights
    weights = numpy.asarray(mix, dtype="float32")
    if weights.shape != (n_layers,):
        raise ValueError(
            f"{owner}: default_mix has {weights.size} weights but the biLM has {n_layers} layers "
            f"(token layer + {n_layers - 1} LSTM layers); give {n_layers} weights, 'average' or 'top'"
        )
    return weights


def mix_layers(layers: Any, weights: Any) -> Any:
    """(n_layers, n_tokens, width) layers under (n_layers,) weights -> (n_tokens, width), summed in
    float32 and returned in the layers' dtype (float16 storage stays float16)."""
    xp = array_module(layers)
    out = xp.tensordot(xp.asarray(weights, dtype="float32"), layers.astype("float32", copy=False), axes=(0, 0))
    return out.astype(layers.dtype, copy=False)


def reduce_layers(layers: numpy.ndarray, how: str) -> numpy.ndarray:
    """`embed --layers`: "all" keeps (n_layers, n_tokens, width), "top" the last layer, "average" the
    mean of the layers (numpy's mean over the layer axis)."""
    if how == "all":
        return layers
    if how == "top":
        return layers[-1]
    if how == "average":
        return layers.mean(axis=0)
    raise ValueError(f"layers must be one of {REDUCTIONS}, got {how!r}")
