"""Raw text -> a cached, memory-mapped token stream, so that training never reads text again.

Input formats:
- "text": .txt or .txt.gz; paragraphs are separated by blank lines (hard-wrapped lines are joined),
  tokenized with spaCy's tokenizer and split into sentences by its sentencizer.
- "jsonl": one JSON object a line (.jsonl or .jsonl.gz), its `text_field` tokenized as above.
- "tokenized": whitespace-separated tokens, a line a paragraph; sentences split by the sentencizer.
- "bilm-tf": bilm-tf's training format, one tokenized sentence a line.
Every file is UTF-8, decoded strictly: what does not decode is refused, never replaced by U+FFFD (the biLM
would learn the replacement character).

The stream holds *type* ids (every distinct token string, not only the vocabulary's words), each sentence
framed by `<S>` (type 0) and `</S>` (type 1): the biLM reads characters, so a rare word keeps its spelling as
input and only its softmax target becomes `<UNK>`. A cache entry is keyed by the SHA-256 of every input file
and by the settings, and is written whole or not at all.
"""

import hashlib
import itertools
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union, get_args

import numpy
import srsly

from .. import chars
from ..disk import PathLike, atomic_directory, atomic_path, file_sha256
from ..text import check_rereadable, make_tokenizer, text_lines, texts_from_jsonl
from .vocab import BOS, EOS, Vocab

CACHE_VERSION = 3  # part of the cache key: raised when the same text would give other tokens
Format = Literal["text", "jsonl", "tokenized", "bilm-tf"]
FORMATS: tuple[str, ...] = get_args(Format)


class CorpusError(ValueError):
    """An input file or corpus setting that cannot be read."""


@dataclass(frozen=True)
class CorpusSettings:
    """How text becomes tokens; part of the cache key."""

    format: str = "text"
    text_field: str = "text"
    lang: str = "en"
    max_tokens: Optional[int] = None  # stop after this many words (sentences are kept whole)
    pipe_batch_size: int = 256

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise CorpusError(f"corpus.format is {self.format!r}; expected one of {FORMATS}")


class TokenStream:
    """A prepared corpus: `tokens` (N,) int32 type ids (memory-mapped), `types`, `counts`."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        try:
            meta = srsly.read_msgpack(self.directory / "types.msgpack")
            self.types: list[str] = meta["types"]
            self.counts = numpy.asarray(meta["counts"], dtype=numpy.int64)
        except Exception as err:  # msgpack raises several unrelated types on corrupt input
            raise self._damaged(self.directory / "types.msgpack", err) from None
        self.tokens: numpy.ndarray = self._load_array("tokens.npy", mmap=True)
        self._chars: Optional[numpy.ndarray] = None

    def _damaged(self, path: Path, why: Any) -> CorpusError:
        return CorpusError(
            f"{path}: not a readable corpus cache file ({why}); delete the cache entry {self.directory} "
            f"and it is rebuilt from the corpus on the next run"
        )

    def _load_array(self, name: str, mmap: bool = False) -> numpy.ndarray:
        """A cached integer array; never unpickled (numpy refuses object arrays without allow_pickle)."""
        path = self.directory / name
        try:
            array = numpy.load(path, mmap_mode="r" if mmap else None)
        except (ValueError, OSError, EOFError) as err:
            raise self._damaged(path, err) from None
        if not numpy.issubdtype(array.dtype, numpy.integer):
            raise self._damaged(path, f"dtype {array.dtype}, expected integers")
        return array

    @property
    def n_sentences(self) -> int:
        return int(self.counts[0])

    @property
    def n_words(self) -> int:
        """Tokens other than the sentence boundaries."""
        return len(self.tokens) - 2 * self.n_sentences

    def type_chars(self) -> numpy.ndarray:
        """Character ids of every type, (n_types, 50) int16, computed once and cached on disk."""
        if self._chars is None:
            path = self.directory / "chars.npy"
            if not path.exists():
                with atomic_path(path) as tmp, open(tmp, "wb") as handle:
                    numpy.save(handle, chars.tokens_to_ids(self.types).astype(numpy.int16))
            self._chars = self._load_array("chars.npy")
        return self._chars

    def type_to_vocab(self, vocab: Vocab) -> numpy.ndarray:
        """Softmax id of every type (int32): its vocabulary id, or `<UNK>`."""
        return vocab.lookup(self.types)


def expand_paths(paths: Union[PathLike, Sequence[PathLike]]) -> list[Path]:
    """Files named, or every regular file of a directory named (sorted), each checked to exist."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
            if not found:
                raise CorpusError(f"corpus directory {p} holds no files")
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"corpus file not found: {p}")
    if not files:
        raise CorpusError("no corpus files given")
    return files


