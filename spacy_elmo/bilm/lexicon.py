"""How a model turns words into ids: every biLM has a lexicon. `ByteLexicon` reads UTF-8 bytes (bilm-tf's and
AllenNLP's ids, `chars.py`); `Lexicon` is a model's own vocabularies (ELMoForManyLangs).

A token is framed by the `begin_of_word` and `end_of_word` characters and cut to
`max_characters_per_token - 2` code points; what a vocabulary lacks is its `unknown` entry. The sentence
boundaries' characters are the single entry of that name. Several entries may share an id (the aliases);
an id no entry has is a `gap`. Ids are entry id + 1 (AllenNLP's layout: 0 is "no token"); the word's id,
if any, is one more column after the character ids.
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Union

import numpy

from .. import chars
from ..errors import ModelFileError

ID_SHIFT = 1
_GAP = "\x00unreachable-{}"
CHARACTER_ROLES = ("begin_of_word", "end_of_word", "padding", "unknown")
WORD_ROLES = ("padding", "unknown")


class LexiconError(ModelFileError):
    """A vocabulary that lacks an entry a role names, or a stored lexicon that is malformed."""


def gap(i: int) -> str:
    """The entry at id `i` when no entry has that id: no token and no character is ever looked up as it."""
    return _GAP.format(i)


@dataclass(frozen=True)
class ByteLexicon:
    """bilm-tf's and AllenNLP's ids: a token's UTF-8 bytes (`chars.py`). Stored as null (`to_dict`), as a
    model without vocabularies of its own has always been stored."""

    max_characters_per_token: int

    @property
    def width(self) -> int:
        return self.max_characters_per_token

    def tokens_to_ids(self, tokens: Sequence[str]) -> numpy.ndarray:
        """(n, width) ids of tokens without sentence boundaries."""
        return chars.tokens_to_ids(tokens, self.max_characters_per_token)

    def batch_to_ids(self, sentences: Sequence[Sequence[str]]) -> numpy.ndarray:
        """(B, T + 2, width) ids, each sentence framed by `<S>` and `</S>`; rows padded with 0."""
        return chars.batch_to_ids(sentences, max_characters_per_token=self.max_characters_per_token)

    def to_dict(self) -> None:
        return None


@dataclass
class Lexicon:
    """Character (and optionally word) vocabularies, entries in id order, and the entries' roles."""

    characters: list[str]
    character_roles: dict[str, str]
    max_characters_per_token: int
    words: Optional[list[str]] = None
    word_roles: dict[str, str] = field(default_factory=dict)
    sentence_start: str = "<bos>"
    sentence_end: str = "<eos>"
    character_aliases: dict[str, int] = field(default_factory=dict)
    word_aliases: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """The indexes, checked."""
        self._char_ids = _index(self.characters, self.character_aliases, "character")
        self._word_ids = _index(self.words, self.word_aliases, "word") if self.words is not None else None
        self._roles = self._role_ids(self._char_ids, self.character_roles, CHARACTER_ROLES, "character")
        for boundary in (self.sentence_start, self.sentence_end):
            if boundary not in self._char_ids:
                raise LexiconError(f"the character vocabulary has no entry {boundary!r} (a sentence boundary)")
        self._word_roles = (
            {} if self._word_ids is None else self._role_ids(self._word_ids, self.word_roles, WORD_ROLES, "word")
        )
        if self.max_characters_per_token < 3:
            raise LexiconError(f"max_characters_per_token must be >= 3, got {self.max_characters_per_token}")

    @staticmethod
    def _role_ids(ids: dict[str, int], roles: dict[str, str], names: tuple[str, ...], what: str) -> dict[str, int]:
        for role in names:
            if role not in roles:
                raise LexiconError(f"the {what} vocabulary's role {role!r} names no entry")
            if roles[role] not in ids:
                raise LexiconError(f"the {what} vocabulary has no entry {roles[role]!r} (its {role} entry)")
        return {role: ids[roles[role]] for role in names}

    @property
    def width(self) -> int:
        """Ids a token: its characters, then its word when there is a word vocabulary."""
        return self.max_characters_per_token + (1 if self.words is not None else 0)

    def cut(self, token: str) -> str:
        return token[: self.max_characters_per_token - 2]

    def token_row(self, token: str) -> numpy.ndarray:
        """One token's ids (shifted: 0 is "no token"); the token is cut as `cut` does."""
        token = self.cut(token)
        row = numpy.full(self.width, self._roles["padding"] + ID_SHIFT, dtype=numpy.int64)
        row[0] = self._roles["begin_of_word"] + ID_SHIFT
        if token in (self.sentence_start, self.sentence_end):
            codes = [self._char_ids[token]]
        else:
            codes = [self._char_ids.get(c, self._roles["unknown"]) for c in token]
        row[1 : len(codes) + 1] = numpy.asarray(codes, dtype=numpy.int64) + ID_SHIFT
        row[len(codes) + 1] = self._roles["end_of_word"] + ID_SHIFT
        if self._word_ids is not None:
            row[-1] = self._word_ids.get(token, self._word_roles["unknown"]) + ID_SHIFT
        return row

    def tokens_to_ids(self, tokens: Sequence[str]) -> numpy.ndarray:
        """(n, width) ids of tokens without sentence boundaries."""
        return numpy.array([self.token_row(token) for token in tokens], dtype=numpy.int64).reshape(-1, self.width)

    def batch_to_ids(self, sentences: Sequence[Sequence[str]]) -> numpy.ndarray:
        """(B, T + 2, width) ids, each sentence framed by the sentence boundaries; rows padded with 0."""
        max_len = max((len(s) for s in sentences), default=0) + 2
        out = numpy.zeros((len(sentences), max_len, self.width), dtype=numpy.int64)
        for b, sentence in enumerate(sentences):
            framed = [self.sentence_start, *sentence, self.sentence_end]
            out[b, : len(framed)] = self.tokens_to_ids(framed)
        return out

    def to_dict(self) -> dict[str, Any]:
        """What a native model stores (the aliases only when there are some)."""
        data = asdict(self)
        for key in ("character_aliases", "word_aliases"):
            if not data[key]:
                del data[key]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> "Lexicon":
        if not isinstance(data, dict) or not isinstance(data.get("characters"), list):
            raise LexiconError("malformed lexicon (expected a dict with a 'characters' list)")
        try:
            return cls(
                characters=[str(c) for c in data["characters"]],
                character_roles=dict(data["character_roles"]),
                max_characters_per_token=int(data["max_characters_per_token"]),
                words=[str(w) for w in data["words"]] if data.get("words") is not None else None,
                word_roles=dict(data.get("word_roles") or {}),
                sentence_start=str(data.get("sentence_start", "<bos>")),
                sentence_end=str(data.get("sentence_end", "<eos>")),
                character_aliases=_aliases(data.get("character_aliases")),
                word_aliases=_aliases(data.get("word_aliases")),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise LexiconError(f"malformed lexicon ({err})") from None


def _aliases(data: Any) -> dict[str, int]:
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(i, int) and not isinstance(i, bool) for i in data.values()):
        raise TypeError(f"aliases must map entries to ids, got {data!r:.80}")
    return {str(entry): i for entry, i in data.items()}


def _index(entries: Sequence[str], aliases: dict[str, int], what: str) -> dict[str, int]:
    """entry -> id: the entries by position (gaps left out), then the aliases, each sharing an entry's id."""
    listed = [(entry, i) for i, entry in enumerate(entries) if entry != gap(i)]
    ids: dict[str, int] = {}
    for n, (entry, i) in enumerate([*listed, *aliases.items()]):
        if entry in ids:
            raise LexiconError(f"the {what} vocabulary lists {entry!r} twice (ids {ids[entry]} and {i})")
        if n >= len(listed) and (not 0 <= i < len(entries) or entries[i] == gap(i)):  # an alias
            raise LexiconError(f"the {what} vocabulary's entry {entry!r} shares id {i}, which no entry has")
        ids[entry] = i
    return ids


AnyLexicon = Union[ByteLexicon, Lexicon]


def read_lexicon(data: Any, max_characters_per_token: int) -> AnyLexicon:
    """A stored lexicon; null, what a model without vocabularies of its own stores, is the byte lexicon."""
    if data is None:
        return ByteLexicon(max_characters_per_token)
    return Lexicon.from_dict(data)
