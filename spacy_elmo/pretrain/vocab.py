"""The softmax vocabulary: `<S>`, `</S>`, `<UNK>`, then words by falling frequency (bilm-tf's order).

Frequency order is not cosmetic: the log-uniform sampler of the sampled softmax assumes that a
word's id is its frequency rank, so the vocabulary must be sorted so.
"""

from collections.abc import Iterable, Sequence
from typing import Optional, Union

import numpy

from ..disk import PathLike
from ..io.hdf5 import read_vocab

BOS, EOS, UNK = "<S>", "</S>", "<UNK>"
SPECIALS = (BOS, EOS, UNK)
UNK_ID = 2


class VocabError(ValueError):
    """A vocabulary file or setting that cannot be used for the softmax."""


class Vocab:
    """Words <-> softmax ids; unknown words map to `<UNK>`."""

    def __init__(self, words: Sequence[str], source: str = "vocabulary") -> None:
        words = list(words)
        if words[:3] != list(SPECIALS):
            raise VocabError(f"{source}: must start with {', '.join(SPECIALS)} (one a line), got {words[:3]}")
        index: dict[str, int] = {}
        for i, word in enumerate(words):
            if word in index:
                raise VocabError(f"{source}: word {word!r} appears twice (lines {index[word] + 1} and {i + 1})")
            index[word] = i
        self.words = words
        self.index = index

    def __len__(self) -> int:
        return len(self.words)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and other.words == self.words

    def lookup(self, words: Iterable[str]) -> numpy.ndarray:
        """Softmax ids of words (int32), `<UNK>` for the unknown ones."""
        get = self.index.get
        return numpy.fromiter((get(w, UNK_ID) for w in words), dtype=numpy.int32)

    @classmethod
    def from_counts(
        cls,
        words: Sequence[str],
        counts: Union[Sequence[int], numpy.ndarray],
        max_size: Optional[int] = None,
        min_count: int = 1,
    ) -> "Vocab":
        """The most frequent words (ties broken by the word, for a reproducible order); `max_size` counts the
        three special tokens."""
        if max_size is not None and max_size < len(SPECIALS) + 1:
            raise VocabError(f"vocab.max_size is {max_size}; it must leave room for at least one word after {SPECIALS}")
        count_array = numpy.asarray(counts, dtype=numpy.int64)
        keep = [i for i, w in enumerate(words) if w not in SPECIALS and count_array[i] >= min_count]
        keep.sort(key=lambda i: (-int(count_array[i]), words[i]))
        if max_size is not None:
            keep = keep[: max_size - len(SPECIALS)]
        return cls([*SPECIALS, *(words[i] for i in keep)], source="built vocabulary")

    @classmethod
    def from_file(cls, path: PathLike) -> "Vocab":
        """A bilm-tf vocabulary file: one word a line, `<S>`, `</S>`, `<UNK>` first."""
        return cls(read_vocab(path), source=str(path))
