"""Peak resident memory of a long `nlp.pipe` stream through the `elmo` pipe with outputs dropped; with
`--mode initialize`, whether `nlp.initialize()` changes a stream's memory or makes repeated texts faster.

    python benchmarks/pipe_memory.py [--model PATH] [--tokens 1000000] [--text PATH]
    python benchmarks/pipe_memory.py --mode initialize [--model ""] [--docs 20000] [--doc-tokens 8]

Docs are the lines of the Gutenberg validation split ($SPACY_ELMO_LONG_TEXT or
../shared/data/gutenberg-en/valid.txt.gz), each up to --doc-tokens tokens, embedded with
store="none" and thrown away as they come out. Peak RSS (VmHWM) is read after the first 100k tokens
(--first-tokens) and at the end: a flat pipe grows by well under 10% between the two. The model defaults to the
bilm-tf test fixture so that a million tokens fit in minutes on a laptop CPU.

`--mode initialize` (issue 48) streams --docs distinct generated docs of --doc-tokens tokens through
`spacy.blank("en").add_pipe("elmo")` as the README builds it (the shipped default model unless --model), in two
fresh processes, one calling `nlp.initialize()` first (as the README recommends, so that a bad path fails early)
and one not. Each child's peak RSS is its own (`resource.getrusage`'s ru_maxrss after the stream, model loading
included); the goal is a difference within 100 MB. Each child then times --repeat-docs docs it has not seen
against as many it has (the stream's last ones): a ratio near 1 means prediction's speed does not depend on
repetition.
"""

import argparse
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


SYLLABLES = "ba ko ri tu sen mal dor vi ne qua sto lin fer gu pe zan mo cel tri ha wu ex bro ly".split()
COMMON = "the of and to in a is that for it as was with be by on not he I this are or his from at".split()


def distinct_texts(n: int, doc_tokens: int, seed: int = 0) -> list[str]:
    """`n` distinct docs of `doc_tokens` tokens, the same every run: frequent words and made-up ones (up to 24^3
    spellings), so that the vocabulary grows with the stream as a real one's does."""
    rng = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        tokens = [
            rng.choice(COMMON) if rng.random() < 0.5 else "".join(rng.choices(SYLLABLES, k=rng.randint(1, 3)))
            for _ in range(doc_tokens - 1)
        ]
        text = " ".join(tokens) + " ."
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def initialize_child(args: argparse.Namespace) -> None:
    """One fresh process of `--mode initialize`: stream the docs, then time unseen docs against seen ones."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": args.model}} if args.model else {})
    if args.initialize:
        nlp.initialize()
    stream = distinct_texts(args.docs + args.repeat_docs, args.doc_tokens)
    unseen = stream[args.docs :]
    nlp("Load the weights .")  # without initialize the first batch loads them: not part of the stream's time
    start = time.perf_counter()
    tokens = sum(len(doc) for doc in nlp.pipe(stream[: args.docs], batch_size=64))
    seconds = time.perf_counter() - start
    # the process's peak (Linux: KiB) after the stream, before the timings below add their own docs
    peak_stream = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # in turns, five parts each, so that what else runs on the machine slows both alike
    seen, timed = stream[args.docs - args.repeat_docs : args.docs], {"unseen": 0.0, "seen": 0.0}
    step = -(-args.repeat_docs // 5)
    for part in range(0, args.repeat_docs, step):
        for name, batch in (("unseen", unseen[part : part + step]), ("seen", seen[part : part + step])):
            start = time.perf_counter()
            for _ in nlp.pipe(batch, batch_size=64):
                pass
            timed[name] += time.perf_counter() - start
    elmo: Any = nlp.get_pipe("elmo")  # the `elmo` pipe: its layer cache
    record = {
        "tokens": tokens,
        "words_per_s": round(tokens / seconds, 1),
        "peak_rss_mb": round(peak_stream, 1),
        "peak_rss_mb_after_timings": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "cache_mb": round(elmo.cache.n_bytes / 2**20, 1),
        "seen_speedup": round(timed["unseen"] / timed["seen"], 2),
    }
    print(json.dumps(record), flush=True)


def compare_initialize(args: argparse.Namespace) -> None:
    """`--mode initialize`: the same stream in two fresh processes, with and without `nlp.initialize()`."""
    runs: dict[str, dict[str, float]] = {}
    for name, flag in (("without", "0"), ("with", "1")):
        command = [
            sys.executable, __file__, "--mode", "initialize-child", "--initialize", flag, "--model", args.model,
            "--docs", str(args.docs), "--doc-tokens", str(args.doc_tokens), "--repeat-docs", str(args.repeat_docs),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the {name}-initialize child failed: {done.stderr[-3000:]}")
        runs[name] = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    emit(
        {
            "bench": "pipe_memory_initialize",
            "model": args.model or "shipped default",
            "docs": args.docs,
            "doc_tokens": args.doc_tokens,
            **{f"{key}_{name}_initialize": value for name, run in runs.items() for key, value in run.items()},
            "peak_rss_mb_difference": round(runs["with"]["peak_rss_mb"] - runs["without"]["peak_rss_mb"], 1),
            "date": time.strftime("%Y-%m-%d"),
            "device": describe_machine()["device"],
        },
        args.output,
    )


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
    parser.add_argument("--mode", choices=["stream", "initialize", "initialize-child"], default="stream")
    parser.add_argument(
        "--model", default=None, help='default: the bilm-tf fixture (stream), the shipped model "" (initialize)'
    )
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--doc-tokens", type=int, default=None, help="default: 200 (stream), 8 (initialize)")
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--first-tokens", type=int, default=100_000, help="read the first peak after this many")
    parser.add_argument("--docs", type=int, default=20_000, help="initialize: distinct docs in the stream")
    parser.add_argument("--repeat-docs", type=int, default=1000, help="initialize: docs timed seen and unseen")
    parser.add_argument("--initialize", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--output", default="")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP + "; generated text")
    args = parser.parse_args()
    fixture = str(ROOT / "tests/fixtures/elmo-fixture")
    if args.mode != "stream":
        args.model = (fixture if args.smoke else "") if args.model is None else args.model
        args.doc_tokens = args.doc_tokens or 8
        if args.smoke:
            args.docs, args.repeat_docs = 200, 50
        if args.mode == "initialize-child":
            initialize_child(args)
        else:
            compare_initialize(args)
        return
    args.model = fixture if args.model is None else args.model
    args.doc_tokens = args.doc_tokens or 200
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
