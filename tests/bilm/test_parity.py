"""The biLM against the bilm-tf/AllenNLP reference activations, at numpy.allclose(atol=1e-6)."""

import json

import h5py
import numpy
import pytest

from spacy_elmo.bilm.runner import BiLMRunner

ATOL = 1e-6


@pytest.fixture(scope="module")
def sentences(fixture_dir):
    data = json.loads((fixture_dir / "sentences.json").read_text())
    return [[sentence.split() for sentence in group] for group in data]


@pytest.fixture(scope="module")
def expected_top(fixture_dir):
    """expected[k][i]: (2, n_tokens, P) = (forward, backward) top layer of sentence i of group k."""
    out = []
    for k in range(3):
        with h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") as handle:
            out.append([handle[str(i)][...] for i in range(len(handle))])
    return out


def as_forward_backward(layers: numpy.ndarray) -> numpy.ndarray:
    top = layers[-1]
    P = top.shape[-1] // 2
    return numpy.stack([top[:, :P], top[:, P:]])


def test_stateful_reproduces_all_30_sentences(reference_bilm, sentences, expected_top):
    # One stateful biLM, 10 batches of 3: batch i = [s[0][i], s[1][i], s[2][i]], as the reference ran.
    embedder = BiLMRunner(reference_bilm, stateful=True)
    n_checked = 0
    for i in range(10):
        batch = [sentences[k][i] for k in range(3)]
        for k, layers in enumerate(embedder.embed_batch(batch)):
            assert layers.shape == (3, len(batch[k]), 32)
            numpy.testing.assert_allclose(as_forward_backward(layers), expected_top[k][i], atol=ATOL, rtol=1e-5)
            n_checked += 1
    assert n_checked == 30


def test_stateless_reproduces_batch_0(reference_bilm, sentences, expected_top):
    embedder = BiLMRunner(reference_bilm)
    for k, layers in enumerate(embedder.embed_sentences([sentences[k][0] for k in range(3)])):
        numpy.testing.assert_allclose(as_forward_backward(layers), expected_top[k][0], atol=ATOL, rtol=1e-5)


def test_stateless_differs_from_reference_after_batch_0(reference_bilm, sentences, expected_top):
    # The reference carried state into batch 1; a stateless biLM must not (that is the point of it).
    layers = BiLMRunner(reference_bilm).embed_sentences([sentences[0][1]])[0]
    assert not numpy.allclose(as_forward_backward(layers), expected_top[0][1], atol=ATOL)


def test_token_layer_reproduces_token_embeddings(reference_bilm, fixture_dir):
    tokens = (fixture_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    with h5py.File(fixture_dir / "elmo_token_embeddings.hdf5", "r") as handle:
        expected = handle["embedding"][...]
    assert len(tokens) == expected.shape[0]
    got = BiLMRunner(reference_bilm).embed_tokens(tokens)
    numpy.testing.assert_allclose(got, expected, atol=ATOL, rtol=1e-5)


def test_layer_0_is_token_layer_twice(reference_bilm, sentences):
    sentence = sentences[1][2]
    layers = BiLMRunner(reference_bilm).embed_sentences([sentence])[0]
    tokens = BiLMRunner(reference_bilm).embed_tokens(sentence)
    numpy.testing.assert_allclose(layers[0], numpy.concatenate([tokens, tokens], axis=1), atol=ATOL)
