"""Reading text for the biLM: files (plain or gzipped), JSONL records, and spaCy's tokenizer.

One home for what `spacy elmo embed` and the pretraining corpora both read, so that a file, a record
or a tokenization rule means the same thing to both. Errors name the file, the line and the option
that chooses what is read.

Text is UTF-8 unless a reader is told another encoding, and it is decoded strictly: a byte sequence
that does not decode is refused, naming the file, the line and the byte offset (a UTF-16 or UTF-32
byte-order mark by name), never replaced or dropped, since the biLM would read the replacement as
text. A UTF-8 byte-order mark at the start is skipped: it is no part of the text.
"""

import codecs
import contextlib
import gzip
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

PathLike = Union[str, Path]
UTF8 = "utf-8"
_BLOCK = 1 << 20
# a UTF-32 mark before the UTF-16 one it starts with
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32", "little-endian"),
    (codecs.BOM_UTF32_BE, "UTF-32", "big-endian"),
    (codecs.BOM_UTF16_LE, "UTF-16", "little-endian"),
    (codecs.BOM_UTF16_BE, "UTF-16", "big-endian"),
)


def check_encoding(encoding: str, option: str = "--encoding") -> str:
    """The canonical name of a text encoding (UTF-8 for "utf8", "UTF-8", "utf-8-sig": a UTF-8 byte-order
    mark is skipped whatever the name), or a ValueError naming `option`."""
    try:
        codec = codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise ValueError(
            f"{option} {encoding!r} is not an encoding Python knows (e.g. utf-8, utf-16, latin-1)"
        ) from None
    if not getattr(codec, "_is_text_encoding", True):  # "base64", "zlib": bytes to bytes
        raise ValueError(f"{option} {encoding!r} is not a text encoding")
    return UTF8 if codec.name in (UTF8, "utf-8-sig") else codec.name


def _open_bytes(path: Path) -> Union[gzip.GzipFile, io.BufferedReader]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def open_text(path: Path, encoding: str = UTF8) -> io.TextIOBase:
    """A text file, gunzipped on the fly when it ends in .gz, decoded strictly (reading bytes that do not
    decode raises UnicodeDecodeError; `text_lines` and `check_text` say where); a leading UTF-8
    byte-order mark is skipped. The caller closes it."""
    codec = check_encoding(encoding)
    return io.TextIOWrapper(_open_bytes(path), encoding="utf-8-sig" if codec == UTF8 else codec, errors="strict")


def text_lines(
    path: Path, encoding: str = UTF8, option: Optional[str] = None, error: type[ValueError] = ValueError
) -> Iterator[str]:
    """The lines of a text file (as `open_text` reads them, newlines kept); bytes that do not decode raise
    `error` naming the file, line and byte offset (`option`: the setting that chooses the encoding)."""
    with open_text(path, encoding) as handle, _located(path, encoding, option, error):
        yield from handle


def check_text(
    path: Path, encoding: str = UTF8, option: Optional[str] = None, error: type[ValueError] = ValueError
) -> None:
    """Decode the whole file (in blocks), so that a run can refuse undecodable input before it writes
    anything; raises as `text_lines` does."""
    with open_text(path, encoding) as handle, _located(path, encoding, option, error):
        while handle.read(_BLOCK):
            pass


@contextlib.contextmanager
def _located(path: Path, encoding: str, option: Optional[str], error: type[ValueError]) -> Iterator[None]:
    """A UnicodeError of reading `path` as `error`, with where it happened: the text wrapper's own
    error holds an offset into the block it was decoding, not into the file."""
    try:
        yield
    except UnicodeError:
        raise error(decode_failure(path, encoding, option)) from None


def decode_failure(path: Path, encoding: str = UTF8, option: Optional[str] = None) -> str:
    """Why `path` does not decode: the file, the line and the byte offset of the first bytes that do not
    (offsets count the uncompressed bytes of a .gz file), and what to do."""
    codec = check_encoding(encoding)
    name = "UTF-8" if codec == UTF8 else codec
    with _open_bytes(path) as raw:
        head = raw.read(4)
        if codec == UTF8:
            for mark, family, order in _BYTE_ORDER_MARKS:
                if head.startswith(mark):
                    given = f" or read it with {option} {family.lower()}" if option else ""
                    return (
                        f"{path}, line 1, byte 0: starts with a {family} ({order}) byte-order mark: it is {family} "
                        f"text, not UTF-8; convert it to UTF-8 (e.g. iconv -f {family} -t UTF-8){given}"
                    )
        raw.seek(0)
        fed = len(raw.read(3)) if codec == UTF8 and head.startswith(codecs.BOM_UTF8) else 0
        decoder = codecs.getincrementaldecoder(codec)("strict")
        lines = _LineCount()
        for block in [*iter(lambda: raw.read(_BLOCK), b""), b""]:
            state = decoder.getstate()
            try:
                lines.add(decoder.decode(block, final=not block))
            except UnicodeError as err:  # a UnicodeDecodeError, or a codec's own complaint ("no BOM")
                buffered = state[0] if isinstance(state[0], bytes) else b""
                start, why = len(buffered), str(err)
                if isinstance(err, UnicodeDecodeError):
                    start, why = err.start, f"{err.reason}: {err.object[err.start : err.end].hex(' ')}"
                decoder.setstate(state)  # decode up to the bad bytes again, to count the lines before them
                lines.add(decoder.decode(block[: max(start - len(buffered), 0)]))
                offset = fed - len(buffered) + start
                if option is None:
                    advice = f"convert it to {name}"
                elif codec == UTF8:
                    advice = f"text is read as UTF-8: convert it, or name its encoding with {option}"
                else:
                    advice = f"is {option} {encoding} its encoding?"
                return f"{path}, line {lines.line}, byte {offset}: not valid {name} ({why}); {advice}"
            fed += len(block)
    return f"{path}: not valid {name}"  # it decoded this time: the file changed while it was read


