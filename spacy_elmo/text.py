"""Reading text for the biLM: files (plain or gzipped), JSONL records, and spaCy's tokenizer.

One home for what `spacy elmo embed` and the pretraining corpora both read, so that a file, a record
or a tokenization rule means the same thing to both. Errors name the file, the line and the option
that chooses what is read.

Text is UTF-8 unless a reader is told another encoding, and it is decoded strictly: a byte sequence
that does not decode is refused, naming the file, the line and the byte offset (a UTF-16 or UTF-32
byte-order mark by name), never replaced or dropped, since the biLM would read the replacement as
text. A NUL (U+0000) is refused the same way: text never holds one, while UTF-16 or UTF-32 without a
byte-order mark is mostly NUL bytes that UTF-8 decodes without complaint (its ASCII characters are
valid UTF-8), so the error says which of them the NULs' places suggest. A leading byte-order mark
(U+FEFF) is skipped whatever the encoding: it tells how the text was written and is no part of it.
Files are read once, front to back, and errors located as they are read, so that a pipe reads right.
"""

import codecs
import gzip
import io
import itertools
import json
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

PathLike = Union[str, Path]
UTF8 = "utf-8"
NUL = "\x00"
_BLOCK = 1 << 20
# a UTF-32 mark before the UTF-16 one it starts with
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32", "little-endian"),
    (codecs.BOM_UTF32_BE, "UTF-32", "big-endian"),
    (codecs.BOM_UTF16_LE, "UTF-16", "little-endian"),
    (codecs.BOM_UTF16_BE, "UTF-16", "big-endian"),
)
# their decoders read (and drop) a leading byte-order mark themselves: they need it for the byte order
_SELF_MARKED = ("utf-16", "utf-32")
# where ASCII text puts its NUL bytes (by file offset modulo 4) in each byte order without a mark
_WIDE_NULS = {
    "utf-16-le": (False, True, False, True),
    "utf-16-be": (True, False, True, False),
    "utf-32-le": (False, True, True, True),
    "utf-32-be": (True, True, True, False),
}
_SAMPLE = 4096  # bytes around a NUL or an undecodable byte that tell which wide encoding it looks like


def check_encoding(encoding: str, option: str = "--encoding") -> str:
    """The canonical name of a text encoding (UTF-8 for "utf8", "UTF-8", "utf-8-sig": a leading
    byte-order mark is skipped whatever the name), or a ValueError naming `option`."""
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


def _mark(codec: str) -> bytes:
    """U+FEFF as `codec` writes it, where a reader must skip it (b"" where the codec cannot write it,
    or its decoder reads the mark itself)."""
    if codec in _SELF_MARKED:
        return b""
    try:
        return "\ufeff".encode(codec)
    except UnicodeError:  # a codec that cannot write U+FEFF cannot read one either
        return b""


def _decoded(path: Path, encoding: str, option: Optional[str], error: type[ValueError]) -> Iterator[str]:
    """The text of `path` in blocks, decoded strictly from the front (a leading byte-order mark skipped),
    newlines as the text wrapper of `open()` reads them (CR LF and a lone CR are LF); bytes that do not
    decode, or a NUL, raise `error` naming the line and byte offset, found as they are read."""
    codec = check_encoding(encoding)
    where = _Where(path, codec, encoding, option)
    decoder = codecs.getincrementaldecoder(codec)("strict")
    newlines = io.IncrementalNewlineDecoder(None, translate=True)
    mark = _mark(codec)
    with _open_bytes(path) as raw:
        head = raw.read(max(len(mark), 4))
        if codec == UTF8:
            for wide, family, order in _BYTE_ORDER_MARKS:
                if head.startswith(wide):
                    given = f" or read it with {option} {family.lower()}" if option else ""
                    raise error(
                        f"{path}, line 1, byte 0: starts with a {family} ({order}) byte-order mark: it is {family} "
                        f"text, not UTF-8; convert it to UTF-8 (e.g. iconv -f {family} -t UTF-8){given}"
                    )
        marked = bool(mark) and head.startswith(mark)
        rest = head[len(mark) :] if marked else head
        where.fed = len(mark) if marked else 0
        blocks = itertools.chain([rest] if rest else [], iter(lambda: raw.read(_BLOCK), b""), [None])
        for block in blocks:
            final = block is None
            data = b"" if block is None else block
            state = decoder.getstate()
            try:
                text = decoder.decode(data, final=final)
            except UnicodeError as err:  # a UnicodeDecodeError, or a codec's own complaint ("no BOM")
                raise error(where.undecodable(decoder, state, data, err)) from None
            nul = text.find(NUL)
            if nul >= 0:
                raise error(where.nul(decoder, state, data, text, nul)) from None
            where.read(text, data)
            translated = newlines.decode(text, final=final)
            if translated:
                yield translated


