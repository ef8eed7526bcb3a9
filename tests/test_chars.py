import numpy
import pytest

from spacy_elmo import chars


def raw(ids):
    """Back to bilm-tf's unshifted ids, for reading the expectations."""
    return ids - chars.ID_SHIFT


def test_word_layout_matches_bilm_tf():
    ids = chars.batch_to_ids([["ab"]], add_boundaries=False)
    assert ids.shape == (1, 1, 50) and ids.dtype == numpy.int32
    row = raw(ids[0, 0])
    assert row[:4].tolist() == [chars.BOW_CHAR, ord("a"), ord("b"), chars.EOW_CHAR]
    assert (row[4:] == chars.PAD_CHAR).all()


def test_boundaries_and_padding():
    ids = chars.batch_to_ids([["a", "b", "c"], ["d"]])
    assert ids.shape == (2, 5, 50)
    for row in range(2):
        assert raw(ids[row, 0, :3]).tolist() == [chars.BOW_CHAR, chars.BOS_CHAR, chars.EOW_CHAR]
    assert raw(ids[0, 4, :3]).tolist() == [chars.BOW_CHAR, chars.EOS_CHAR, chars.EOW_CHAR]
    assert raw(ids[1, 2, :3]).tolist() == [chars.BOW_CHAR, chars.EOS_CHAR, chars.EOW_CHAR]
    # positions after a short row's </S> are "no token": all zeros
    assert (ids[1, 3:] == 0).all()
    assert (ids > 0).all(-1).sum() == 5 + 3


def test_literal_boundary_tokens_are_boundaries():
    ids = chars.tokens_to_ids(["<S>", "</S>"])
    assert raw(ids[0, :3]).tolist() == [chars.BOW_CHAR, chars.BOS_CHAR, chars.EOW_CHAR]
    assert raw(ids[1, :3]).tolist() == [chars.BOW_CHAR, chars.EOS_CHAR, chars.EOW_CHAR]


@pytest.mark.parametrize(
    "token",
    ["x" * 300, "é" * 40, "日本語のテキスト" * 5, "👍🏽" * 20, "e\u0301\u0301", "\u00a0", "a\ud800b", ""],
)
def test_unicode_and_long_tokens(token):
    ids = chars.tokens_to_ids([token])[0]
    encoded = token.encode("utf-8", "ignore")[:48]
    n = len(encoded)
    assert raw(ids[0]) == chars.BOW_CHAR
    assert raw(ids[1 : n + 1]).tolist() == list(encoded)
    assert raw(ids[n + 1]) == chars.EOW_CHAR
    assert (raw(ids[n + 2 :]) == chars.PAD_CHAR).all()
    assert ids.max() < chars.N_CHARACTERS and ids.min() >= 1


def test_truncation_keeps_end_of_word():
    ids = chars.tokens_to_ids(["y" * 49, "z" * 48])
    assert raw(ids[:, 49]).tolist() == [chars.EOW_CHAR, chars.EOW_CHAR]
    assert (raw(ids[:, 1:49]) == numpy.array([[ord("y")], [ord("z")]])).all()


def test_vectorised_equals_per_token_reference():
    sentences = [["The", "cat", "sat", "."], [], ["naïve", "café", "x" * 60], ["<S>", "ok"]]
    ids = chars.batch_to_ids(sentences)
    for row, sentence in enumerate(sentences):
        for col, token in enumerate(sentence):
            assert (ids[row, col + 1] == chars.tokens_to_ids([token])[0]).all()


def test_empty_inputs():
    assert chars.batch_to_ids([]).shape == (0, 0, 50)
    assert chars.tokens_to_ids([]).shape == (0, 50)
    assert chars.batch_to_ids([[]]).shape == (1, 2, 50)


def test_max_characters_option():
    ids = chars.batch_to_ids([["abcdef"]], add_boundaries=False, max_characters_per_token=5)
    assert raw(ids[0, 0]).tolist() == [chars.BOW_CHAR, ord("a"), ord("b"), ord("c"), chars.EOW_CHAR]
    with pytest.raises(ValueError, match="max_characters_per_token"):
        chars.batch_to_ids([["a"]], max_characters_per_token=2)


def test_ids_to_text_round_trip():
    tokens = ["<S>", "hello", "wörld", "</S>"]
    assert chars.ids_to_text(chars.tokens_to_ids(tokens)) == tokens
