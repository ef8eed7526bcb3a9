import gzip
import json
import os

import numpy
import pytest

from fixture_paths import FIXTURES
from spacy_elmo import chars
from spacy_elmo.pretrain import corpus as corpus_module
from spacy_elmo.pretrain.corpus import CorpusError, CorpusSettings, build_vocab, prepare_corpus
from spacy_elmo.pretrain.vocab import UNK_ID


def words_of(stream):
    return [stream.types[i] for i in stream.tokens]


def test_text_paragraphs_are_joined_tokenized_and_framed(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("The cat sat.  It was\nhappy.\n\n\nA dog barked!\n", encoding="utf-8")
    stream = prepare_corpus(path, CorpusSettings(), tmp_path / "cache")
    assert words_of(stream) == [
        "<S>",
        "The",
        "cat",
        "sat",
        ".",
        "</S>",
        "<S>",
        "It",
        "was",
        "happy",
        ".",
        "</S>",
        "<S>",
        "A",
        "dog",
        "barked",
        "!",
        "</S>",
    ]
    assert stream.n_sentences == 3 and stream.n_words == 12
    assert stream.tokens.dtype == numpy.int32
    assert isinstance(stream.tokens, numpy.memmap)


def test_gzip_and_jsonl_inputs(tmp_path):
    gz = tmp_path / "b.txt.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as handle:
        handle.write("Hello world.\n")
    assert words_of(prepare_corpus(gz, CorpusSettings(), tmp_path / "c")) == ["<S>", "Hello", "world", ".", "</S>"]
    jl = tmp_path / "c.jsonl"
    jl.write_text(json.dumps({"body": "Hi there."}) + "\n", encoding="utf-8")
    stream = prepare_corpus(jl, CorpusSettings(format="jsonl", text_field="body"), tmp_path / "c")
    assert words_of(stream) == ["<S>", "Hi", "there", ".", "</S>"]
    with pytest.raises(CorpusError, match="line 1: no 'text' field"):
        prepare_corpus(jl, CorpusSettings(format="jsonl"), tmp_path / "c")


def test_bilm_tf_format_keeps_one_sentence_a_line(tmp_path):
    data = FIXTURES / "bilm-tf-train" / "data.txt"
    stream = prepare_corpus(data, CorpusSettings(format="bilm-tf"), tmp_path)
    lines = [line.split() for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]
    expected = [w for line in lines for w in ["<S>", *line, "</S>"]]
    assert words_of(stream) == expected


def test_types_are_frequency_sorted_and_unknown_words_keep_their_characters(tmp_path, sample_train):
    stream = prepare_corpus(sample_train, CorpusSettings(max_tokens=5000), tmp_path)
    assert stream.types[:2] == ["<S>", "</S>"]
    assert numpy.all(numpy.diff(stream.counts[2:]) <= 0)
    vocab = build_vocab(stream, max_size=100)
    to_vocab = stream.type_to_vocab(vocab)
    rare = [i for i, w in enumerate(stream.types) if w not in vocab.index]
    assert rare and numpy.all(to_vocab[rare] == UNK_ID)
    # the characters of a rare type are its own, not those of "<UNK>"
    expected = chars.tokens_to_ids([stream.types[rare[0]]])[0]
    assert numpy.array_equal(stream.type_chars()[rare[0]], expected)


def test_cache_is_reused_and_invalidated_by_changes(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_text("One sentence here.\n", encoding="utf-8")
    first = prepare_corpus(path, CorpusSettings(), tmp_path / "cache")

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(corpus_module, "_tokenize", no_tokenizing)
    again = prepare_corpus(path, CorpusSettings(), tmp_path / "cache")
    assert again.directory == first.directory
    monkeypatch.undo()
    # other settings or a modified file: a new entry
    assert prepare_corpus(path, CorpusSettings(max_tokens=2), tmp_path / "cache").directory != first.directory
    path.write_text("Another sentence now.\n", encoding="utf-8")
    os.utime(path, ns=(first.directory.stat().st_mtime_ns + 10**9,) * 2)
    changed = prepare_corpus(path, CorpusSettings(), tmp_path / "cache")
    assert changed.directory != first.directory
    assert "Another" in changed.types
    leftovers = [p.name for p in (tmp_path / "cache").iterdir() if ".tmp" in p.name]
    assert leftovers == []


def test_missing_inputs_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        prepare_corpus(tmp_path / "nope.txt", CorpusSettings(), tmp_path)
    with pytest.raises(CorpusError, match="corpus.format"):
        CorpusSettings(format="xml")


@pytest.mark.parametrize("name", ["tokens.npy", "types.msgpack", "chars.npy"])
def test_a_damaged_or_pickled_cache_file_is_named_with_how_to_rebuild(tmp_path, name):
    path = tmp_path / "text.txt"
    path.write_text("A first sentence. And a second one.\n", encoding="utf-8")
    stream = prepare_corpus(path, CorpusSettings(), tmp_path / "cache")
    stream.type_chars()
    target = stream.directory / name
    if name.endswith(".npy"):  # a pickled object array: numpy refuses it, and so must the cache
        numpy.save(target, numpy.array([{"x": 1}], dtype=object), allow_pickle=True)
    else:
        target.write_bytes(b"\xc1 not msgpack")
    with pytest.raises(CorpusError) as error:
        prepare_corpus(path, CorpusSettings(), tmp_path / "cache").type_chars()
    message = str(error.value)
    assert message.startswith(f"{target}: not a readable corpus cache file")
    assert f"delete the cache entry {stream.directory}" in message
