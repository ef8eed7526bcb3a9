import gzip
import json
import os
from pathlib import Path

import numpy
import pytest

from fixture_paths import FIXTURES
from spacy_elmo import chars
from spacy_elmo.pretrain import corpus as corpus_module
from spacy_elmo.pretrain.corpus import (
    CorpusError,
    CorpusSettings,
    file_digests,
    prepare_corpus,
    tokenize_corpus,
)
from spacy_elmo.pretrain.vocab import UNK_ID, Vocab


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
    vocab = Vocab.from_counts(stream.types, stream.counts, max_size=100)
    to_vocab = stream.type_to_vocab(vocab)
    rare = [i for i, w in enumerate(stream.types) if w not in vocab.index]
    assert rare and numpy.all(to_vocab[rare] == UNK_ID)
    # the characters of a rare type are its own, not those of "<UNK>"
    expected = chars.tokens_to_ids([stream.types[rare[0]]])[0]
    assert numpy.array_equal(stream.type_chars()[rare[0]], expected)


def test_cache_is_the_contents_reused_and_invalidated_by_changes(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_text("One sentence here.\n", encoding="utf-8")
    first = prepare_corpus(path, CorpusSettings(), tmp_path / "cache")

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(corpus_module, "_tokenize", no_tokenizing)
    again = prepare_corpus(path, CorpusSettings(), tmp_path / "cache")
    assert again.directory == first.directory
    # the entry is the content's: a file touched, or the same text under another name, reuses it
    os.utime(path, ns=(first.directory.stat().st_mtime_ns + 10**9,) * 2)
    copy = tmp_path / "copy.txt"
    copy.write_bytes(path.read_bytes())
    assert prepare_corpus(path, CorpusSettings(), tmp_path / "cache").directory == first.directory
    assert prepare_corpus(copy, CorpusSettings(), tmp_path / "cache").directory == first.directory
    monkeypatch.undo()
    # other settings or a modified file: a new entry
    assert prepare_corpus(path, CorpusSettings(max_tokens=2), tmp_path / "cache").directory != first.directory
    path.write_text("Another sentence now.\n", encoding="utf-8")
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


@pytest.mark.parametrize("fmt", ["text", "jsonl", "tokenized", "bilm-tf"])
def test_a_corpus_that_is_not_utf8_is_refused_naming_line_and_byte(tmp_path, fmt):
    """Strict as `embed` is, with the same error: never U+FFFD tokens that the biLM would learn."""
    path = tmp_path / ("latin.jsonl" if fmt == "jsonl" else "latin.txt")
    lines = (
        ['{"text": "A first line."}', '{"text": "Un caf\xe9."}'] if fmt == "jsonl" else ["A first line.", "Un caf\xe9."]
    )
    path.write_bytes("\n".join(lines).encode("latin-1") + b"\n")
    offset = len(lines[0]) + 1 + lines[1].index("\xe9")
    with pytest.raises(
        CorpusError, match=rf"{path.name}, line 2, byte {offset}: not valid UTF-8 \(invalid continuation"
    ):
        prepare_corpus(path, CorpusSettings(format=fmt), tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir()), "no cache entry is written"
    wide = tmp_path / "wide.txt"
    wide.write_bytes("A line.\n".encode("utf-16"))
    with pytest.raises(
        CorpusError, match=r"wide.txt, line 1, byte 0: starts with a UTF-16 \(little-endian\) byte-order"
    ):
        prepare_corpus(wide, CorpusSettings(format="text" if fmt == "jsonl" else fmt), tmp_path / "cache")


def test_a_utf8_byte_order_mark_is_no_part_of_the_first_word(tmp_path):
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text("Hello world.\n", encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert words_of(prepare_corpus(marked, CorpusSettings(), tmp_path / "c")) == words_of(
        prepare_corpus(plain, CorpusSettings(), tmp_path / "c")
    )


def test_evaluate_refuses_text_that_is_not_utf8_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from spacy_elmo.cli import elmo_cli

    path = tmp_path / "heldout.txt"
    path.write_bytes("A line.\nUn caf\xe9.\n".encode("latin-1"))
    result = CliRunner().invoke(elmo_cli, ["evaluate", "en_elmo_small", str(path)])
    assert result.exit_code == 1 and (result.exception is None or isinstance(result.exception, SystemExit))
    assert result.output.strip().splitlines() == [
        f"error: {path}, line 2, byte 14: not valid UTF-8 (invalid continuation byte: 2e after e9); convert it to UTF-8"
    ]


@pytest.mark.parametrize("fmt", ["text", "tokenized", "bilm-tf"])
def test_utf16_without_a_byte_order_mark_is_refused_not_learned(tmp_path, fmt):
    """ASCII in UTF-16 decodes as UTF-8 with a NUL after each character: it was tokenized as words."""
    path = tmp_path / "wide.txt"
    path.write_bytes("A first line .\nA second one .\n".encode("utf-16-le"))
    with pytest.raises(CorpusError) as error:
        prepare_corpus(path, CorpusSettings(format=fmt), tmp_path / "cache")
    assert str(error.value) == (
        f"{path}, line 1, byte 1: a NUL (U+0000), which text never holds: it looks like UTF-16 or UTF-32 without a "
        "byte-order mark (its NUL bytes fall where UTF-16-LE puts them); convert it to UTF-8 "
        "(iconv -f UTF-16LE -t UTF-8)"
    )
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir()), "no cache entry is written"


def test_a_pipe_is_tokenized_as_its_file_is_but_not_pretrained_on(tmp_path):
    """`evaluate` reads a pipe once (`tokenize_corpus`), and must keep doing so; pretraining and the cache
    read their data again (digests first, then tokens), so a pipe was empty by then."""
    path = tmp_path / "a.txt"
    path.write_text("The cat sat.  It was\nhappy.\n\nA dog barked!\n", encoding="utf-8")
    expected = words_of(prepare_corpus(path, CorpusSettings(), tmp_path / "file-cache"))
    for check in ("tokens", "digests"):
        read, write = os.pipe()
        os.write(write, path.read_bytes())
        os.close(write)
        pipe = Path(f"/dev/fd/{read}")
        try:
            if check == "tokens":
                assert words_of(tokenize_corpus(pipe, CorpusSettings(), tmp_path / "pipe-tokens")) == expected
            else:
                with pytest.raises(CorpusError, match=rf"{pipe}: the corpus file is a pipe/FIFO: pretraining needs"):
                    file_digests([path, pipe])
        finally:
            os.close(read)
