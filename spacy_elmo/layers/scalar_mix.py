"""The task-specific scalar mix of the paper: ELMo_k = gamma * sum_j softmax(s)_j * h_kj, s from zero (the
plain average) and gamma from one. Layer norm is per token (AllenNLP's is per batch), so a doc's result does
not depend on its batch; the dropout is stored as "elmo_dropout", so spaCy's `[training] dropout` does not
override it.
"""

from typing import Any, Callable, Optional

import numpy
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats1d, Floats2d, Floats3d

from ..mix import softmax

LAYER_NORM_EPS = 1e-12
DROPOUT_ATTR = "elmo_dropout"


def mix_weights(model: Model) -> Floats1d:
    """The normalised layer weights softmax(s) (without gamma)."""
    return softmax(model.get_param("weights"))


def forward(model: Model, Xs: list[Floats3d], is_train: bool) -> tuple[list[Floats2d], Callable]:
    ops, xp = model.ops, model.ops.xp
    n_layers = model.get_dim("nL")
    for layers in Xs:
        if layers.shape[0] != n_layers:
            raise ValueError(
                f"spacy-elmo.ScalarMix.v1: got {layers.shape[0]} layers but the mix was built for "
                f"n_layers={n_layers}; the biLM does not match this mix"
            )
    lengths = [int(X.shape[1]) for X in Xs]
    width = int(Xs[0].shape[2]) if Xs else model.get_dim("nO")
    if not sum(lengths):
        return [ops.alloc2f(0, width) for _ in Xs], lambda dYs: [ops.alloc3f(n_layers, 0, width) for _ in Xs]
    X: Any = xp.concatenate(Xs, axis=1) if len(Xs) > 1 else Xs[0]
    if X.dtype not in (xp.float32, xp.float64):
        X = X.astype("float32")  # float16 storage
    layer_norm, Xn = bool(model.attrs["layer_norm"]), X
    if layer_norm:
        mean = X.mean(axis=-1, keepdims=True)
        inv_std = 1.0 / xp.sqrt(X.var(axis=-1, keepdims=True) + LAYER_NORM_EPS)
        Xn = (X - mean) * inv_std
    s = model.get_param("weights")
    gamma = model.get_param("gamma")
    w = softmax(s)
    mixed = xp.tensordot(w, Xn, axes=(0, 0))  # (N, 2P)
    Y = gamma[0] * mixed
    rate = float(model.attrs[DROPOUT_ATTR])
    mask: Optional[Any] = None
    if is_train and rate > 0.0:
        mask = ops.get_dropout_mask(Y.shape, rate)
        Y = Y * mask
    splits = numpy.cumsum(lengths)[:-1].tolist()
    Ys = xp.split(Y, splits, axis=0)

    def backprop(dYs: list[Floats2d]) -> list[Floats3d]:
        dY: Any = xp.concatenate(dYs, axis=0) if len(dYs) > 1 else dYs[0]
        if mask is not None:
            dY = dY * mask
        d_gamma = (dY * mixed).sum()
        d_w = gamma[0] * xp.tensordot(Xn, dY, axes=([1, 2], [0, 1]))  # (nL,)
        d_s = w * (d_w - (w * d_w).sum())
        l2 = float(model.attrs["l2"])
        if l2:
            d_s = d_s + 2.0 * l2 * s
        model.inc_grad("weights", d_s.astype(s.dtype))
        model.inc_grad("gamma", xp.asarray([d_gamma], dtype=gamma.dtype))
        dXn = (gamma[0] * w)[:, None, None] * dY[None]
        if layer_norm:
            dX = inv_std * (dXn - dXn.mean(axis=-1, keepdims=True) - Xn * (dXn * Xn).mean(axis=-1, keepdims=True))
        else:
            dX = dXn
        return xp.split(dX, splits, axis=1)

    return Ys, backprop


def init(model: Model, X: Optional[list[Floats3d]] = None, Y=None) -> None:
    for dim, axis in (("nL", 0), ("nO", 2)):
        if X and not model.has_dim(dim):
            model.set_dim(dim, int(X[0].shape[axis]))
    if not model.has_dim("nL"):
        raise ValueError(
            "spacy-elmo.ScalarMix.v1: n_layers is 0 (infer) but no sample was given to infer it from; "
            "the mix learns it from its upstream elmo pipe at nlp.initialize()"
        )
    model.set_param("weights", model.ops.alloc1f(model.get_dim("nL")))
    model.set_param("gamma", model.ops.asarray1f([1.0]))


@registry.architectures("spacy-elmo.ScalarMix.v1")
def ScalarMix_v1(
    n_layers: int = 0,
    dropout: float = 0.0,
    layer_norm: bool = False,
    l2: float = 0.0,
) -> Model[list[Floats3d], list[Floats2d]]:
    """A learned softmax-weighted mix of the biLM's layers, scaled by gamma.

    n_layers: L+1; 0 infers it from the biLM at initialization. dropout: on the mixed vectors in training.
    layer_norm: normalise each layer per token before mixing. l2: a penalty on the pre-softmax layer weights,
    pulling the mix toward the plain average.
    """
    if n_layers < 0 or dropout < 0 or dropout >= 1 or l2 < 0:
        raise ValueError(
            f"spacy-elmo.ScalarMix.v1: need n_layers >= 0, 0 <= dropout < 1, l2 >= 0; got "
            f"n_layers={n_layers}, dropout={dropout}, l2={l2}"
        )
    return Model(
        "elmo-scalar-mix",
        forward,
        init=init,
        dims={"nL": n_layers or None, "nO": None},
        params={"weights": None, "gamma": None},
        attrs={DROPOUT_ATTR: dropout, "layer_norm": layer_norm, "l2": l2},
    )
