"""Reading text for `embed` and the pretraining corpora: files (plain or gzipped), JSONL records, spaCy's
tokenizer. Errors name the file, the line and the option that chooses.

Text is UTF-8 unless told otherwise, decoded strictly: bytes that do not decode, or a NUL (which UTF-16 or
UTF-32 without a byte-order mark leaves between ASCII characters), are refused, never replaced (the biLM
would read the replacement as text). A leading byte-order mark is skipped.
"""

import bisect
import codecs
import gzip
import io
import itertools
import json
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from .disk import PathLike

UTF8 = "utf-8"
NUL = "\x00"
# the one rule for a text's characters, wherever a text comes from (a file, a JSONL field, an engine's row)
NUL_RULE = "a NUL (U+0000), which text never holds"
_BLOCK = 1 << 20
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
    """The canonical name of a text encoding ("utf-8-sig" is UTF-8: a mark is skipped anyway)."""
    try:
        codec = codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise ValueError(
            f"{option} {encoding!r} is not an encoding Python knows (e.g. utf-8, utf-16, latin-1)"
        ) from None
    if not getattr(codec, "_is_text_encoding", True):  # "base64", "zlib": bytes to bytes
        raise ValueError(f"{option} {encoding!r} is not a text encoding")
    return UTF8 if codec.name in (UTF8, "utf-8-sig") else codec.name


def _decoded(path: Path, encoding: str, option: Optional[str], error: type[ValueError]) -> Iterator[str]:
    """The text of `path` in blocks, decoded strictly, newlines as `open()` reads them."""
    codec = check_encoding(encoding)
    where = _Where(path, codec, encoding, option)
    try:  # U+FEFF as `codec` writes it, where a reader must skip it
        mark = b"" if codec in _SELF_MARKED else "\ufeff".encode(codec)
    except UnicodeError:  # a codec that cannot write U+FEFF cannot read one either
        mark = b""
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as raw:
        head = raw.read(max(len(mark), 4))
        # a UTF-32 mark before the UTF-16 one it starts with
        for family, order in itertools.product(("UTF-32", "UTF-16"), ("little", "big")):
            if codec == UTF8 and head.startswith("\ufeff".encode(f"{family}-{order[0]}e")):
                given = f" or read it with {option} {family.lower()}" if option else ""
                raise error(
                    f"{path}, line 1, byte 0: starts with a {family} ({order}-endian) byte-order mark: it is "
                    f"{family} text, not UTF-8; convert it to UTF-8 (e.g. iconv -f {family} -t UTF-8){given}"
                )
        where.fed = len(mark) if head.startswith(mark) else 0
        rest = head[where.fed :]
        blocks = itertools.chain([rest] if rest else [], iter(lambda: raw.read(_BLOCK), b""), [b""])
        yield from filter(None, (where.decode(data, error) for data in blocks))


class _Where:
    """Decodes a file block by block, knowing where it has got to, to say where it stopped and why."""

    def __init__(self, path: Path, codec: str, encoding: str, option: Optional[str]) -> None:
        self.path, self.codec, self.encoding, self.option = path, codec, encoding, option
        self.decoder = codecs.getincrementaldecoder(codec)("strict")
        self.newlines = io.IncrementalNewlineDecoder(None, translate=True)  # LF, CR LF or a lone CR to LF
        self.line = 1  # counted in the translated text (a CR held back, in case an LF follows, counts later)
        self.fed = 0  # the file offset of the block being decoded
        self.recent = b""  # the last bytes before that block

    def decode(self, data: bytes, error: type[ValueError]) -> str:
        """The next block (b"": the end) decoded, its newlines translated."""
        state = self.decoder.getstate()
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeError as err:  # a UnicodeDecodeError, or a codec's own complaint ("no BOM")
            raise error(self._undecodable(state, data, err)) from None
        nul = text.find(NUL)
        if nul >= 0:
            raise error(self._nul(state, data, text, nul)) from None
        translated = self.newlines.decode(text, final=not data)
        self.line += translated.count("\n")
        self.fed += len(data)
        self.recent = (self.recent + data[-_SAMPLE:])[-_SAMPLE:]
        return translated

    def _line(self, text: str) -> int:
        """The line where the file stops, `text` read after what was read."""
        return self.line + self.newlines.decode(text, final=True).count("\n")

    def _undecodable(self, state: Any, data: bytes, err: UnicodeError) -> str:
        buffered = _buffered(state)
        start, why = len(buffered), str(err)
        if isinstance(err, UnicodeDecodeError):
            bad = err.object[err.start : err.end].hex(" ")
            if err.reason == "invalid continuation byte" and err.end < len(err.object):  # and the byte after it
                bad = f"{err.object[err.end : err.end + 1].hex()} after {bad}"
            start, why = err.start, f"{err.reason}: {bad}"
        good = data[: max(start - len(buffered), 0)]
        self.decoder.setstate(state)  # decode up to the bad bytes again: the text before them may hold a NUL
        text = self.decoder.decode(good)
        nul = text.find(NUL)
        if nul >= 0:
            return self._nul(state, data, text, nul, len(good))
        offset = self.fed - len(buffered) + start
        wide = self._wide(offset, data)
        advice = self._advice() if wide is None else f"with NUL bytes around it, {wide}"
        return f"{self.path}, line {self._line(text)}, byte {offset}: not valid {self._name()} ({why}); {advice}"

    def _nul(self, state: Any, data: bytes, text: str, index: int, decodable: Optional[int] = None) -> str:
        """Character `index` of `text` (`data` decoded from `state`) is a NUL."""
        start = _char_start(self.decoder, state, data[:decodable], index)
        offset = self.fed + start if start > 0 else self.fed - len(_buffered(state))
        wide = self._wide(offset, data)
        why = f"; {self._advice()}" if wide is None else f": {wide}"
        line = self._line(text[:index])
        return f"{self.path}, line {line}, byte {offset}: {NUL_RULE}{why}"

    def _name(self) -> str:
        return "UTF-8" if self.codec == UTF8 else self.codec

    def _advice(self) -> str:
        if self.option is None:
            return f"convert it to {self._name()}"
        if self.codec == UTF8:
            return f"text is read as UTF-8: convert it, or name its encoding with {self.option}"
        return f"is {self.option} {self.encoding} its encoding?"

    def _wide(self, offset: int, data: bytes) -> Optional[str]:
        """Which wide encoding NUL bytes around `offset` suggest, and what to do; None without NULs."""
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
            family, order = guess.upper().rsplit("-", 1)
            named, iconv = guess, f" (iconv -f {family}{order} -t UTF-8)"
            said = f"{said} (its NUL bytes fall where {guess.upper()} puts them)"
        if self.option is None:
            return f"{said}; convert it to UTF-8{iconv}"
        if self.codec != UTF8:
            return f"{said}; is {self.option} {self.encoding} its encoding? (try {named})"
        return f"{said}; name its encoding with {self.option} {named}"


