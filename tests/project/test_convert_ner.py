"""WNUT-17 / CoNLL-2003 -> DocBin: sentence separators, IOB spans, the real files."""

from pathlib import Path

import pytest
from spacy.tokens import DocBin
from spacy.vocab import Vocab

from convert_ner import convert, iob_spans, read_conll, read_wnut


def test_wnut_lone_tab_and_blank_lines_both_end_sentences():
    lines = ["a\tO", "b\tB-person", "\t", "c\tO", "", "d\tB-location", " \t ", "", "e\tO"]
    sentences = list(read_wnut(lines))
    assert [words for words, _ in sentences] == [["a", "b"], ["c"], ["d"], ["e"]]
    assert sentences[0][1] == ["O", "B-person"]


def test_wnut_rejects_a_line_without_a_tag():
    with pytest.raises(ValueError, match="line 2|:2:"):
        list(read_wnut(["a\tO", "b"], "x.conll"))


@pytest.mark.parametrize(
    "tags,spans",
    [
        (["B-PER", "I-PER", "O", "B-LOC"], [(0, 2, "PER"), (3, 4, "LOC")]),
        (["I-PER", "I-PER", "O"], [(0, 2, "PER")]),  # IOB1 / a slip: I- opens an entity
        (["B-PER", "B-PER"], [(0, 1, "PER"), (1, 2, "PER")]),  # two adjacent entities
        (["B-PER", "I-LOC", "I-LOC"], [(0, 1, "PER"), (1, 3, "LOC")]),  # type change inside
        (["O", "O"], []),
        (["B-creative-work", "I-creative-work"], [(0, 2, "creative-work")]),  # labels with hyphens
    ],
)
def test_iob_spans(tags, spans):
    assert iob_spans(tags) == spans


def test_iob_spans_rejects_unknown_tags():
    with pytest.raises(ValueError, match="U-PER"):
        iob_spans(["O", "U-PER"])


def test_conll_skips_docstart_and_reads_the_last_column():
    lines = [
        "-DOCSTART- -X- -X- O",
        "",
        "EU NNP B-NP B-ORG",
        "rejects VBZ B-VP O",
        "German JJ B-NP B-MISC",
        "",
        "Peter NNP B-NP B-PER",
        "Blackburn NNP I-NP I-PER",
    ]
    sentences = list(read_conll(lines))
    assert sentences == [
        (["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"]),
        (["Peter", "Blackburn"], ["B-PER", "I-PER"]),
    ]


def _count_b_tags(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf8").splitlines() if line.split("\t")[-1].startswith("B-"))


def test_the_wnut_train_file_converts_with_every_sentence_and_entity(tmp_path, assets):
    source = assets / "wnut17" / "wnut17train.conll"
    output = tmp_path / "train.spacy"
    assert convert("wnut", source, output) == 3394  # 2,394 lone-tab and 1,000 blank separators
    docs = list(DocBin().from_disk(output).get_docs(Vocab()))
    assert len(docs) == 3394
    assert sum(len(doc.ents) for doc in docs) == _count_b_tags(source)
    first = docs[0]
    assert [t.text for t in first[:3]] == ["@paulwalk", "It", "'s"]
    assert [(e.text, e.label_) for e in first.ents] == [("Empire State Building", "location"), ("ESB", "location")]
    assert all(sum(t.is_sent_start for t in doc) == 1 for doc in docs[:50])


def test_limit_and_missing_file(tmp_path, assets):
    source = assets / "wnut17" / "emerging.dev.conll"
    assert convert("wnut", source, tmp_path / "dev.spacy", limit=7) == 7
    with pytest.raises(FileNotFoundError, match="nope.conll"):
        convert("wnut", tmp_path / "nope.conll", tmp_path / "x.spacy")
