"""Property-based tests over arbitrary Unicode and token shapes: never an exception, shapes always
right, results independent of batching."""

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spacy_elmo import chars
from spacy_elmo.bilm.runner import BiLMRunner

# any code point, lone surrogates included; tokens from empty to well past the 48-byte limit
tokens = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), min_size=0, max_size=80)
sentences = st.lists(st.lists(tokens, min_size=0, max_size=12), min_size=0, max_size=6)


@settings(max_examples=200, deadline=None)
@given(sentences)
def test_char_ids_shape_range_and_layout(batch):
    ids = chars.batch_to_ids(batch)
    longest = max((len(s) for s in batch), default=-2) + 2
    assert ids.shape == (len(batch), max(longest, 0), chars.MAX_CHARACTERS_PER_TOKEN)
    assert ids.min(initial=0) >= 0 and ids.max(initial=0) < chars.N_CHARACTERS
    for row, sentence in enumerate(batch):
        real = ids[row].any(-1)
        assert real.sum() == len(sentence) + 2 and real[: len(sentence) + 2].all()
        for col, token in enumerate(sentence):
            row_ids = ids[row, col + 1]
            assert (row_ids == chars.tokens_to_ids([token])[0]).all()
            assert row_ids[0] == chars.BOW_CHAR + chars.ID_SHIFT
            assert (row_ids == chars.EOW_CHAR + chars.ID_SHIFT).sum() == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sentences)
def test_embedder_shapes_and_batch_independence(make_bilm, batch):
    bilm = make_bilm(seed=3)
    together = BiLMRunner(bilm, token_budget=10_000).embed_sentences(batch)
    assert len(together) == len(batch)
    for sentence, layers in zip(batch, together):
        assert layers.shape == (bilm.options.n_layers + 1, len(sentence), bilm.options.output_dim)
        assert numpy.isfinite(layers).all()
        alone = BiLMRunner(bilm).embed_batch([sentence])[0]
        numpy.testing.assert_allclose(alone, layers, atol=1e-6, rtol=0)


# spaCy's own tokenizer refuses lone surrogates (UTF-8 cannot encode them) before any pipe runs; the
# character-id tests above keep them
texts = st.text(
    alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=("Cs",)),
    min_size=0,
    max_size=120,
)


@pytest.fixture(scope="module")
def elmo_nlp(fixture_dir):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(fixture_dir)}})
    return nlp


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(texts, min_size=1, max_size=5))
def test_component_on_arbitrary_text(elmo_nlp, batch):
    docs = list(elmo_nlp.pipe(batch))
    for text, doc in zip(batch, docs):
        layers = doc._.elmo_layers
        assert layers.shape == (3, len(doc), 32)
        assert numpy.isfinite(layers).all()
        assert doc._.elmo.shape == (len(doc), 32)
        alone = elmo_nlp(text)
        numpy.testing.assert_allclose(alone._.elmo_layers, layers, atol=1e-6, rtol=0)
