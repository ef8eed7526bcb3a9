"""`nlp.pipe` words/s with the `elmo` pipe: the shipped model and the paper's full configuration (random
weights), on the CPU and, with --gpu, on the GPU.

    python benchmarks/pipe_throughput.py [--models shipped,full,fixture] [--words 20000] [--gpu]
    python benchmarks/pipe_throughput.py --models shipped --n-process 1,2 --threads 1   # processes, 1 thread each
    python benchmarks/pipe_throughput.py --models shipped --precision fp32,bf16,int8 --threads 2
    python benchmarks/pipe_throughput.py --models shipped --precision fp32,int8 --interleave --repeats 5

Docs are paragraphs of the project's Gutenberg validation sample (assets/gutenberg/valid_sample.txt.gz;
generated sentences if it is missing), run through spacy.blank("en") + sentencizer + elmo with its
defaults (store="layers", float32), all pipeline work included (tokenizer, sentence splits, char ids,
biLM, scatter back, doc extensions). One warm-up pass over a few docs first; then the best of
--repeats passes. One JSON line per model, precision and `--n-process` value: words/s (all tokens,
whitespace included), doc count, device, threads (worker processes run one torch thread each).
"""

import argparse
import gzip
import random
import tempfile
import time
from pathlib import Path
from typing import Callable

import spacy
import torch

from common import SMOKE_HELP, describe_machine, emit
from spacy_elmo import BiLM
from spacy_elmo.bilm.options import full_options
from spacy_elmo.io.hdf5 import save_bilm_tf

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "assets" / "gutenberg" / "valid_sample.txt.gz"
FIXTURE = ROOT / "tests" / "fixtures" / "elmo-fixture"


def load_texts(n_words: int) -> list[str]:
    """Paragraphs (blank-line separated) up to n_words whitespace-separated words in all."""
    if SAMPLE.exists():
        text = gzip.open(SAMPLE, "rt", encoding="utf-8").read()
        paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if len(p.split()) >= 5]
    else:
        rng = random.Random(0)
        words = "the of and to in a is that for it as was with be by on not he I this are or his from at".split()
        paragraphs = [" ".join(rng.choice(words) for _ in range(rng.randint(10, 80))) + " ." for _ in range(5000)]
    out, total = [], 0
    for paragraph in paragraphs:
        if total >= n_words:
            break
        out.append(paragraph)
        total += len(paragraph.split())
    return out


def save_full_model(directory: Path) -> Path:
    """The paper's full configuration with random weights (seed 0), saved where the pipe can load it."""
    bilm = BiLM(full_options())
    bilm.reset_parameters(0)
    save_bilm_tf(bilm, directory / "options.json", directory / "lm_weights.hdf5")
    return directory


def build(path: str, precision: str = "fp32", token_budget: int = 0) -> spacy.Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    config = {"@architectures": "spacy-elmo.BiLM.v1", "path": path, "precision": precision}
    if token_budget:
        config["token_budget"] = token_budget
    nlp.add_pipe("elmo", config={"model": config})
    return nlp


def measure(
    nlp: spacy.Language,
    texts: list[str],
    repeats: int,
    sync: Callable[[], None],
    n_process: int = 1,
    batch_size: int = 64,
) -> tuple[float, int]:
    list(nlp.pipe(texts[:8]))  # warm-up (and lazy weight loading)
    best = float("inf")
    n_words = 0
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        n_words = sum(len(doc) for doc in nlp.pipe(texts, n_process=n_process, batch_size=batch_size))
        sync()
        best = min(best, time.perf_counter() - start)
    return n_words / best, n_words


def measure_interleaved(
    nlps: dict[str, spacy.Language],
    texts: list[str],
    repeats: int,
    sync: Callable[[], None],
    n_process: int = 1,
    batch_size: int = 64,
) -> dict[str, tuple[float, int]]:
    """`measure` of each pipeline, one pass of each in turn per repeat (so that a noisy host's slow spells
    fall on every pipeline alike), the best pass of each."""
    results = {name: (0.0, 0) for name in nlps}
    for _ in range(repeats):
        for name, nlp in nlps.items():
            words_per_s, n_words = measure(nlp, texts, 1, sync, n_process, batch_size)
            results[name] = (max(results[name][0], words_per_s), n_words)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="shipped,full", help="comma-separated: shipped, full, fixture")
    parser.add_argument("--words", type=int, default=20000, help="words of text for the small models")
    parser.add_argument("--full-words", type=int, default=3000, help="words of text for the full model on CPU")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--gpu", action="store_true", help="run on GPU 0 (spacy.require_gpu)")
    parser.add_argument("--n-process", default="1", help="comma-separated nlp.pipe(n_process=...) values (CPU)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="nlp.pipe batch_size in docs (spaCy hands whole batches to worker processes: keep it well under "
        "docs / n_process, or one worker gets all the work)",
    )
    parser.add_argument("--precision", default="fp32", help="comma-separated: fp32, bf16, int8 (the model's setting)")
    parser.add_argument("--token-budget", type=int, default=0, help="the model's token_budget (0: its default)")
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="time the precisions in turn, one pass each per repeat, rather than one precision after another",
    )
    parser.add_argument("--output", default="", help="append JSON lines to this file too")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.models, args.words, args.repeats = "fixture", 300, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cpu"
    sync: Callable[[], None] = lambda: None  # noqa: E731
    if args.gpu:
        spacy.require_gpu(0)
        device = "cuda:0"
        sync = torch.cuda.synchronize
    machine = describe_machine(device)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"shipped": "", "fixture": str(FIXTURE)}
        for model in args.models.split(","):
            if model == "full":
                paths["full"] = str(save_full_model(Path(tmp)))
            record = {"bench": "pipe_throughput", "model": model, "date": time.strftime("%Y-%m-%d"), **machine}
            n_words = args.full_words if model == "full" and not args.gpu else args.words
            texts = load_texts(n_words)
            precisions = args.precision.split(",")
            interleaved: dict[tuple[str, int], tuple[spacy.Language, float, int]] = {}
            if args.interleave:
                for n_process in [int(n) for n in args.n_process.split(",")]:
                    nlps = {p: build(paths[model], p, args.token_budget) for p in precisions}
                    measured = measure_interleaved(nlps, texts, args.repeats, sync, n_process, args.batch_size)
                    interleaved.update({(p, n_process): (nlps[p], *result) for p, result in measured.items()})
            for precision in precisions:
                for n_process in [int(n) for n in args.n_process.split(",")]:
                    if args.interleave:
                        nlp, words_per_s, counted = interleaved[precision, n_process]
                    else:
                        nlp = build(paths[model], precision, args.token_budget)
                        words_per_s, counted = measure(nlp, texts, args.repeats, sync, n_process, args.batch_size)
                    options = nlp.get_pipe("elmo").bilm.options
                    emit(
                        {
                            **record,
                            "precision": precision,
                            "n_process": n_process,
                            "pipe_batch_size": args.batch_size,
                            "token_budget": args.token_budget or "default",
                            "threads_per_process": torch.get_num_threads() if n_process == 1 else 1,
                            "words_per_s": round(words_per_s, 1),
                            "words": counted,
                            "docs": len(texts),
                            "lstm_dim": options.lstm_dim,
                            "projection_dim": options.projection_dim,
                        },
                        args.output,
                    )


if __name__ == "__main__":
    main()