def _buffered(state: Any) -> bytes:
    """The bytes an incremental decoder holds back (the start of a character not yet complete)."""
    return state[0] if isinstance(state[0], bytes) else b""


def _char_start(decoder: codecs.IncrementalDecoder, state: Any, data: bytes, index: int) -> int:
    """Where in `data` character `index` of decoding it (from `state`) begins."""

    def characters(end: int) -> int:
        decoder.setstate(state)
        return len(decoder.decode(data[:end]))

    return bisect.bisect_left(range(len(data)), index, key=characters)


def text_lines(
    path: Path, encoding: str = UTF8, option: Optional[str] = None, error: type[ValueError] = ValueError
) -> Iterator[str]:
    """The lines of a text file (gunzipped when it ends in .gz), newlines kept; `option` chooses the encoding."""
    pending: list[str] = []  # the start of a line that goes on in the next block
    for text in _decoded(path, encoding, option, error):
        *lines, last = text.split("\n")  # newlines are LF here already
        if lines:
            lines[0], pending = "".join([*pending, lines[0]]), []
        pending.append(last)
        yield from (line + "\n" for line in lines)
    if tail := "".join(pending):
        yield tail


def check_rereadable(path: Path, what: str, why: str, error: type[ValueError] = ValueError) -> None:
    """Refuse a file that can be read only once (a pipe, a FIFO, a device), without opening it."""
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        kind = "a pipe/FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise error(f"{path}: {what} is {kind}: {why}; write it to a file first")


def check_text(path: Path, encoding: str = UTF8, option: Optional[str] = None) -> None:
    """Decode the whole file, so that a run refuses input that is not text before it writes anything."""
    for _ in _decoded(path, encoding, option, ValueError):
        pass


JSONL_SUFFIXES = (".jsonl", ".json")


def detect_format(path: PathLike) -> str:
    """ "jsonl" for a .jsonl/.json file (gzipped or not), else "text": the rule for every reader."""
    return "jsonl" if any(suffix in JSONL_SUFFIXES for suffix in Path(path).suffixes) else "text"


def texts_from_jsonl(
    lines: Iterable[str],
    path: PathLike,
    field: str,
    option: str,
    error: type[ValueError] = ValueError,
) -> Iterator[str]:
    """The string in `field` of each non-blank line; `option` chooses `field`."""
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
        if NUL in text:  # written as \u0000 in the JSON: the same rule as a NUL byte in a text file
            raise error(f"{path}, line {number}: field {field!r} holds {NUL_RULE} (\\u0000 in the JSON)")
        yield text


@dataclass
class Tokenizer:
    """spaCy's tokenizer for a language plus its rule-based sentencizer, built from the language's
    defaults rather than `spacy.blank` (which loads every installed pipeline plugin)."""

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
    """spaCy's tokenizer for `lang`; `option` chose it."""
    from spacy import util
    from spacy.language import create_tokenizer
    from spacy.pipeline import Sentencizer
    from spacy.vocab import create_vocab

    try:
        defaults = util.get_lang_class(lang).Defaults
    except ImportError as err:
        raise error(f"{option} is {lang!r}, which spaCy does not know ({err})") from None
    vocab = create_vocab(lang, defaults)
    # spaCy's own rule-based tokenizer factory, given what it reads of a Language: its defaults and vocab
    tokenizer = create_tokenizer()(SimpleNamespace(Defaults=defaults, vocab=vocab))  # type: ignore[arg-type]
    return Tokenizer(vocab=vocab, tokenizer=tokenizer, sentencizer=Sentencizer())
