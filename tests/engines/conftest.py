"""What the engine tests compare with: 200 texts (and the bad rows) embedded by the pipe and by `embed`."""

import h5py
import numpy
import pyarrow
import pyarrow.parquet
import pytest
import spacy

from fixture_paths import ELMO_FIXTURE
from spacy_elmo.embed import EmbedSettings, embed_file

WORDS = "the bank raised its rates , and river banks flooded again after rain ; who knew ?".split()
TEXTS = [
    f"Text {i} says: " + " ".join(WORDS[(7 * i + j) % len(WORDS)] for j in range(i % 41)) + "." for i in range(200)
]
LONG_TEXT = " ".join(f"w{i % 97}" for i in range(50_000))  # 50k tokens: windowed, as the pipe windows it
BAD_ROWS = {"empty": "", "50k tokens": LONG_TEXT}
NUL_TEXT = "a NUL\x00 in it"  # what UTF-16 read as UTF-8 looks like: embed refuses it, and so do the engines
NUL_REFUSED = r"a NUL \(U\+0000\), which text never holds"  # embed's words, the engines' too


def settings(layers: str = "all") -> EmbedSettings:
    """The pipe's tokenizer, so that a text has the same tokens, hence vectors, in the pipe and the engines."""
    return EmbedSettings(model=str(ELMO_FIXTURE), layers=layers, tokenizer="en", n_threads=1)


@pytest.fixture(scope="session")
def pipe_layers():
    """Every text's and bad row's `doc._.elmo_layers` from `nlp.pipe`, by text."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.BiLM.v1", "path": str(ELMO_FIXTURE)}})
    texts = [*TEXTS, *BAD_ROWS.values()]
    return {text: doc._.elmo_layers for text, doc in zip(texts, nlp.pipe(texts))}


@pytest.fixture(scope="session")
def embed_layers(tmp_path_factory):
    """The 200 texts' datasets in `embed`'s HDF5 output, by text."""
    directory = tmp_path_factory.mktemp("embed")
    (directory / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    embed_file(directory / "texts.txt", directory / "out.hdf5", settings())
    with h5py.File(directory / "out.hdf5", "r") as handle:
        return {text: handle[str(i)][...] for i, text in enumerate(TEXTS)}


def read_back(path, layers_first: bool) -> dict:
    """{id: (tokens, vectors)} of an engine's Parquet output, read with pyarrow and numpy alone: every float
    of the `elmo` column in row order (Spark's nested arrays and the fixed-size lists alike), each row's
    shape (3, n, 32) layer first or (n, 32) from its tokens."""
    table = pyarrow.parquet.read_table(path)
    values = table.column("elmo").combine_chunks()
    while not pyarrow.types.is_floating(values.type):
        values = values.flatten()
    values = values.to_numpy()
    out, start = {}, 0
    for i, tokens in zip(table.column("id").to_pylist(), table.column("tokens").to_pylist()):
        shape = (3, len(tokens), 32) if layers_first else (len(tokens), 32)
        end = start + int(numpy.prod(shape))
        out[i], start = (tokens, values[start:end].reshape(shape)), end
    return out


def assert_as_pipe_and_embed(rows: dict, texts: list, pipe_layers: dict, embed_layers: dict) -> None:
    """Every row has the pipe's tokens and layers, and `embed`'s for the texts it embedded, bit for bit."""
    assert sorted(rows) == list(range(len(texts)))
    for i, text in enumerate(texts):
        tokens, vectors = rows[i]
        expected = pipe_layers[text]
        assert len(tokens) == expected.shape[1] and numpy.array_equal(vectors, expected), i
        if text in embed_layers:
            assert numpy.array_equal(vectors, embed_layers[text]), i


def assert_embed_refuses_nul(tmp_path) -> None:
    """`embed` refuses a line holding NUL_TEXT, with the words the engines use for such a row."""
    path = tmp_path / "nul.txt"
    path.write_text(f"fine\n{NUL_TEXT}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"nul.txt, line 2, byte 10: {NUL_REFUSED}"):
        embed_file(path, tmp_path / "nul.hdf5", settings())
