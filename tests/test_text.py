"""Reading text: gzipped or plain files, JSONL records with errors that name the line, one format rule."""

import gzip

import pytest

from spacy_elmo.text import detect_format, make_tokenizer, open_text, texts_from_jsonl


@pytest.mark.parametrize(
    "name,expected",
    [
        ("a.txt", "text"),
        ("a.txt.gz", "text"),
        ("a", "text"),
        ("a.jsonl", "jsonl"),
        ("a.jsonl.gz", "jsonl"),
        ("a.json", "jsonl"),
    ],
)
def test_one_rule_tells_jsonl_from_text(name, expected):
    assert detect_format(name) == expected


def test_gzipped_and_plain_files_read_the_same(tmp_path):
    text = "Émile ate 😀.\nsecond line\n"
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    with gzip.open(tmp_path / "a.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write(text)
    with open_text(tmp_path / "a.txt") as plain, open_text(tmp_path / "a.txt.gz") as zipped:
        assert plain.read() == zipped.read() == text


def test_jsonl_records_and_errors_name_the_line_and_the_option():
    lines = ['{"text": "one"}', "", '{"text": "two", "id": 3}']
    assert list(texts_from_jsonl(lines, "in.jsonl", "text", option="--text-field")) == ["one", "two"]
    with pytest.raises(ValueError, match=r"in.jsonl, line 2: not valid JSON"):
        list(texts_from_jsonl(['{"text": "a"}', "{oops"], "in.jsonl", "text", option="--text-field"))
    with pytest.raises(ValueError, match=r"in.jsonl, line 1: no 'body' field \(set --text-field\)"):
        list(texts_from_jsonl(['{"text": "a"}'], "in.jsonl", "body", option="--text-field"))
    with pytest.raises(ValueError, match=r"line 1: field 'text' is not a string"):
        list(texts_from_jsonl(['{"text": 3}'], "in.jsonl", "text", option="--text-field"))


def test_the_tokenizer_splits_words_and_sentences_like_spacy():
    tokenizer = make_tokenizer("en")
    assert tokenizer.words("Don't  stop.") == ["Do", "n't", "stop", "."]
    doc = next(tokenizer.pipe(["One sentence. Another one."]))
    assert [s.text for s in doc.sents] == ["One sentence.", "Another one."]
    with pytest.raises(ValueError, match="--tokenizer is 'xx-nope', which spaCy does not know"):
        make_tokenizer("xx-nope", option="--tokenizer")
