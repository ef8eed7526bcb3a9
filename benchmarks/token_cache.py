"""What the token-layer cache saves on news-like text, measured in one run.

    python benchmarks/token_cache.py [--text PATH] [--tokens 100000] [--configs small,full]

Text: CoNLL-2003 (Reuters news; read from a path, never committed), default
$SPACY_ELMO_NEWS_TEXT or ../shared/data/conll2003/train.txt. Three modes over the same sentences:
`plain` (every token through the CNN), `dedupe` (each distinct token of a batch once), `cache`
(dedupe + an LRU cache of 50k word types across batches). Reports seconds and ratios to `plain`.
"""

import argparse
import os
import time
from pathlib import Path

import torch

from common import describe_machine, emit
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.options import full_options, small_options
from spacy_elmo.bilm.runner import BiLMRunner

DEFAULT_TEXT = os.environ.get(
    "SPACY_ELMO_NEWS_TEXT", str(Path(__file__).parent.parent.parent / "shared/data/conll2003/train.txt")
)


def read_conll_sentences(path: Path, n_tokens: int):
    sentences, current, total = [], [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("-DOCSTART-"):
            if current:
                sentences.append(current)
                total += len(current)
                current = []
                if total >= n_tokens:
                    break
            continue
        current.append(line.split()[0])
    return sentences, total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--configs", default="small")
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    sentences, total = read_conll_sentences(Path(args.text), args.tokens)
    machine = describe_machine()
    for name in args.configs.split(","):
        options = {"small": small_options, "full": full_options}[name]()
        bilm = BiLM(options).eval()
        bilm.reset_parameters(0)
        times = {}
        for mode in ("plain", "dedupe", "cache"):
            bilm.dedupe_tokens = mode != "plain"
            bilm.set_token_cache(50_000 if mode == "cache" else None)
            embedder = BiLMRunner(bilm, token_budget=4096)
            start = time.perf_counter()
            embedder.embed_sentences(sentences)
            times[mode] = time.perf_counter() - start
        emit(
            {
                "bench": "token_cache",
                "config": name,
                "n_tokens": total,
                "n_sentences": len(sentences),
                "seconds": {k: round(v, 2) for k, v in times.items()},
                "time_vs_plain": {k: round(v / times["plain"], 3) for k, v in times.items()},
                "cache_hit_rate": round(
                    bilm.token_cache.hits / max(1, bilm.token_cache.hits + bilm.token_cache.misses), 3
                ),
                "date": time.strftime("%Y-%m-%d"),
                "device": machine["device"],
            },
            args.output,
        )


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    main()
