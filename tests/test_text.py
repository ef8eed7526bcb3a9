"""Reading text: gzipped or plain files, JSONL records with errors that name the line, one format rule."""

import codecs
import gzip

import pytest

from spacy_elmo import text
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


def write_gz(path, data: bytes):
    with gzip.open(path, "wb") as handle:
        handle.write(data)
    return path


@pytest.mark.parametrize("block", [1 << 20, 1, 2, 3])  # the offset and line of a bad byte wherever blocks end
def test_bytes_that_do_not_decode_are_named_by_file_line_and_byte_offset(tmp_path, monkeypatch, block):
    monkeypatch.setattr(text, "_BLOCK", block)
    data = "ünï\r\nline 2\rline 3\n".encode() + b"kaf\xe9 here\n"  # CR LF, CR and LF end lines, as read
    for path in (tmp_path / "bad.txt", tmp_path / "bad.txt.gz"):
        if path.suffix == ".gz":
            write_gz(path, data)
        else:
            path.write_bytes(data)
        said = rf"{path.name}, line 4, byte 24: not valid UTF-8 \(invalid continuation byte: e9\)"
        with pytest.raises(ValueError, match=said + "; convert it to UTF-8$"):
            list(text.text_lines(path))
        with pytest.raises(ValueError, match=said + "; text is read as UTF-8: convert it, or name its encoding with"):
            text.check_text(path, option="--encoding")
    truncated = tmp_path / "truncated.txt"
    truncated.write_bytes("one\ntwo €".encode()[:-1])
    with pytest.raises(ValueError, match=r"truncated.txt, line 2, byte 8: not valid UTF-8 \(unexpected end of data"):
        text.check_text(truncated)


@pytest.mark.parametrize("bits", [16, 32])
@pytest.mark.parametrize("order", ["little", "big"])
def test_a_utf16_or_utf32_byte_order_mark_is_named(tmp_path, bits, order):
    family = f"UTF-{bits}"
    path = tmp_path / "wide.txt"
    path.write_bytes("\ufeffhello\n".encode(f"utf-{bits}-{order[0]}e"))
    with pytest.raises(ValueError, match=rf"wide.txt, line 1, byte 0: starts with a {family} \({order}-endian\) byte"):
        text.check_text(path)
    assert list(text.text_lines(path, family.lower())) == ["hello\n"]  # read as what it is when told


def test_a_utf8_byte_order_mark_is_skipped_and_other_encodings_read_when_named(tmp_path):
    (tmp_path / "bom.txt").write_bytes(codecs.BOM_UTF8 + "Émile\nok\n".encode())
    assert list(text.text_lines(tmp_path / "bom.txt")) == ["Émile\n", "ok\n"]
    (tmp_path / "latin.txt").write_bytes("Émile\n".encode("latin-1"))
    assert list(text.text_lines(tmp_path / "latin.txt", "latin-1")) == ["Émile\n"]
    with pytest.raises(ValueError, match=r"latin.txt, line 1, byte 0: not valid ascii .*is --encoding ascii its"):
        text.check_text(tmp_path / "latin.txt", "ascii", option="--encoding")
    assert [text.check_encoding(name) for name in ("UTF8", "utf-8-sig", "Latin-1")] == ["utf-8", "utf-8", "iso8859-1"]
    with pytest.raises(ValueError, match="--encoding 'nope' is not an encoding Python knows"):
        text.check_encoding("nope")
