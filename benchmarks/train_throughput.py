"""Training throughput of the biLM language model (tokens/s), random weights, sampled softmax.

Runs `spacy_elmo.pretrain.pretrain` (what `spacy elmo pretrain` runs) on a generated corpus of random
"words" drawn from a Zipf distribution, so the character CNN sees a realistic share of repeated tokens, with
a vocabulary file of `--vocab` words, and reads back the step times the loop records in metrics.jsonl: full
training steps (the batch, forward, sampled softmax over both directions, backward, gradient clipping, Adam
update, the loss read back), after `--warmup` steps; the corpus preparation, the final checkpoint and the
model's saving are not timed. Prints one JSON line per configuration.

  python benchmarks/train_throughput.py                       # small and full configs, CPU
  python benchmarks/train_throughput.py --device cuda         # on a GPU (device name reported)
  python benchmarks/train_throughput.py --configs small --batch-size 128 --steps 5
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy
import torch
from thinc.api import Config

from common import SMOKE_HELP, describe_machine, emit
from spacy_elmo import BiLMOptions, load_model
from spacy_elmo.bilm.options import OPTION_NAMES, full_options, small_options
from spacy_elmo.pretrain import load_config, pretrain

CONFIGS = {
    "small": ("2x1024_128_2048cnn_1xhighway", small_options),
    "full": ("2x4096_512_2048cnn_2xhighway", full_options),
}


def write_data(directory: Path, n_words: int, n_vocab: int, generator: numpy.random.Generator) -> None:
    """vocab.txt: `n_vocab` entries (the three specials, then random words); train.txt: `n_words` of them
    drawn by Zipf rank, in bilm-tf's format (a sentence of 20 a line)."""
    words: dict[str, None] = {}
    while len(words) < n_vocab - 3:
        letters = generator.choice(list("abcdefghijklmnopqrstuvwxyz"), size=int(generator.integers(1, 12)))
        words["".join(letters)] = None
    vocab = list(words)
    (directory / "vocab.txt").write_text("\n".join(["<S>", "</S>", "<UNK>", *vocab]) + "\n", encoding="utf-8")
    ranks = numpy.minimum(generator.zipf(1.2, size=n_words) - 1, len(vocab) - 1)
    lines = (" ".join(vocab[r] for r in ranks[i : i + 20]) for i in range(0, n_words, 20))
    (directory / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def measure(
    options: BiLMOptions,
    device: str,
    batch_size: int,
    window: int,
    n_vocab: int,
    n_negatives: int,
    steps: int,
    warmup: int,
    amp: bool,
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        write_data(directory, (warmup + steps + 1) * batch_size * window, n_vocab, numpy.random.default_rng(0))
        precision = ("fp16" if device.startswith("cuda") else "bf16") if amp else "fp32"
        config = Config(
            {
                "paths": {"train": str(directory / "train.txt"), "vocab": str(directory / "vocab.txt")},
                "corpus": {"format": "bilm-tf", "cache_dir": str(directory / "cache")},
                "model": {name: getattr(options, name) for name in OPTION_NAMES if name != "n_tokens_vocab"},
                "training": {
                    "device": device,
                    "window": window,
                    "batch_size": batch_size,
                    "max_steps": warmup + steps,
                    "dropout": 0.1,
                    "grad_clip": 10.0,
                    "n_negatives": n_negatives,
                    "precision": precision,
                    "log_every": 1,
                    "eval_every": 0,
                    "checkpoint_every": 0,
                    "optimizer": {"@optimizers": "spacy-elmo.Adam.v1", "learn_rate": 1e-4},
                },
            }
        )
        run = directory / "run"
        pretrain(load_config(text=config.to_str()), run, log=lambda message: None)
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
        timed = [r["tokens_per_s"] for r in records if r["type"] == "train" and r["step"] > warmup]
        elapsed = sum(batch_size * window / rate for rate in timed)  # a record a step (log_every = 1)
        n_parameters = sum(p.numel() for p in load_model(run / "model").bilm.parameters())
    return {
        "tokens_per_s": round(steps * batch_size * window / elapsed, 1),
        "s_per_step": round(elapsed / steps, 4),
        "n_parameters": n_parameters,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--configs", default="small,full", help="comma-separated: small, full")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=50000, help="softmax vocabulary size")
    parser.add_argument("--negatives", type=int, default=4096, help="sampled negatives a step")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: PyTorch's default)")
    parser.add_argument("--amp", action="store_true", help="mixed precision (float16 on CUDA, bfloat16 on CPU)")
    parser.add_argument("--options-json", default=None, help="measure this options.json dict instead (name 'custom')")
    parser.add_argument("--output", default="", help="append JSON lines to this file too")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.configs, args.batch_size, args.window, args.vocab, args.negatives = "small", 2, 5, 1000, 64
        args.steps, args.warmup = 1, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda:0" if args.device == "cuda" else args.device
    todo = {}
    if args.options_json:
        todo["custom"] = ("custom", lambda: BiLMOptions.from_dict(json.loads(args.options_json)))
    else:
        for name in args.configs.split(","):
            if name not in CONFIGS:
                parser.error(f"unknown config {name!r}; expected one of {sorted(CONFIGS)}")
            todo[name] = CONFIGS[name]
    for name, (label, make) in todo.items():
        result = measure(
            make(), device, args.batch_size, args.window, args.vocab, args.negatives, args.steps, args.warmup, args.amp
        )
        emit(
            {
                "bench": "train_throughput",
                "config": name,
                "architecture": label,
                "device": describe_machine(device)["device"],
                "batch": f"{args.batch_size}x{args.window}",
                "vocab": args.vocab,
                "negatives": args.negatives,
                "amp": args.amp,
                "torch": torch.__version__,
                "date": time.strftime("%Y-%m-%d"),
                **result,
            },
            args.output,
        )


if __name__ == "__main__":
    main()