def file_digests(paths: Union[PathLike, Sequence[PathLike]]) -> list[list[str]]:
    """[path, SHA-256] of every file `expand_paths` finds, in its order. A pipe is refused: a run reads its
    data again after this, and a pipe would be empty then."""
    files = expand_paths(paths)
    for path in files:
        check_rereadable(path, "the corpus file", _REREAD, CorpusError)
    return [[str(path), file_sha256(path)] for path in files]


_REREAD = "pretraining needs files it can read again (a run is bound to its data's digests, and resumes)"


def iter_paragraphs(path: Path) -> Iterator[str]:
    """Paragraphs of a plain-text file: runs of non-blank lines, joined by single spaces."""
    lines = (line.strip() for line in text_lines(path, error=CorpusError))
    for non_blank, paragraph in itertools.groupby(lines, key=bool):
        if non_blank:
            yield " ".join(paragraph)


def iter_jsonl(path: Path, field: str) -> Iterator[str]:
    lines = text_lines(path, error=CorpusError)
    yield from texts_from_jsonl(lines, path, field, option="corpus.text_field", error=CorpusError)


def iter_lines(path: Path) -> Iterator[list[str]]:
    """The whitespace-separated tokens of each line that has any."""
    return (tokens for tokens in map(str.split, text_lines(path, error=CorpusError)) if tokens)


def _frame(hashes: numpy.ndarray, starts: numpy.ndarray, bos: int, eos: int) -> numpy.ndarray:
    """Insert <S>/</S> hashes around the sentences of a token array (starts: True at sentence starts)."""
    if len(hashes) == 0:
        return hashes
    first = numpy.flatnonzero(starts | (numpy.arange(len(hashes)) == 0))
    ends = numpy.append(first[1:], len(hashes))
    # where a sentence ends and the next starts, its </S> goes first: insert keeps the given order at one index
    markers = numpy.repeat(numpy.array([eos, bos], dtype=numpy.uint64), len(first))
    return numpy.insert(hashes, numpy.concatenate([ends, first]), markers)


def _doc_arrays(doc) -> tuple[numpy.ndarray, numpy.ndarray]:
    """Hashes and sentence-start flags of a Doc's non-space tokens."""
    from spacy.attrs import IS_SPACE, ORTH, SENT_START

    if len(doc) == 0:
        return numpy.zeros(0, numpy.uint64), numpy.zeros(0, bool)
    arr = doc.to_array([ORTH, IS_SPACE, SENT_START]).astype(numpy.uint64, copy=False)
    starts = arr[:, 2] == 1
    # a sentence that begins with a space token begins at its next kept token
    rank = numpy.cumsum(starts)
    keep = arr[:, 1] == 0
    return arr[keep, 0], numpy.diff(rank[keep], prepend=-1) != 0


