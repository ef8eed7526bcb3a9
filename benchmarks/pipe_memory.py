"""Peak resident memory of a long `nlp.pipe` stream through the `elmo` pipe with outputs dropped.

    python benchmarks/pipe_memory.py [--model PATH] [--tokens 1000000] [--text PATH]

Docs are the lines of the Gutenberg validation split ($SPACY_ELMO_LONG_TEXT or
../shared/data/gutenberg-en/valid.txt.gz), each up to --doc-tokens tokens, embedded with
store="none" and thrown away as they come out. Peak RSS (VmHWM) is read after the first 100k tokens
(--first-tokens) and at the end: a flat pipe grows by well under 10% between the two. The model defaults to the
bilm-tf test fixture so that a million tokens fit in minutes on a laptop CPU.
"""

import argparse
import gzip
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import spacy

from common import SMOKE_HELP, describe_machine, emit

ROOT = Path(__file__).parent.parent
DEFAULT_TEXT = os.environ.get("SPACY_ELMO_LONG_TEXT", str(ROOT.parent / "shared/data/gutenberg-en/valid.txt.gz"))


def peak_rss_mb() -> float:
    for line in open("/proc/self/status", encoding="utf-8"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def generated_lines() -> Iterator[str]:
    """Random lines of frequent words, for --smoke (no data files needed)."""
    rng = random.Random(0)
    words = "the of and to in a is that for it as was with be by on not he I this are or his from at".split()
    while True:
        yield " ".join(rng.choice(words) for _ in range(20)) + " ."


def lines(path: Path, smoke: bool) -> Iterator[str]:
    if smoke:
        yield from generated_lines()
        return
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        yield from handle


def texts(path: Path, doc_tokens: int, smoke: bool = False) -> Iterator[str]:
    """Docs of `doc_tokens` whitespace tokens each, cut from the text's lines."""
    buffer: list[str] = []
    for line in lines(path, smoke):
        buffer.extend(line.split())
        while len(buffer) >= doc_tokens:
            yield " ".join(buffer[:doc_tokens])
            buffer = buffer[doc_tokens:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(ROOT / "tests/fixtures/elmo-fixture"))
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--doc-tokens", type=int, default=200)
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--first-tokens", type=int, default=100_000, help="read the first peak after this many")
    parser.add_argument("--output", default="")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP + "; generated text")
    args = parser.parse_args()
    if args.smoke:
        args.tokens, args.first_tokens, args.doc_tokens = 1000, 500, 50
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"model": {"path": args.model}, "store": "none"})
    seen, at_100k, start = 0, None, time.perf_counter()
    for doc in nlp.pipe(texts(Path(args.text), args.doc_tokens, args.smoke), batch_size=64):
        seen += len(doc)
        if at_100k is None and seen >= args.first_tokens:
            at_100k = peak_rss_mb()
        if seen >= args.tokens:
            break
    end = peak_rss_mb()
    seconds = time.perf_counter() - start
    emit(
        {
            "bench": "pipe_memory",
            "model": args.model,
            "tokens": seen,
            "peak_rss_mb_at_100k": round(at_100k or float("nan"), 1),
            "peak_rss_mb_at_end": round(end, 1),
            "growth": round(end / at_100k - 1, 4) if at_100k else None,
            "words_per_s": round(seen / seconds, 1),
            "date": time.strftime("%Y-%m-%d"),
            "device": describe_machine()["device"],
        },
        args.output,
    )


if __name__ == "__main__":
    main()
