"""The GPU session's pretraining text, made on this machine so the GPU spends no time tokenizing:
the Gutenberg 10M-word sample tokenized as `pretrain` tokenizes "text" (spaCy's tokenizer and
sentencizer), one sentence a line, plus the project tasks' training text (never dev or test), and the
dev text (the first 20,000 words of Gutenberg valid, likewise). Both in the "bilm-tf" format. Beside them
the held-out texts that the shipped model's card measures perplexity on, as it reads them (raw Gutenberg
test text, its first 40,000 words: `evaluate --max-tokens 30000` counts raw words; WikiText-103 valid as it
is), so the session measures a new model at once, and the shipped one to the card's figures.

    python benchmarks/gpu/corpus.py DATA_DIR TASK_TEXT OUT_DIR
    # DATA_DIR: shared/data; TASK_TEXT: project/scripts/task_text.py's output for the WNUT-17 train
    # split and MR's seed-0 train split -> OUT_DIR/train.txt.xz, OUT_DIR/dev.txt,
    # OUT_DIR/gutenberg_test.txt.gz, OUT_DIR/wikitext_valid.tokens

All that a GPU session carries in `.whl` (about 27 MB), from a fresh clone (4 minutes on the Xeon, the same bytes):

    python project/scripts/tasks.py convert --mr-seed 0
    python project/scripts/task_text.py /tmp/task_text.txt corpus/ner/train.spacy corpus/textcat/train.spacy
    python benchmarks/gpu/corpus.py ../shared/data /tmp/task_text.txt .whl
    python -m spacy_elmo convert en_elmo_small /tmp/shipped --to bilm-tf && cp /tmp/shipped/vocab.txt .whl/
    bash benchmarks/gpu/wheels.sh && git archive HEAD -- $(git ls-files '*.py' '*.sh' '*.cfg' '*.toml') \
        | xz -9 > .whl/tree.tar.xz
"""

import argparse
import gzip
import lzma
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy

from spacy_elmo.pretrain.corpus import CorpusSettings, prepare_corpus


def sentences(path: Path, cache: Path, max_tokens: int = 0) -> Iterator[str]:
    """The sentences of a raw text file as the pretraining reader frames them, tokens space-joined."""
    settings = CorpusSettings(format="text", max_tokens=max_tokens or None)
    stream = prepare_corpus(path, settings, cache_dir=cache)
    tokens, types = numpy.asarray(stream.tokens), stream.types
    for start, end in zip(numpy.flatnonzero(tokens == 0), numpy.flatnonzero(tokens == 1)):
        yield " ".join(types[i] for i in tokens[start + 1 : end])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("task_text", type=Path)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    gutenberg = args.data_dir / "gutenberg-en"
    with tempfile.TemporaryDirectory() as cache:
        with lzma.open(args.out_dir / "train.txt.xz", "wt", encoding="utf-8", preset=9) as out:
            for line in sentences(gutenberg / "train_10M_sample.txt.gz", Path(cache)):
                out.write(line + "\n")
            out.write(args.task_text.read_text(encoding="utf-8"))
        dev = list(sentences(gutenberg / "valid.txt.gz", Path(cache), max_tokens=20000))
        (args.out_dir / "dev.txt").write_text("".join(line + "\n" for line in dev), encoding="utf-8")
    with gzip.open(gutenberg / "test.txt.gz", "rt", encoding="utf-8") as text:
        with gzip.open(args.out_dir / "gutenberg_test.txt.gz", "wt", encoding="utf-8") as out:
            words = 0
            for line in text:
                out.write(line)
                words += len(line.split())
                if words > 40000:
                    break
    shutil.copyfile(args.data_dir / "wikitext" / "wiki103.valid.tokens", args.out_dir / "wikitext_valid.tokens")


if __name__ == "__main__":
    main()