def _tokenize(files: list[Path], settings: CorpusSettings) -> tuple[numpy.ndarray, Any]:
    """All files -> one framed uint64 hash array (and the StringStore that decodes it)."""
    from spacy.tokens import Doc

    nlp = make_tokenizer(settings.lang, option="corpus.lang", error=CorpusError)
    strings = nlp.vocab.strings
    bos, eos = strings.add(BOS), strings.add(EOS)
    fmt = settings.format

    def pieces() -> Iterator[tuple[numpy.ndarray, numpy.ndarray]]:  # hashes and sentence starts, a piece of text each
        for path in files:
            if fmt == "bilm-tf":
                for tokens in iter_lines(path):
                    hashes = numpy.fromiter((strings.add(t) for t in tokens), dtype=numpy.uint64, count=len(tokens))
                    yield hashes, numpy.zeros(len(tokens), dtype=bool)
            elif fmt == "tokenized":
                for tokens in iter_lines(path):
                    yield _doc_arrays(nlp.sentencizer(Doc(nlp.vocab, words=tokens)))
            else:
                texts = iter_paragraphs(path) if fmt == "text" else iter_jsonl(path, settings.text_field)
                texts = (t[i : i + nlp.max_length] for t in texts for i in range(0, max(len(t), 1), nlp.max_length))
                yield from map(_doc_arrays, nlp.pipe(texts, batch_size=settings.pipe_batch_size))

    chunks: list[numpy.ndarray] = []
    n_words = 0
    for hashes, starts in pieces():
        if len(hashes):
            chunks.append(_frame(hashes, starts, bos, eos))
            n_words += len(hashes)
        if settings.max_tokens is not None and n_words >= settings.max_tokens:
            break
    if not chunks:
        raise CorpusError(f"no tokens in {', '.join(map(str, files))}")
    return numpy.concatenate(chunks), strings


def prepare_corpus(
    paths: Union[PathLike, Sequence[PathLike]],
    settings: CorpusSettings = CorpusSettings(),
    cache_dir: Optional[PathLike] = None,
    digests: Optional[list[list[str]]] = None,
) -> TokenStream:
    """The token stream of these files, from the cache when files of this content were tokenized with these
    settings before. `digests`: their `file_digests`, if the caller has them."""
    digests = file_digests(paths) if digests is None else digests
    if cache_dir is None:
        cache_dir = os.environ.get("SPACY_ELMO_CACHE", Path.home() / ".cache" / "spacy-elmo" / "corpus")
    sha256 = [digest for _, digest in digests]  # the files' contents, in their order
    key = json.dumps({"version": CACHE_VERSION, "sha256": sha256, "settings": asdict(settings)}, sort_keys=True)
    entry = Path(cache_dir) / hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]
    if (entry / "tokens.npy").exists() and (entry / "types.msgpack").exists():
        return TokenStream(entry)
    return tokenize_corpus([path for path, _ in digests], settings, entry)


def tokenize_corpus(
    paths: Union[PathLike, Sequence[PathLike]], settings: CorpusSettings, directory: PathLike
) -> TokenStream:
    """The token stream of these files, written to `directory` (whole, or not at all); each file read once."""
    files = expand_paths(paths)
    hashes, strings = _tokenize(files, settings)
    unique, inverse = numpy.unique(hashes, return_inverse=True)
    counts = numpy.bincount(inverse, minlength=len(unique))
    words = [strings[int(h)] for h in unique]
    # Order types as the vocabulary will be: boundaries first, then by falling count (ties by string).
    bos_i, eos_i = words.index(BOS), words.index(EOS)
    rest = sorted((i for i in range(len(words)) if i not in (bos_i, eos_i)), key=lambda i: (-int(counts[i]), words[i]))
    order = numpy.asarray([bos_i, eos_i, *rest], dtype=numpy.int64)
    remap = numpy.empty(len(order), dtype=numpy.int32)
    remap[order] = numpy.arange(len(order), dtype=numpy.int32)
    tokens = remap[inverse.reshape(-1)]
    with atomic_directory(Path(directory)) as tmp:  # another process (a DDP rank) may finish the same entry first
        with open(tmp / "tokens.npy", "wb") as handle:
            numpy.save(handle, tokens)
        types = {"types": [words[i] for i in order], "counts": counts[order].tolist()}
        srsly.write_msgpack(tmp / "types.msgpack", types)
        meta = {"files": [str(f) for f in files], "settings": asdict(settings), "n_tokens": int(len(tokens))}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return TokenStream(Path(directory))
