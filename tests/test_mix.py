"""The one layer mix: named mixes, given weights, float16 storage, softmax, embed's reductions."""

import numpy
import pytest

from spacy_elmo.mix import mix_layers, named_mix_weights, reduce_layers, softmax

LAYERS = numpy.random.default_rng(0).normal(size=(3, 5, 4)).astype("float32")


def test_named_mixes():
    numpy.testing.assert_array_equal(named_mix_weights("average", 3), numpy.full(3, 1 / 3, dtype="float32"))
    numpy.testing.assert_array_equal(named_mix_weights("top", 3), numpy.array([0, 0, 1], dtype="float32"))
    numpy.testing.assert_array_equal(named_mix_weights([0.2, 0.3, 0.5], 3), numpy.array([0.2, 0.3, 0.5], "float32"))
    with pytest.raises(ValueError, match="elmo: default_mix has 2 weights but the biLM has 3 layers"):
        named_mix_weights([0.5, 0.5], 3)


def test_mix_is_the_weighted_sum_and_keeps_the_storage_dtype():
    weights = numpy.array([0.2, 0.3, 0.5], dtype="float32")
    expected = (weights[:, None, None] * LAYERS).sum(axis=0)
    numpy.testing.assert_allclose(mix_layers(LAYERS, weights), expected, rtol=1e-6)
    half = mix_layers(LAYERS.astype("float16"), weights)
    assert half.dtype == numpy.float16
    numpy.testing.assert_allclose(half, expected, atol=2e-3)


def test_softmax_of_equal_scores_is_the_average_and_is_shift_invariant():
    numpy.testing.assert_allclose(softmax(numpy.zeros(4, dtype="float32")), numpy.full(4, 0.25), rtol=1e-7)
    s = numpy.array([1.0, 2.0, 3.0])
    numpy.testing.assert_allclose(softmax(s), softmax(s + 1000.0), rtol=1e-12)
    assert softmax(s).sum() == pytest.approx(1.0)


def test_embed_reductions():
    assert reduce_layers(LAYERS, "all") is LAYERS
    numpy.testing.assert_array_equal(reduce_layers(LAYERS, "top"), LAYERS[-1])
    numpy.testing.assert_array_equal(reduce_layers(LAYERS, "average"), LAYERS.mean(axis=0))
    with pytest.raises(ValueError, match="layers must be one of"):
        reduce_layers(LAYERS, "bottom")
