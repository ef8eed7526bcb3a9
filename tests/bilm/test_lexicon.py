"""A model's own vocabularies (`Lexicon`): entries sharing an id, ids no entry has, word boundaries."""

import pytest

from efml_models import CHARS, WORDS
from spacy_elmo.bilm.lexicon import ID_SHIFT, Lexicon, LexiconError, gap
from spacy_elmo.io.efml import CHARACTER_ROLES, WORD_ROLES


def lexicon(**changes) -> Lexicon:
    settings = {
        "characters": CHARS,
        "character_roles": dict(CHARACTER_ROLES),
        "max_characters_per_token": 12,
        "words": WORDS,
        "word_roles": dict(WORD_ROLES),
        **changes,
    }
    return Lexicon(**settings)


def test_a_word_vocabulary_without_sentence_boundaries_reads_them_as_its_unknown_word():
    """As ELMoForManyLangs' create_one_batch: word2id.get('<bos>', oov_id)."""
    words = [w for w in WORDS if w not in ("<bos>", "<eos>")]
    ids = lexicon(words=words).batch_to_ids([["the", "cat"]])[0]
    unknown = words.index("<oov>") + ID_SHIFT
    assert [int(i) for i in ids[:, -1]] == [unknown, words.index("the") + 1, words.index("cat") + 1, unknown]
    assert (ids[:, :-1] == lexicon().batch_to_ids([["the", "cat"]])[0][:, :-1]).all()  # the characters as before


def test_the_character_vocabulary_still_needs_its_sentence_boundaries():
    """ELMoForManyLangs writes `char2id.get('<bos>')` (None when missing) into its id tensor: it fails."""
    with pytest.raises(LexiconError, match=r"the character vocabulary has no entry '<bos>' \(a sentence boundary\)"):
        lexicon(characters=[c for c in CHARS if c != "<bos>"])


def test_entries_sharing_an_id_read_its_row_and_gaps_are_read_by_nothing():
    characters = [*CHARS[:-1], gap(len(CHARS) - 1)]  # the last id has no entry of its own ...
    shared = lexicon(characters=characters, character_aliases={CHARS[-1]: CHARS.index("a")})  # ... it reads a's row
    assert shared.token_row(CHARS[-1])[1] == shared.token_row("a")[1] == CHARS.index("a") + ID_SHIFT
    words = [*WORDS[:-1], gap(len(WORDS) - 1)]
    shared_words = lexicon(words=words, word_aliases={WORDS[-1]: WORDS.index("cat"), "kitten": WORDS.index("cat")})
    assert shared_words.token_row("kitten")[-1] == shared_words.token_row(WORDS[-1])[-1] == WORDS.index("cat") + 1
    assert shared_words.token_row(gap(len(WORDS) - 1))[-1] == WORDS.index("<oov>") + 1  # a gap is no word
    assert Lexicon.from_dict(shared_words.to_dict()) == shared_words
    assert "word_aliases" not in lexicon().to_dict() and "character_aliases" not in lexicon().to_dict()


@pytest.mark.parametrize(
    "aliases, problem",
    [
        ({"a": 1}, r"lists 'a' twice"),
        ({"x": 99}, r"entry 'x' shares id 99, which no entry has"),
        ({"x": -1}, r"entry 'x' shares id -1, which no entry has"),
    ],
)
def test_aliases_that_name_no_entry_or_repeat_one_are_refused(aliases, problem):
    with pytest.raises(LexiconError, match=problem):
        lexicon(character_aliases=aliases)
    with pytest.raises(LexiconError, match=r"malformed lexicon"):
        Lexicon.from_dict({**lexicon().to_dict(), "character_aliases": {"x": "1"}})
