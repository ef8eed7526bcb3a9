"""`ArrowEmbedder`, the batch function the engines run: texts or tokens in, the pipe's vectors out as the
documented columns, whatever the batch's make-up; bad input refused naming the column and row."""

import numpy
import pyarrow
import pytest
import spacy

from fixture_paths import ELMO_FIXTURE
from spacy_elmo.embed import EmbedSettings
from spacy_elmo.embed.arrow import ArrowEmbedder
from spacy_elmo.embed.columns import column_arrays

TEXTS = ["The cat sat on the mat.", "", "Ünïcödé 日本語 text!", " ".join(f"w{i % 50}" for i in range(300))]


@pytest.fixture(scope="module")
def pipe_docs():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.BiLM.v1", "path": str(ELMO_FIXTURE)}})
    return list(nlp.pipe(TEXTS))


@pytest.fixture(scope="module")
def embedders():
    return {
        layers: ArrowEmbedder(EmbedSettings(model=str(ELMO_FIXTURE), layers=layers, tokenizer="en"))
        for layers in ("all", "top", "average")
    }


@pytest.mark.parametrize("layers", ["all", "top", "average"])
def test_texts_get_the_pipes_tokens_and_vectors_bit_for_bit(embedders, pipe_docs, layers):
    batch = pyarrow.record_batch({"id": [10, 11, 12, 13], "text": TEXTS})
    out = embedders[layers](batch)
    assert out.schema.names == ["id", "text", "tokens", "elmo"] and out.column("id").to_pylist() == [10, 11, 12, 13]
    assert out.column("tokens").to_pylist() == [[t.text for t in doc] for doc in pipe_docs]
    expected_type = pyarrow.list_(pyarrow.list_(pyarrow.float32(), 32))
    assert out.schema.field("elmo").type == (pyarrow.list_(expected_type, 3) if layers == "all" else expected_type)
    for array, doc in zip(column_arrays(out.column("elmo")), pipe_docs):
        expected = {"all": doc._.elmo_layers, "top": doc._.elmo_layers[-1]}.get(layers)
        if expected is None:
            expected = doc._.elmo_layers.mean(axis=0)  # what `embed --layers average` stores
        assert array.dtype == numpy.float32 and array.shape == expected.shape
        assert numpy.array_equal(array, expected)


def test_a_texts_vectors_do_not_depend_on_its_batch(embedders):
    """One batch or slices of it, a table of several chunks or a record batch: the same values."""
    embedder = embedders["all"]
    whole = column_arrays(embedder(pyarrow.table({"text": TEXTS})).column("elmo"))
    chunked = pyarrow.Table.from_batches([pyarrow.record_batch({"text": [text]}) for text in TEXTS])
    pieces = column_arrays(embedder(chunked).column("elmo"))
    sliced = [
        column_arrays(embedder(pyarrow.record_batch({"text": TEXTS}).slice(i, 1)).column("elmo"))[0] for i in (3, 0)
    ]
    assert all(numpy.array_equal(a, b) for a, b in zip(whole, pieces))
    assert numpy.array_equal(sliced[0], whole[3]) and numpy.array_equal(sliced[1], whole[0])


def test_pretokenized_rows_give_the_same_vectors_as_their_text(fixture_dir):
    by_text = ArrowEmbedder(EmbedSettings(model=str(fixture_dir), layers="top"))
    by_tokens = ArrowEmbedder(EmbedSettings(model=str(fixture_dir), layers="top"), tokens_column="words")
    texts = ["a b c", "", "the bank raised its rates"]
    from_text = by_text(pyarrow.record_batch({"text": texts}))
    from_tokens = by_tokens(pyarrow.record_batch({"words": [t.split() for t in texts]}))
    assert from_tokens.schema.names == ["words", "elmo"]
    for a, b in zip(column_arrays(from_text.column("elmo")), column_arrays(from_tokens.column("elmo"))):
        assert numpy.array_equal(a, b)


def test_an_empty_batch_gets_typed_empty_columns(embedders):
    out = embedders["all"](pyarrow.record_batch({"text": pyarrow.array([], pyarrow.string())}))
    assert out.num_rows == 0 and out.schema.field("elmo").type == embedders["all"].output_columns()[1][1]


def test_bad_input_is_refused_naming_the_column_and_row(embedders, fixture_dir):
    embedder = embedders["top"]
    with pytest.raises(ValueError, match=r"column 'text', row 1 of this batch: null, which cannot be embedded"):
        embedder(pyarrow.record_batch({"text": ["fine", None]}))
    with pytest.raises(ValueError, match=r"the input has no column 'text' \(columns: body\)"):
        embedder(pyarrow.record_batch({"body": ["x"]}))
    with pytest.raises(ValueError, match=r"column 'text' holds int64, not strings"):
        embedder(pyarrow.record_batch({"text": [1]}))
    with pytest.raises(ValueError, match=r"the input already has a column 'elmo', which the embedder adds"):
        embedder(pyarrow.record_batch({"text": ["x"], "elmo": [1]}))
    tokens = ArrowEmbedder(EmbedSettings(model=str(fixture_dir), layers="top"), tokens_column="words")
    with pytest.raises(ValueError, match=r"column 'words' holds string, not lists of strings \(tokens\)"):
        tokens(pyarrow.record_batch({"words": ["a b"]}))
    with pytest.raises(ValueError, match=r"column 'words', row 0 of this batch: null"):
        tokens(pyarrow.record_batch({"words": [["a", None]]}))
    with pytest.raises(ValueError, match=r"--dtype float16 is for HDF5 output; an Arrow table stores float32"):
        ArrowEmbedder(EmbedSettings(model=str(fixture_dir), dtype="float16"))
