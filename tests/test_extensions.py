"""The extensions the `elmo` pipe fills: what reading them says when there is nothing to read, and when the
.vector/.similarity hooks are on."""

import numpy
import pytest
import spacy
from spacy.tokens import Doc

from fixture_paths import ELMO_FIXTURE
from spacy_elmo.extensions import ElmoNotSetError


def elmo_nlp(**config) -> spacy.Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(ELMO_FIXTURE)}, **config})
    return nlp


@pytest.fixture(scope="module")
def nlp() -> spacy.Language:
    return elmo_nlp()


def test_reading_elmo_before_the_pipe_ran_says_so(nlp):
    for doc in (nlp.make_doc("Not embedded yet ."), Doc(nlp.vocab, words=["Made", "by", "hand"])):
        for obj, where in ((doc, "doc"), (doc[0:2], "span"), (doc[1], "token")):
            with pytest.raises(ElmoNotSetError, match=rf"^{where}\._\.elmo: the `elmo` pipe has not run on this doc"):
                obj._.get("elmo")
        # an AttributeError, so the usual optional-attribute idioms work
        assert getattr(doc._, "elmo", None) is None and not hasattr(doc[0]._, "elmo")
        assert doc._.elmo_layers is None


def test_a_doc_from_a_docbin_without_user_data_says_so(nlp):
    from spacy.tokens import DocBin

    kept = DocBin(docs=[nlp("Embedded once .")], store_user_data=False)
    restored = next(iter(kept.get_docs(nlp.vocab)))
    with pytest.raises(ElmoNotSetError, match="DocBin saved without user data"):
        restored._.get("elmo")


def test_the_vector_hooks_are_on_by_default_in_a_pipeline_without_static_vectors(nlp):
    doc = nlp("A cat sat . A dog ran .")
    assert doc[1].vector.shape == (32,)
    numpy.testing.assert_allclose(doc[1].vector, doc._.elmo[1], atol=1e-6)
    numpy.testing.assert_allclose(doc.vector, doc._.elmo.mean(axis=0), atol=1e-6)
    assert 0.0 < doc[1].similarity(doc[5]) < 1.0


def test_the_vector_hooks_stay_off_when_the_vocab_has_vectors_or_when_told():
    with_vectors = elmo_nlp()
    with_vectors.vocab.set_vector("cat", numpy.ones((4,), dtype="float32"))
    doc = with_vectors("A cat sat .")
    assert doc[1].vector.shape == (4,)  # spaCy's static vector, not ELMo's
    off = elmo_nlp(set_vector_hooks=False)("A cat sat .")
    assert off[1].vector.shape == (0,) and "vector" not in off.user_token_hooks
    assert "vector" not in elmo_nlp(store="none")("A cat sat .").user_token_hooks


def test_a_bad_vector_hooks_setting_is_refused():
    with pytest.raises(ValueError, match=r"set_vector_hooks='sometimes'; expected true, false or \"auto\""):
        elmo_nlp(set_vector_hooks="sometimes")
    with pytest.raises(ValueError, match="set_vector_hooks needs vectors on the doc"):
        elmo_nlp(set_vector_hooks=True, store="none")
