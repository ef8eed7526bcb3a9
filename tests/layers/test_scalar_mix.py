"""The scalar mix: the paper's formula, its gradients (checked numerically), dropout, L2, layer norm."""

import numpy
import pytest
from thinc.api import NumpyOps, set_dropout_rate

from spacy_elmo.layers.scalar_mix import ScalarMix_v1, mix_weights

OPS = NumpyOps()


def make_inputs(seed=0, lengths=(3, 0, 5), n_layers=3, width=4):
    rng = numpy.random.default_rng(seed)
    return [rng.normal(size=(n_layers, n, width)).astype("float32") for n in lengths]


def initialized(**kwargs):
    mix = ScalarMix_v1(**kwargs)
    mix.initialize(X=make_inputs())
    return mix


def test_starts_as_the_plain_average():
    mix = initialized()
    Xs = make_inputs()
    Ys = mix.predict(Xs)
    for X, Y in zip(Xs, Ys):
        numpy.testing.assert_allclose(Y, X.mean(axis=0), atol=1e-6)
    numpy.testing.assert_allclose(mix_weights(mix), [1 / 3] * 3, atol=1e-7)


def test_formula_gamma_times_softmax_mix():
    mix = initialized()
    s = numpy.asarray([0.5, -1.0, 2.0], dtype="float32")
    mix.set_param("weights", s)
    mix.set_param("gamma", numpy.asarray([1.7], dtype="float32"))
    w = numpy.exp(s) / numpy.exp(s).sum()
    for X, Y in zip(make_inputs(), mix.predict(make_inputs())):
        numpy.testing.assert_allclose(Y, 1.7 * numpy.tensordot(w, X, axes=(0, 0)), atol=1e-5)


def test_n_layers_mismatch_is_a_clear_error():
    mix = initialized()
    with pytest.raises(ValueError, match="got 4 layers"):
        mix.predict(make_inputs(n_layers=4))


def loss_and_grads(mix, Xs, dYs):
    Ys, backprop = mix.begin_update(Xs)
    loss = sum(float((Y * dY).sum()) for Y, dY in zip(Ys, dYs))
    mix.set_grad("weights", numpy.zeros_like(mix.get_param("weights")))
    mix.set_grad("gamma", numpy.zeros_like(mix.get_param("gamma")))
    dXs = backprop(dYs)
    return loss, dXs, mix.get_grad("weights").copy(), mix.get_grad("gamma").copy()


@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_gradients_match_finite_differences(layer_norm, l2):
    mix = initialized(layer_norm=layer_norm, l2=l2)
    mix.set_param("weights", numpy.asarray([0.3, -0.2, 0.1], dtype="float32"))
    mix.set_param("gamma", numpy.asarray([1.3], dtype="float32"))
    Xs = [X.astype("float64") for X in make_inputs(1)]
    dYs = [numpy.random.default_rng(2).normal(size=(X.shape[1], X.shape[2])) for X in Xs]
    mix.set_param("weights", mix.get_param("weights").astype("float64"))
    mix.set_param("gamma", mix.get_param("gamma").astype("float64"))
    _, dXs, d_s, d_gamma = loss_and_grads(mix, Xs, dYs)
    eps = 1e-6

    def loss_at(param, index, delta):
        value = mix.get_param(param).copy()
        value[index] += delta
        saved = mix.get_param(param).copy()
        mix.set_param(param, value)
        Ys = mix.predict(Xs)
        mix.set_param(param, saved)
        total = sum(float((Y * dY).sum()) for Y, dY in zip(Ys, dYs))
        return total + (l2 * float((value**2).sum()) if param == "weights" else 0.0)

    for j in range(3):
        numeric = (loss_at("weights", j, eps) - loss_at("weights", j, -eps)) / (2 * eps)
        assert d_s[j] == pytest.approx(numeric, rel=1e-4, abs=1e-6)
    numeric = (loss_at("gamma", 0, eps) - loss_at("gamma", 0, -eps)) / (2 * eps)
    assert d_gamma[0] == pytest.approx(numeric, rel=1e-4, abs=1e-6)
    X = Xs[2]
    for index in [(0, 1, 2), (2, 4, 0), (1, 0, 3)]:
        plus, minus = [x.copy() for x in Xs], [x.copy() for x in Xs]
        plus[2][index] += eps
        minus[2][index] -= eps
        f = lambda inputs: sum(float((Y * dY).sum()) for Y, dY in zip(mix.predict(inputs), dYs))
        numeric = (f(plus) - f(minus)) / (2 * eps)
        assert dXs[2][index] == pytest.approx(numeric, rel=1e-4, abs=1e-6)
    assert X.shape == dXs[2].shape and dXs[1].shape == (3, 0, 4)


def test_dropout_only_while_training():
    mix = initialized(dropout=0.5)
    Xs = make_inputs(lengths=(3, 0, 500))  # 2,000 values: the share of zeros is 0.5 +- 0.011 (1 sd)
    numpy.testing.assert_allclose(mix.predict(Xs)[0], Xs[0].mean(axis=0), atol=1e-6)
    Y_train, _ = mix.begin_update(Xs)
    zeros = (Y_train[2] == 0).mean()
    assert 0.4 < zeros < 0.6  # 9 sd either side: no seed fails it by chance
    numpy.testing.assert_allclose(Y_train[2][Y_train[2] != 0], Xs[2].mean(axis=0)[Y_train[2] != 0] * 2, atol=1e-6)


def test_training_dropout_setting_does_not_override_the_configured_rate():
    mix = initialized(dropout=0.0)
    set_dropout_rate(mix, 0.9)
    Y_train, _ = mix.begin_update(make_inputs())
    assert (Y_train[2] != 0).all()


def test_layer_norm_normalises_each_token_layer():
    mix = initialized(layer_norm=True)
    Xs = [X * 100 + 7 for X in make_inputs()]
    Y = mix.predict(Xs)[0]
    X = Xs[0]
    normed = (X - X.mean(-1, keepdims=True)) / X.std(-1, keepdims=True)
    numpy.testing.assert_allclose(Y, normed.mean(axis=0), atol=1e-4)


def test_bad_arguments():
    with pytest.raises(ValueError):
        ScalarMix_v1(dropout=1.0)
    with pytest.raises(ValueError):
        ScalarMix_v1(l2=-1)
