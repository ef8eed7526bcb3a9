"""The tokens of .spacy files as plain text, one document a line: unlabeled in-domain text to
fine-tune the biLM on (the paper's domain adaptation, Peters et al. 2018, sec. 3.4).

    python project/scripts/task_text.py corpus/domain/train.txt corpus/ner/train.spacy corpus/textcat/train.spacy

Only training splits should be given: the tasks' dev and test text stays unseen. The output is in
the pretraining reader's "tokenized" format (whitespace-separated tokens, a line a paragraph).
"""

import argparse
from pathlib import Path
from typing import Optional

from spacy.tokens import DocBin
from spacy.vocab import Vocab

from common import exit_on


def write_text(output: Path, sources: list[Path]) -> int:
    """Write every doc of `sources` as a line of tokens; returns the number of tokens written."""
    output.parent.mkdir(parents=True, exist_ok=True)
    n_tokens = 0
    vocab = Vocab()
    with output.open("w", encoding="utf8") as out:
        for source in sources:
            if not source.is_file():
                raise FileNotFoundError(f"training file not found: {source}")
            for doc in DocBin().from_disk(source).get_docs(vocab):
                words = [t.text for t in doc if t.text.strip()]
                if words:
                    out.write(" ".join(words) + "\n")
                    n_tokens += len(words)
    if n_tokens == 0:
        raise ValueError(f"no tokens in {', '.join(map(str, sources))}")
    return n_tokens


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("sources", type=Path, nargs="+", help=".spacy training files")
    args = parser.parse_args(argv)
    with exit_on():
        n_tokens = write_text(args.output, args.sources)
    print(f"wrote {n_tokens} tokens to {args.output}")


if __name__ == "__main__":
    main()
