import pytest

from fixture_paths import FIXTURES
from spacy_elmo.io.hdf5 import write_vocab
from spacy_elmo.pretrain.vocab import UNK_ID, Vocab, VocabError


def test_from_counts_orders_by_frequency_then_word_after_specials():
    words = ["b", "a", "c", "<S>", "</S>", "d"]
    counts = [5, 5, 9, 100, 100, 1]
    vocab = Vocab.from_counts(words, counts)
    assert vocab.words == ["<S>", "</S>", "<UNK>", "c", "a", "b", "d"]


def test_max_size_counts_specials_and_min_count_drops_rare_words():
    words, counts = ["x", "y", "z", "w"], [4, 3, 2, 1]
    assert Vocab.from_counts(words, counts, max_size=5).words == ["<S>", "</S>", "<UNK>", "x", "y"]
    assert Vocab.from_counts(words, counts, min_count=2).words == ["<S>", "</S>", "<UNK>", "x", "y", "z"]
    with pytest.raises(VocabError, match="max_size"):
        Vocab.from_counts(words, counts, max_size=3)


def test_lookup_maps_unknown_words_to_unk():
    vocab = Vocab(["<S>", "</S>", "<UNK>", "the", "cat"])
    assert vocab.lookup(["cat", "dog", "the"]).tolist() == [4, UNK_ID, 3]


def test_bilm_tf_vocab_file_round_trip(tmp_path):
    vocab = Vocab.from_file(FIXTURES / "bilm-tf-train" / "vocab.txt")
    assert vocab.words[:3] == ["<S>", "</S>", "<UNK>"]
    write_vocab(vocab.words, tmp_path / "vocab.txt")
    assert Vocab.from_file(tmp_path / "vocab.txt") == vocab


def test_bad_vocabularies_are_refused_naming_the_problem(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("the\n<S>\n</S>\n<UNK>\n", encoding="utf-8")
    with pytest.raises(VocabError, match="must start with"):
        Vocab.from_file(path)
    path.write_text("<S>\n</S>\n<UNK>\nthe\nthe\n", encoding="utf-8")
    with pytest.raises(VocabError, match="'the' appears twice"):
        Vocab.from_file(path)
