"""Raw text (plain or .gz) -> one paragraph a line, blank lines between, optionally capped at N words.

    python project/scripts/prepare_corpus.py gutenberg assets/gutenberg/train_sample.txt.gz corpus/pretrain/train.txt
    python project/scripts/prepare_corpus.py wikitext assets/wikitext/wiki103.valid.tokens \
        corpus/heldout/wikitext.txt --max-words 50000

Why: Project Gutenberg text is hard-wrapped at ~70 columns, so a sentence runs over several
lines; joining each paragraph into one line lets the tokenizer and sentence splitter see whole
sentences. Paragraphs stay separated by a blank line, which is what the pretraining corpus reader's
"text" format expects. WikiText-103 is already tokenized, with `@-@`-style escapes for split
hyphens and numbers and ` = Heading = ` lines; headings are dropped, the escapes undone, and
`<unk>` is kept as a word.
"""

import gzip
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Optional, TextIO

from common import convert_main

WIKITEXT_ESCAPES = {" @-@ ": "-", " @,@ ": ",", " @.@ ": "."}
WIKITEXT_HEADING = re.compile(r"^\s*=( =)*\s.*\s=( =)*\s*$")


def open_text(path: Path) -> TextIO:
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf8")
    return path.open("r", encoding="utf8")


def gutenberg_paragraphs(lines: Iterable[str]) -> Iterator[str]:
    """Blank-line-separated blocks of wrapped lines, each joined into one whitespace-normalised line."""
    block: list[str] = []
    for line in lines:
        if line.strip():
            block.append(line.strip())
        elif block:
            yield " ".join(" ".join(block).split())
            block = []
    if block:
        yield " ".join(" ".join(block).split())


def wikitext_paragraphs(lines: Iterable[str]) -> Iterator[str]:
    """Article paragraphs of a WikiText `.tokens` file, headings dropped, `@x@` escapes undone."""
    for line in lines:
        if not line.strip() or WIKITEXT_HEADING.match(line):
            continue
        text = f" {line.strip()} "
        for escaped, plain in WIKITEXT_ESCAPES.items():
            text = text.replace(escaped, plain)
        yield " ".join(text.split())


def cap_words(paragraphs: Iterable[str], max_words: int) -> Iterator[str]:
    """The paragraphs up to the one that reaches `max_words` (0 = no cap); whole paragraphs only."""
    total = 0
    for paragraph in paragraphs:
        yield paragraph
        total += len(paragraph.split())
        if max_words and total >= max_words:
            return


def prepare(fmt: str, input_path: Path, output_path: Path, max_words: int = 0) -> int:
    """Write `output_path`; returns the number of words written."""
    readers = {"gutenberg": gutenberg_paragraphs, "wikitext": wikitext_paragraphs}
    if fmt not in readers:
        raise ValueError(f"unknown corpus format {fmt!r}; expected one of {sorted(readers)}")
    output_path.parent.mkdir(parents=True, exist_ok=True)
    words = 0
    with open_text(input_path) as source, output_path.open("w", encoding="utf8") as out:
        for paragraph in cap_words(readers[fmt](source), max_words):
            out.write(paragraph + "\n\n")
            words += len(paragraph.split())
    if words == 0:
        raise ValueError(f"{input_path}: no text found")
    return words


def main(argv: Optional[list[str]] = None) -> None:
    convert_main(__doc__, prepare, ("gutenberg", "wikitext"), "max-words", "words", argv)


if __name__ == "__main__":
    main()
