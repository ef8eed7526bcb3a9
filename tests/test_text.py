"""Reading text: gzipped or plain files, JSONL records with errors that name the line, one format rule."""

import codecs
import gzip
import os
import random
from pathlib import Path

import pytest

from spacy_elmo import text
from spacy_elmo.text import detect_format, make_tokenizer, text_lines, texts_from_jsonl


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
    assert "".join(text_lines(tmp_path / "a.txt")) == "".join(text_lines(tmp_path / "a.txt.gz")) == text


def test_jsonl_records_and_errors_name_the_line_and_the_option():
    lines = ['{"text": "one"}', "", '{"text": "two", "id": 3}']
    assert list(texts_from_jsonl(lines, "in.jsonl", "text", option="--text-field")) == ["one", "two"]
    with pytest.raises(ValueError, match=r"in.jsonl, line 2: not valid JSON"):
        list(texts_from_jsonl(['{"text": "a"}', "{oops"], "in.jsonl", "text", option="--text-field"))
    with pytest.raises(ValueError, match=r"in.jsonl, line 1: no 'body' field \(set --text-field\)"):
        list(texts_from_jsonl(['{"text": "a"}'], "in.jsonl", "body", option="--text-field"))
    with pytest.raises(ValueError, match=r"line 1: field 'text' is not a string"):
        list(texts_from_jsonl(['{"text": 3}'], "in.jsonl", "text", option="--text-field"))


def test_a_jsonl_text_with_an_escaped_nul_is_refused_as_a_nul_byte_is():
    lines = ['{"text": "fine"}', '{"text": "a\\u0000b"}']
    with pytest.raises(ValueError, match=r"in.jsonl, line 2: field 'text' holds a NUL \(U\+0000\), which text never"):
        list(texts_from_jsonl(lines, "in.jsonl", "text", option="--text-field"))


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
        said = rf"{path.name}, line 4, byte 24: not valid UTF-8 \(invalid continuation byte: 20 after e9\)"
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


def test_a_lead_byte_and_the_byte_that_does_not_continue_it_are_both_shown(tmp_path):
    """ "invalid continuation byte: ef" named the lead byte as the bad one."""
    path = tmp_path / "latin.txt"
    path.write_bytes("naïve\n".encode("latin-1"))  # ï is ef, then v (76)
    with pytest.raises(ValueError, match=r"line 1, byte 2: not valid UTF-8 \(invalid continuation byte: 76 after ef\)"):
        text.check_text(path)
    path.write_bytes(b"ok \xe2\x82x\n")  # two bytes of a three-byte character, then x (78)
    with pytest.raises(ValueError, match=r"byte 3: not valid UTF-8 \(invalid continuation byte: 78 after e2 82\)"):
        text.check_text(path)


WIDE = ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"]


@pytest.mark.parametrize("block", [1 << 20, 1, 3])
@pytest.mark.parametrize("encoding", WIDE)
def test_utf16_or_utf32_without_a_byte_order_mark_is_refused_by_its_nul_bytes(tmp_path, monkeypatch, encoding, block):
    """ASCII in UTF-16/32 is valid UTF-8 with NUL bytes between: it was read as text with NULs in it."""
    monkeypatch.setattr(text, "_BLOCK", block)
    path = tmp_path / "wide.txt"
    path.write_bytes("the cat\nsat on the mat\n".encode(encoding))
    first_nul = path.read_bytes().index(0)
    said = (
        f"wide.txt, line 1, byte {first_nul}: a NUL (U+0000), which text never holds: it looks like UTF-16 or "
        f"UTF-32 without a byte-order mark (its NUL bytes fall where {encoding.upper()} puts them); "
    )
    with pytest.raises(ValueError) as error:
        text.check_text(path, option="--encoding")
    assert str(error.value) == f"{path.parent}/{said}name its encoding with --encoding {encoding}"
    with pytest.raises(ValueError) as error:  # no option (a pretraining corpus): converting it is the way
        list(text.text_lines(path))
    iconv = encoding.upper()[:-3] + encoding.upper()[-2:]
    assert str(error.value) == f"{path.parent}/{said}convert it to UTF-8 (iconv -f {iconv} -t UTF-8)"
    assert list(text.text_lines(path, encoding)) == ["the cat\n", "sat on the mat\n"]  # read as what it is


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-32-le"])  # é first: e9 00 (big-endian: a NUL first)
def test_utf16_starting_with_a_non_ascii_character_is_named_as_utf16_too(tmp_path, encoding):
    """é in UTF-16 is not valid UTF-8 (e9 00): the decoding error itself names what the NULs show."""
    path = tmp_path / "wide.txt"
    path.write_bytes("été\nok\n".encode(encoding))
    with pytest.raises(ValueError) as error:
        text.check_text(path, option="--encoding")
    said = str(error.value)
    assert said.startswith(f"{path}, line 1, byte 0: not valid UTF-8 (") and "UTF-16 or UTF-32" in said, said
    assert said.endswith(
        f"(its NUL bytes fall where {encoding.upper()} puts them); name its encoding with --encoding {encoding}"
    )


