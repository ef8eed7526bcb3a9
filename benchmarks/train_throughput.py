"""Training throughput of the biLM language model (tokens/s), random weights, sampled softmax.

Measures full training steps (forward, sampled softmax over both directions, backward, gradient
clipping, Adam update; the training loop's own `train_step`) on windows of random "words" drawn from
a Zipf distribution, so the character CNN sees a realistic share of repeated tokens. Prints one JSON
line per configuration.

  python benchmarks/train_throughput.py                       # small and full configs, CPU
  python benchmarks/train_throughput.py --device cuda         # on a GPU (device name reported)
  python benchmarks/train_throughput.py --configs small --batch-size 128 --steps 5

It drives the pretraining loop's own `train_step` (the one internal import of the maintained benchmarks:
the package has no public entry for a single step), so the figure is the step alone; a `pretrain` run's
metrics.jsonl gives the loop's tokens/s with its input side.
"""

import argparse
import json
import time

import numpy
import torch

from common import SMOKE_HELP, describe_machine, emit
from spacy_elmo import BiLM, BiLMOptions
from spacy_elmo.bilm.options import full_options, small_options
from spacy_elmo.pretrain.batches import LMBatch
from spacy_elmo.pretrain.loop import LanguageModelLoss, StepSettings, train_step
from spacy_elmo.pretrain.sampled_softmax import LogUniformSampler

CONFIGS = {
    "small": ("2x1024_128_2048cnn_1xhighway", small_options),
    "full": ("2x4096_512_2048cnn_2xhighway", full_options),
}


def random_batch(bilm: BiLM, n_rows: int, n_steps: int, n_vocab: int, generator: numpy.random.Generator) -> LMBatch:
    """Char ids of Zipf-distributed random words and their softmax targets."""
    words = [
        "".join(generator.choice(list("abcdefghijklmnopqrstuvwxyz"), size=int(n)))
        for n in generator.integers(1, 12, size=4096)
    ]
    ranks = numpy.minimum(generator.zipf(1.2, size=(n_rows, n_steps + 2)) - 1, len(words) - 1)
    ids = bilm.tokens_to_ids([words[r] for row in ranks for r in row[1:-1]]).astype(numpy.int64)
    char_ids = torch.from_numpy(ids.reshape(n_rows, n_steps, -1))
    targets = torch.from_numpy(numpy.minimum(ranks, n_vocab - 1).astype(numpy.int64))
    return LMBatch(char_ids=char_ids, next_ids=targets[:, 2:], prev_ids=targets[:, :-2])


def measure(
    options: BiLMOptions,
    device: torch.device,
    batch_size: int,
    window: int,
    n_vocab: int,
    n_negatives: int,
    steps: int,
    warmup: int,
    amp: bool,
) -> dict[str, float]:
    options.n_tokens_vocab = n_vocab
    bilm = BiLM(options)
    bilm.reset_parameters(0)
    bilm.to(device).train()
    model = LanguageModelLoss(bilm)
    optimizer = torch.optim.Adam(bilm.parameters(), lr=1e-4)
    sampler = LogUniformSampler(n_vocab, n_negatives)
    log_expected = sampler.log_expected.to(device)
    rng = numpy.random.default_rng(0)
    batches = [random_batch(bilm, batch_size, window, n_vocab, rng) for _ in range(2)]
    amp_dtype = (torch.float16 if device.type == "cuda" else torch.bfloat16) if amp else None
    settings = StepSettings(dropout=0.1, grad_clip=10.0, amp_dtype=amp_dtype)
    scaler = torch.amp.GradScaler("cuda") if amp and device.type == "cuda" else None

    def step(i: int) -> None:
        batch = batches[i % 2].to(device)
        samples = sampler.sample().to(device)
        train_step(model, bilm, optimizer, batch, samples, log_expected, settings, scaler)

    for i in range(warmup):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    return {
        "tokens_per_s": round(steps * batch_size * window / elapsed, 1),
        "s_per_step": round(elapsed / steps, 4),
        "n_parameters": sum(p.numel() for p in bilm.parameters()),
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
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
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
                "device": describe_machine(str(device))["device"],
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