class _LineCount:
    """The line number reached in decoded text, counted as the text wrapper splits lines (universal
    newlines: LF, CR LF and a lone CR), a CR LF split across two blocks counted once."""

    def __init__(self) -> None:
        self.line = 1
        self._after_cr = False

    def add(self, text: str) -> None:
        if not text:
            return
        self.line += text.count("\n") + text.count("\r") - text.count("\r\n")
        if self._after_cr and text.startswith("\n"):
            self.line -= 1
        self._after_cr = text.endswith("\r")


JSONL_SUFFIXES = (".jsonl", ".json")


def detect_format(path: PathLike) -> str:
    """ "jsonl" for a .jsonl/.json file (gzipped or not), else "text": the one rule for every reader that
    is not told the format."""
    return "jsonl" if any(suffix in JSONL_SUFFIXES for suffix in Path(path).suffixes) else "text"


def texts_from_jsonl(
    lines: Iterable[str],
    path: PathLike,
    field: str,
    option: str,
    error: type[ValueError] = ValueError,
) -> Iterator[str]:
    """The string in `field` of each non-blank line; `option` names the setting that chooses `field`."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise error(f"{path}, line {number}: not valid JSON ({err.msg})") from None
        if not isinstance(record, dict) or field not in record:
            raise error(f"{path}, line {number}: no {field!r} field (set {option})")
        text = record[field]
        if not isinstance(text, str):
            raise error(f"{path}, line {number}: field {field!r} is not a string")
        yield text


@dataclass
class Tokenizer:
    """spaCy's tokenizer for a language plus its rule-based sentencizer (no model, no download).

    Built from the language's defaults directly rather than through `spacy.blank`, so that it does
    not load every installed pipeline plugin just to split text; the rules are the same.
    """

    vocab: Any
    tokenizer: Any
    sentencizer: Any
    max_length: int = 1_000_000

    def pipe(self, texts: Iterable[str], batch_size: int = 256) -> Iterator[Any]:
        """Docs with sentence boundaries."""
        return self.sentencizer.pipe(self.tokenizer.pipe(texts, batch_size=batch_size), batch_size=batch_size)

    def words(self, text: str) -> list[str]:
        """The token strings of `text`, whitespace tokens left out."""
        return [t.text for t in self.tokenizer(text) if not t.is_space]


def make_tokenizer(lang: str = "en", option: str = "lang", error: type[ValueError] = ValueError) -> Tokenizer:
    """spaCy's tokenizer for `lang`; `option` names the setting that chose it, for the error."""
    from spacy import util
    from spacy.pipeline import Sentencizer
    from spacy.tokenizer import Tokenizer as SpacyTokenizer
    from spacy.vocab import create_vocab

    try:
        defaults = util.get_lang_class(lang).Defaults
    except ImportError as err:
        raise error(f"{option} is {lang!r}, which spaCy does not know ({err})") from None
    vocab = create_vocab(lang, defaults)

    def compiled(items: Any, compile_regex: Any) -> Any:
        return compile_regex(items) if items else None

    prefix = compiled(defaults.prefixes, util.compile_prefix_regex)
    suffix = compiled(defaults.suffixes, util.compile_suffix_regex)
    infix = compiled(defaults.infixes, util.compile_infix_regex)
    tokenizer = SpacyTokenizer(
        vocab,
        rules=defaults.tokenizer_exceptions,
        prefix_search=prefix.search if prefix else None,
        suffix_search=suffix.search if suffix else None,
        infix_finditer=infix.finditer if infix else None,
        token_match=defaults.token_match,
        url_match=defaults.url_match,
    )
    return Tokenizer(vocab=vocab, tokenizer=tokenizer, sentencizer=Sentencizer())