def test_a_nul_in_utf8_text_is_named_by_line_and_byte_and_wrongly_named_encodings_say_so(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes("one ünï\ntwo\x00three\n".encode())
    with pytest.raises(ValueError, match=r"mixed.txt, line 2, byte 13: a NUL \(U\+0000\), which text never holds: it"):
        list(text.text_lines(path))
    wide = tmp_path / "wide.txt"
    wide.write_bytes("a line\n".encode("utf-32-le"))
    with pytest.raises(ValueError, match=r"is --encoding utf-16-le its encoding\? \(try utf-32-le\)$"):
        text.check_text(wide, "utf-16-le", option="--encoding")


@pytest.mark.parametrize("encoding", [*WIDE, "utf-8", "utf-16", "utf-32", "gb18030"])
def test_a_leading_byte_order_mark_is_skipped_whatever_the_encoding(tmp_path, encoding):
    """`--encoding utf-16-le` on a file with its mark kept U+FEFF as the start of the first word; a mark
    elsewhere is text and kept."""
    path = tmp_path / "marked.txt"
    data = "\ufeffword one\nword \ufefftwo\n".encode(encoding)
    if encoding in ("utf-16", "utf-32"):  # these write their mark themselves
        data = "word one\nword \ufefftwo\n".encode(encoding)
    path.write_bytes(data)
    assert list(text.text_lines(path, encoding)) == ["word one\n", "word \ufefftwo\n"]


def test_lines_are_read_as_pythons_text_files_read_them(tmp_path, monkeypatch):
    """Universal newlines (LF, CR LF, a lone CR), a last line without one, gzip, any block size: the lines
    of `open()` (the reader these replaced), so that outputs of correct input stay what they were."""
    rng = random.Random(0)
    pieces = ["word", "é", "😀", " ", "\n", "\r", "\r\n", "\n\n", "\x0b", "\u2028", "\x1c"]
    for trial in range(60):
        content = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        encoding = ["utf-8", "utf-16", "latin-1"][trial % 3] if trial % 5 else "utf-8"
        if encoding == "latin-1":
            content = content.replace("😀", "").replace("\u2028", "")
        path = tmp_path / ("t.txt.gz" if trial % 2 else "t.txt")
        if trial % 2:
            write_gz(path, content.encode(encoding))
            with gzip.open(path, "rt", encoding=encoding) as handle:
                expected = list(handle)
        else:
            path.write_bytes(content.encode(encoding))
            with open(path, encoding=encoding) as handle:
                expected = list(handle)
        for block in (1 << 20, 1, 2, 5):
            monkeypatch.setattr(text, "_BLOCK", block)
            assert list(text.text_lines(path, encoding)) == expected, (content, encoding, block)


def pipe_of(data: bytes) -> tuple[Path, int]:
    """A pipe holding `data`, written and closed, as a path (what `<(...)` and `/dev/stdin` give)."""
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return Path(f"/dev/fd/{read}"), read


def test_a_pipe_is_read_once_and_its_errors_located_as_read(tmp_path):
    """A pipe cannot be read twice: the error's line and byte came from reading the file again."""
    path, fd = pipe_of(b"one\ntwo\r\nthree")
    try:
        assert list(text_lines(path)) == ["one\n", "two\n", "three"]
    finally:
        os.close(fd)
    path, fd = pipe_of("one\ntwo caf\xe9 !\n".encode("latin-1"))
    said = r"line 2, byte 11: not valid UTF-8 \(invalid continuation byte: 20 after e9\)"
    try:
        with pytest.raises(ValueError, match=said):
            list(text_lines(path))
    finally:
        os.close(fd)


def test_only_a_regular_file_can_be_read_again(tmp_path):
    regular = tmp_path / "a.txt"
    regular.write_text("x\n", encoding="utf-8")
    text.check_rereadable(regular, "INPUT", "why")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # never opened: that would wait for a writer
    said = rf"^{fifo}: INPUT is a pipe/FIFO: it is read twice; write it to a file first$"
    with pytest.raises(ValueError, match=said):
        text.check_rereadable(fifo, "INPUT", "it is read twice")
    with pytest.raises(ValueError, match=r"/dev/null: INPUT is not a regular file"):
        text.check_rereadable(Path("/dev/null"), "INPUT", "it is read twice")
