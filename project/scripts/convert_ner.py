"""Token-per-line NER data (WNUT-17, CoNLL-2003) -> a spaCy DocBin, one Doc per sentence.

    python project/scripts/convert_ner.py wnut  assets/wnut17/wnut17train.conll corpus/ner/train.spacy
    python project/scripts/convert_ner.py conll /path/to/conll2003/train.txt   corpus/conll/train.spacy

Why one Doc per sentence: ELMo is a sentence-level model (the paper embeds each sentence with
fresh state), so the gold sentence is the natural unit; the `elmo` pipe then never has to guess
sentence boundaries.

Formats:
- wnut: `token<TAB>tag`, IOB2. Sentences end at an empty line OR a line holding only whitespace
  (many separators in the WNUT-17 train file are a lone tab).
- conll: `TOKEN POS CHUNK NER` separated by spaces, IOB2 (IOB1 is also read correctly), with
  `-DOCSTART-` lines marking documents; those lines are skipped.
"""

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Optional

from spacy.tokens import Doc, DocBin, Span
from spacy.vocab import Vocab

from common import convert_main

Sentence = tuple[list[str], list[str]]


def read_wnut(lines: Sequence[str], source: str = "<wnut>") -> Iterator[Sentence]:
    """Sentences of a `token<TAB>tag` file; blank or whitespace-only lines end a sentence."""
    words: list[str] = []
    tags: list[str] = []
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            if words:
                yield words, tags
            words, tags = [], []
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0] or not fields[1].strip():
            raise ValueError(f"{source}:{number}: expected 'token<TAB>tag', got {line!r}")
        words.append(fields[0])
        tags.append(fields[1].strip())
    if words:
        yield words, tags


def read_conll(lines: Sequence[str], source: str = "<conll>") -> Iterator[Sentence]:
    """Sentences of a CoNLL-2003 file (`TOKEN POS CHUNK NER`), skipping `-DOCSTART-` lines."""
    words: list[str] = []
    tags: list[str] = []
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if words:
                yield words, tags
            words, tags = [], []
            continue
        if len(fields) < 2:
            raise ValueError(f"{source}:{number}: expected 'TOKEN POS CHUNK NER', got {line.rstrip()!r}")
        words.append(fields[0])
        tags.append(fields[-1])
    if words:
        yield words, tags


def iob_spans(tags: Sequence[str], source: str = "") -> list[tuple[int, int, str]]:
    """(start, end, label) token spans of IOB2 tags; also right for IOB1 and for an I- that
    opens an entity after O or after another type (a common slip in hand-labelled data)."""
    spans: list[tuple[int, int, str]] = []
    start: Optional[int] = None
    label = ""
    for i, tag in enumerate(list(tags) + ["O"]):
        if tag == "O":
            prefix, kind = "O", ""
        elif len(tag) > 2 and tag[1] == "-" and tag[0] in "BI":
            prefix, kind = tag[0], tag[2:]
        else:
            raise ValueError(f"{source}: token {i}: tag {tag!r} is not O, B-TYPE or I-TYPE")
        continues = prefix == "I" and start is not None and kind == label
        if start is not None and not continues:
            spans.append((start, i, label))
            start = None
        if prefix in "BI" and not continues:
            start, label = i, kind
    return spans


def sentence_doc(vocab: Vocab, words: list[str], tags: list[str], source: str = "") -> Doc:
    """A Doc over the gold tokens (spaces unknown) with gold entities and one sentence."""
    doc = Doc(vocab, words=words)
    doc.ents = [Span(doc, s, e, label=label) for s, e, label in iob_spans(tags, source)]
    if len(doc):
        doc[0].is_sent_start = True
        for token in doc[1:]:
            token.is_sent_start = False
    return doc


def convert(fmt: str, input_path: Path, output_path: Path, limit: int = 0) -> int:
    """Write `output_path` (.spacy); returns the number of sentences written."""
    if not input_path.is_file():
        raise FileNotFoundError(f"NER data file not found: {input_path}")
    readers = {"wnut": read_wnut, "conll": read_conll}
    if fmt not in readers:
        raise ValueError(f"unknown NER format {fmt!r}; expected one of {sorted(readers)}")
    vocab = Vocab()  # only strings are stored in the DocBin; no language data needed
    lines = input_path.read_text(encoding="utf8").splitlines()
    db = DocBin(store_user_data=False)
    count = 0
    for index, (words, tags) in enumerate(readers[fmt](lines, str(input_path))):
        if limit and count >= limit:
            break
        db.add(sentence_doc(vocab, words, tags, f"{input_path} sentence {index}"))
        count += 1
    if count == 0:
        raise ValueError(f"{input_path}: no sentences found (is it in the {fmt!r} format?)")
    output_path.parent.mkdir(parents=True, exist_ok=True)
    db.to_disk(output_path)
    return count


def main(argv: Optional[list[str]] = None) -> None:
    convert_main(__doc__, convert, ("wnut", "conll"), "limit", "sentences", argv)


if __name__ == "__main__":
    main()