class _Where:
    """Where reading a file has got to (bytes fed to the decoder, lines decoded, the bytes just before),
    to say where it stopped and why."""

    def __init__(self, path: Path, codec: str, encoding: str, option: Optional[str]) -> None:
        self.path, self.codec, self.encoding, self.option = path, codec, encoding, option
        self.fed = 0  # the file offset of the block being decoded
        self.lines = _LineCount()
        self.recent = b""  # the last bytes before that block

    def read(self, text: str, data: bytes) -> None:
        self.lines.add(text)
        self.fed += len(data)
        self.recent = (self.recent + data[-_SAMPLE:])[-_SAMPLE:]

    def undecodable(self, decoder: codecs.IncrementalDecoder, state: Any, data: bytes, err: UnicodeError) -> str:
        buffered = _buffered(state)
        start, why = len(buffered), str(err)
        if isinstance(err, UnicodeDecodeError):
            start, why = err.start, f"{err.reason}: {_bad_bytes(err)}"
        good = data[: max(start - len(buffered), 0)]
        decoder.setstate(state)  # decode up to the bad bytes again: the text before them may hold a NUL
        text = decoder.decode(good)
        nul = text.find(NUL)
        if nul >= 0:
            return self.nul(decoder, state, data, text, nul, len(good))
        self.lines.add(text)
        offset = self.fed - len(buffered) + start
        name = "UTF-8" if self.codec == UTF8 else self.codec
        wide = self._wide(offset, data)
        advice = self._advice() if wide is None else f"with NUL bytes around it, {wide}"
        return f"{self.path}, line {self.lines.line}, byte {offset}: not valid {name} ({why}); {advice}"

    def nul(
        self,
        decoder: codecs.IncrementalDecoder,
        state: Any,
        data: bytes,
        text: str,
        index: int,
        decodable: Optional[int] = None,
    ) -> str:
        """Character `index` of `text` (`data` decoded from `state`; its first `decodable` bytes decode)
        is a NUL."""
        self.lines.add(text[:index])
        start = _char_start(decoder, state, data[:decodable], index)
        offset = self.fed + start if start > 0 else self.fed - len(_buffered(state))
        wide = self._wide(offset, data)
        why = f"; {self._advice()}" if wide is None else f": {wide}"
        return f"{self.path}, line {self.lines.line}, byte {offset}: a NUL (U+0000), which text never holds{why}"

    def _advice(self) -> str:
        if self.option is None:
            return f"convert it to {'UTF-8' if self.codec == UTF8 else self.codec}"
        if self.codec == UTF8:
            return f"text is read as UTF-8: convert it, or name its encoding with {self.option}"
        return f"is {self.option} {self.encoding} its encoding?"

    def _wide(self, offset: int, data: bytes) -> Optional[str]:
        """What NUL bytes around `offset` suggest (UTF-16 or UTF-32 without a byte-order mark, and which
        one where their places show it) and what to do; None where there are none."""
        known, known_start = self.recent + data, self.fed - len(self.recent)
        first = max(offset - known_start - _SAMPLE // 2, 0)
        sample, sample_start = known[first : first + _SAMPLE], known_start + first
        if b"\x00" not in sample:
            return None
        columns = [sample[(residue - sample_start) % 4 :: 4] for residue in range(4)]
        places = tuple(2 * column.count(0) > len(column) for column in columns)
        guess = next((name for name, nuls in _WIDE_NULS.items() if nuls == places), None)
        said = "it looks like UTF-16 or UTF-32 without a byte-order mark"
        if guess is None:
            named = "utf-16-le, utf-16-be, utf-32-le or utf-32-be"
            said, iconv = f"{said} (or it is not text)", ""
        else:
            named, iconv = guess, f" (iconv -f {_iconv(guess)} -t UTF-8)"
            said = f"{said} (its NUL bytes fall where {guess.upper()} puts them)"
        if self.option is None:
            return f"{said}; convert it to UTF-8{iconv}"
        if self.codec != UTF8:
            return f"{said}; is {self.option} {self.encoding} its encoding? (try {named})"
        return f"{said}; name its encoding with {self.option} {named}"


def _iconv(codec: str) -> str:
    family, order = codec.upper().rsplit("-", 1)
    return family + order


def _buffered(state: Any) -> bytes:
    """The bytes an incremental decoder holds back (the start of a character not yet complete)."""
    return state[0] if isinstance(state[0], bytes) else b""


def _bad_bytes(err: UnicodeDecodeError) -> str:
    """The bytes a decoder refused: for a byte that does not continue a character, that byte after the
    ones that began the character (the error's own range holds only those)."""
    if err.reason == "invalid continuation byte" and err.end < len(err.object):
        return f"{err.object[err.end : err.end + 1].hex()} after {err.object[err.start : err.end].hex(' ')}"
    return err.object[err.start : err.end].hex(" ")


def _char_start(decoder: codecs.IncrementalDecoder, state: Any, data: bytes, index: int) -> int:
    """Where in `data` character `index` of decoding it (from `state`) begins: the fewest bytes that
    decode to `index` characters (0 when it began in the bytes the decoder held back)."""
    low, high = 0, len(data)
    while low < high:
        middle = (low + high) // 2
        decoder.setstate(state)
        if len(decoder.decode(data[:middle])) >= index:
            high = middle
        else:
            low = middle + 1
    return low


def text_lines(
    path: Path, encoding: str = UTF8, option: Optional[str] = None, error: type[ValueError] = ValueError
) -> Iterator[str]:
    """The lines of a text file (gunzipped on the fly when it ends in .gz), newlines kept and read as
    `open()` reads them; bytes that do not decode, or a NUL, raise `error` naming the file, line and byte
    offset (`option`: the setting that chooses the encoding)."""
    pending: list[str] = []  # the start of a line that goes on in the next block
    for text in _decoded(path, encoding, option, error):
        if "\n" not in text:
            pending.append(text)
            continue
        lines = text.split("\n")  # newlines are LF here already
        lines[0] = "".join([*pending, lines[0]])
        last = lines.pop()
        pending = [last] if last else []
        for line in lines:
            yield line + "\n"
    if pending:
        yield "".join(pending)


def check_rereadable(path: Path, what: str, why: str, error: type[ValueError] = ValueError) -> None:
    """Refuse a file that can be read only once (a pipe, a FIFO; or a device): `what` names it and `why`
    says why the reader must read it again. Asks the file system only: a FIFO is never opened."""
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        kind = "a pipe/FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise error(f"{path}: {what} is {kind}: {why}; write it to a file first")


def check_text(
    path: Path, encoding: str = UTF8, option: Optional[str] = None, error: type[ValueError] = ValueError
) -> None:
    """Decode the whole file (in blocks), so that a run can refuse input that is not text before it
    writes anything; raises as `text_lines` does."""
    for _ in _decoded(path, encoding, option, error):
        pass


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
