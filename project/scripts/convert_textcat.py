"""Sentence classification data -> spaCy DocBins with exclusive categories (`textcat`).

    python project/scripts/convert_textcat.py mr assets/mr-polarity corpus/textcat --seed 0
    python project/scripts/convert_textcat.py sst5 /path/to/sst5/train.txt corpus/sst5/train.spacy

MR (Pang and Lee 2005) has no official split. We make a fixed one: all 10,662 sentences
(positive file first, then negative, in file order) are shuffled with `random.Random(seed)`
(seed 0 by default) and cut 80/10/10 into train/dev/test, so the same files always give the same
split. SST-5 lines are `LABEL sentence` with LABEL 0-4 (very negative .. very positive).

Texts in both sets are already tokenized (space separated), so each Doc is built over those tokens
(spaces unknown): training and evaluation then see exactly the gold tokens.
"""

import argparse
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab

from common import exit_on

MR_LABELS = ("positive", "negative")
SST5_LABELS = ("very_negative", "negative", "neutral", "positive", "very_positive")
Item = tuple[str, str]  # (text, label)


def cats_for(label: str, labels: Sequence[str]) -> dict[str, float]:
    if label not in labels:
        raise ValueError(f"label {label!r} is not one of {list(labels)}")
    return {name: float(name == label) for name in labels}


def make_docs(vocab: Vocab, items: Sequence[Item], labels: Sequence[str]) -> DocBin:
    db = DocBin(store_user_data=False)
    for text, label in items:
        doc = Doc(vocab, words=text.split())
        doc.cats = cats_for(label, labels)
        db.add(doc)
    return db


def read_mr(directory: Path) -> list[Item]:
    """Every MR sentence with its label: rt-polarity.pos, then rt-polarity.neg, in file order."""
    items: list[Item] = []
    for name, label in (("rt-polarity.pos", "positive"), ("rt-polarity.neg", "negative")):
        path = directory / name
        if not path.is_file():
            raise FileNotFoundError(f"MR file not found: {path} (expected rt-polarity.pos and .neg in {directory})")
        # the original release is Latin-1; the copy in assets/ is plain ASCII, which Latin-1 reads the same
        for line in path.read_text(encoding="latin-1").splitlines():
            if line.strip():
                items.append((line.strip(), label))
    return items


def split_items(items: Sequence[Item], seed: int, fractions: tuple[float, float, float]) -> dict[str, list[Item]]:
    """A seeded shuffle, then train/dev/test cut by `fractions` (which must sum to 1)."""
    if abs(sum(fractions) - 1.0) > 1e-9 or min(fractions) < 0:
        raise ValueError(f"split fractions must be >= 0 and sum to 1, got {fractions}")
    order = list(items)
    random.Random(seed).shuffle(order)
    n_train = int(round(len(order) * fractions[0]))
    n_dev = int(round(len(order) * fractions[1]))
    return {
        "train": order[:n_train],
        "dev": order[n_train : n_train + n_dev],
        "test": order[n_train + n_dev :],
    }


def read_sst5(path: Path) -> list[Item]:
    """`LABEL sentence` lines, LABEL an integer 0-4."""
    if not path.is_file():
        raise FileNotFoundError(f"SST-5 file not found: {path}")
    items: list[Item] = []
    for number, line in enumerate(path.read_text(encoding="utf8").splitlines(), 1):
        if not line.strip():
            continue
        head, _, text = line.strip().partition(" ")
        if head not in {"0", "1", "2", "3", "4"} or not text.strip():
            raise ValueError(f"{path}:{number}: expected 'LABEL sentence' with LABEL 0-4, got {line[:60]!r}")
        items.append((text.strip(), SST5_LABELS[int(head)]))
    return items


def convert_mr(
    directory: Path, output_dir: Path, seed: int = 0, fractions=(0.8, 0.1, 0.1), limit: int = 0
) -> dict[str, int]:
    """Write train/dev/test.spacy under `output_dir`; `limit` caps each split (for quick runs)."""
    vocab = Vocab()
    splits = split_items(read_mr(directory), seed, tuple(fractions))
    output_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, items in splits.items():
        items = items[:limit] if limit else items
        make_docs(vocab, items, MR_LABELS).to_disk(output_dir / f"{name}.spacy")
        counts[name] = len(items)
    return counts


def convert_sst5(path: Path, output: Path, limit: int = 0) -> int:
    items = read_sst5(path)
    items = items[:limit] if limit else items
    output.parent.mkdir(parents=True, exist_ok=True)
    make_docs(Vocab(), items, SST5_LABELS).to_disk(output)
    return len(items)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("format", choices=["mr", "sst5"])
    parser.add_argument("input", type=Path, help="mr: the directory of rt-polarity.pos/.neg; sst5: one split's file")
    parser.add_argument("output", type=Path, help="mr: an output directory; sst5: the output .spacy file")
    parser.add_argument("--seed", type=int, default=0, help="mr: the split's shuffle seed")
    parser.add_argument("--split", type=float, nargs=3, default=(0.8, 0.1, 0.1), metavar=("TRAIN", "DEV", "TEST"))
    parser.add_argument("--limit", type=int, default=0, help="keep at most N documents per split (0 = all)")
    args = parser.parse_args(argv)
    with exit_on():
        if args.format == "mr":
            counts = convert_mr(args.input, args.output, args.seed, tuple(args.split), args.limit)
            print(f"wrote MR split (seed {args.seed}) to {args.output}: {counts}")
        else:
            count = convert_sst5(args.input, args.output, args.limit)
            print(f"wrote {count} SST-5 sentences to {args.output}")


if __name__ == "__main__":
    main()
