"""MR (fixed seeded split) and SST-5 -> DocBins with exclusive categories."""

import pytest
from spacy.tokens import DocBin
from spacy.vocab import Vocab

from convert_textcat import SST5_LABELS, convert_mr, convert_sst5, read_mr, split_items


def _texts(path):
    return [(doc.text, max(doc.cats, key=doc.cats.get)) for doc in DocBin().from_disk(path).get_docs(Vocab())]


def test_mr_split_is_fixed_by_the_seed_and_covers_every_sentence_once(tmp_path, assets):
    counts = convert_mr(assets / "mr-polarity", tmp_path / "a", seed=0)
    assert counts == {"train": 8530, "dev": 1066, "test": 1066}
    convert_mr(assets / "mr-polarity", tmp_path / "b", seed=0)
    for split in ("train", "dev", "test"):
        assert (tmp_path / "a" / f"{split}.spacy").read_bytes() == (tmp_path / "b" / f"{split}.spacy").read_bytes()
    splits = {s: _texts(tmp_path / "a" / f"{s}.spacy") for s in ("train", "dev", "test")}
    everything = sorted(splits["train"] + splits["dev"] + splits["test"])
    original = sorted((" ".join(text.split()), label) for text, label in read_mr(assets / "mr-polarity"))
    assert [(" ".join(t.split()), label) for t, label in everything] == original
    # both classes in every split, roughly balanced
    for items in splits.values():
        positive = sum(label == "positive" for _, label in items)
        assert 0.4 < positive / len(items) < 0.6


def test_a_different_seed_gives_a_different_split():
    items = [(str(i), "positive") for i in range(100)]
    a = split_items(items, 0, (0.8, 0.1, 0.1))
    b = split_items(items, 1, (0.8, 0.1, 0.1))
    assert a != b
    assert split_items(items, 0, (0.8, 0.1, 0.1)) == a
    with pytest.raises(ValueError, match="sum to 1"):
        split_items(items, 0, (0.8, 0.1, 0.2))


def test_mr_docs_keep_the_gold_tokens_and_exclusive_cats(tmp_path, assets):
    convert_mr(assets / "mr-polarity", tmp_path, seed=0, limit=20)
    docs = list(DocBin().from_disk(tmp_path / "dev.spacy").get_docs(Vocab()))
    assert len(docs) == 20
    for doc in docs:
        assert set(doc.cats) == {"positive", "negative"}
        assert sorted(doc.cats.values()) == [0.0, 1.0]
        assert doc.has_unknown_spaces  # built from tokens: training uses them as they are


def test_sst5(tmp_path):
    source = tmp_path / "train.txt"
    source.write_text("4 a stirring , funny film\n1 apparently reassembled .\n\n2 fine\n", encoding="utf8")
    assert convert_sst5(source, tmp_path / "train.spacy") == 3
    docs = list(DocBin().from_disk(tmp_path / "train.spacy").get_docs(Vocab()))
    assert [max(d.cats, key=d.cats.get) for d in docs] == ["very_positive", "negative", "neutral"]
    assert set(docs[0].cats) == set(SST5_LABELS)
    assert [t.text for t in docs[1]] == ["apparently", "reassembled", "."]
    bad = tmp_path / "bad.txt"
    bad.write_text("7 not a label\n", encoding="utf8")
    with pytest.raises(ValueError, match="bad.txt:1"):
        convert_sst5(bad, tmp_path / "bad.spacy")
