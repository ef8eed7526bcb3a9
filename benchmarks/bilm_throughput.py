"""biLM inference throughput (tokens/s) and its share of the machine's own matrix-product rate.

    python benchmarks/bilm_throughput.py [--device cpu|cuda] [--configs full,small] [--batch-sizes 1,32,128]
    python benchmarks/bilm_throughput.py --entry runner     # through BiLMRunner.embed_sentences (words in)

Random weights, sentences of `--length` tokens (+ <S>, </S>), fp32 by default. For every
(configuration, batch size) one JSON line: tokens/s, achieved GFLOP/s (2 FLOPs per multiply-add,
boundary tokens not counted) and that as a fraction of the square-matmul rate measured in the same run.
`--entry bilm` (default) times the module's forward on character ids; `--entry runner` times what `embed`
and the Python API run: words -> character ids -> batching -> forward -> per-sentence numpy arrays.
"""

import argparse
import contextlib
import time
from typing import Callable

import torch

from common import best_time, bilm_flops_per_token, describe_machine, emit, matmul_rate
from spacy_elmo import chars
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.options import full_options, small_options
from spacy_elmo.bilm.runner import BiLMRunner

CONFIGS = {"full": full_options, "small": small_options}
WORDS = "the of and to in a is that for it as was with be by on not he I this are or his from at which".split()


def make_sentences(batch_size: int, length: int) -> list[list[str]]:
    generator = torch.Generator().manual_seed(batch_size * 1000 + length)
    picks = torch.randint(len(WORDS), (batch_size, length), generator=generator).tolist()
    return [[WORDS[i] + ("s" if (r + c) % 3 == 0 else "") for c, i in enumerate(row)] for r, row in enumerate(picks)]


def make_batch(batch_size: int, length: int) -> torch.Tensor:
    return torch.from_numpy(chars.batch_to_ids(make_sentences(batch_size, length)))


def bilm_work(bilm: BiLM, ids: torch.Tensor) -> Callable[[], object]:
    return lambda: bilm(ids)


def runner_work(runner: BiLMRunner, sentences: list[list[str]]) -> Callable[[], object]:
    return lambda: runner.embed_sentences(sentences)


def time_work(work: Callable[[], object], context: Callable, min_seconds: float, sync: Callable[[], None]) -> float:
    """Best time of `work` after a warm-up, repeated for about `min_seconds` (2 to 20 times)."""
    with torch.no_grad(), context():
        work()  # warm-up
        once = best_time(work, 1, sync)
        repeats = max(2, int(min_seconds / max(once, 1e-3)))
        return best_time(work, min(repeats, 20), sync)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--configs", default="full,small")
    parser.add_argument("--batch-sizes", default="1,32,128")
    parser.add_argument("--length", type=int, default=20, help="tokens a sentence, boundaries excluded")
    parser.add_argument("--min-seconds", type=float, default=3.0, help="time each point at least this long")
    parser.add_argument("--output", default="", help="append JSON lines to this file too")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--compile", action="store_true", help="torch.compile the LSTM cell")
    parser.add_argument("--entry", default="bilm", choices=["bilm", "runner"], help="what is timed (see above)")
    parser.add_argument(
        "--dedupe",
        action="store_true",
        help="let the biLM run each distinct token of a batch through the CNN once (off by default: the "
        "FLOP count assumes every token does, and these sentences repeat few word types)",
    )
    args = parser.parse_args()
    device = args.device
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    machine = describe_machine(device)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    rate = matmul_rate(device, dtype or torch.float32, n=8192 if device.startswith("cuda") else 2048)
    emit(
        {"bench": f"matmul_{args.precision}", "gflops": round(rate, 1), "date": time.strftime("%Y-%m-%d"), **machine},
        args.output,
    )
    autocast = (
        (lambda: torch.autocast(device_type=device.split(":")[0], dtype=dtype)) if dtype else contextlib.nullcontext
    )
    for name in args.configs.split(","):
        options = CONFIGS[name]()
        bilm = BiLM(options).to(device).eval()
        bilm.reset_parameters(0)
        bilm.to(device)
        if args.compile:
            bilm.lstm.compile_cell()
        bilm.dedupe_tokens = args.dedupe
        flops = bilm_flops_per_token(options)
        for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
            if args.entry == "bilm":
                work, context = bilm_work(bilm, make_batch(batch_size, args.length).to(device)), autocast
            else:
                # one batch of all the sentences, as the bilm entry has
                runner = BiLMRunner(bilm, precision=args.precision, token_budget=batch_size * (args.length + 2))
                work, context = runner_work(runner, make_sentences(batch_size, args.length)), contextlib.nullcontext
            seconds = time_work(work, context, args.min_seconds, sync)
            tokens = batch_size * args.length
            tokens_per_s = tokens / seconds
            achieved = tokens_per_s * flops / 1e9
            emit(
                {
                    "bench": "bilm_inference",
                    "entry": args.entry,
                    "config": name,
                    "precision": args.precision,
                    "compiled": args.compile,
                    "dedupe": args.dedupe,
                    "batch_size": batch_size,
                    "length": args.length,
                    "tokens_per_s": round(tokens_per_s, 1),
                    "gflops": round(achieved, 1),
                    "fraction_of_matmul": round(achieved / rate, 3),
                    "matmul_gflops": round(rate, 1),
                    "mflop_per_token": round(flops / 1e6, 1),
                    "device": machine["device"],
                },
                args.output,
            )
        # the matmul rate again, to show the machine did not change under us
        after = matmul_rate(device, dtype or torch.float32, n=8192 if device.startswith("cuda") else 2048)
        emit({"bench": f"matmul_{args.precision}_after", "config": name, "gflops": round(after, 1)}, args.output)


if __name__ == "__main__":
    main()
