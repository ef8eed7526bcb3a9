"""biLM inference throughput (tokens/s) and its share of the machine's own matrix-product rate.

    python benchmarks/bilm_throughput.py [--device cpu|cuda] [--configs full,small] [--batch-sizes 1,32,128]
    python benchmarks/bilm_throughput.py --precision fp32,bf16,int8
    python benchmarks/bilm_throughput.py --precision fp32-torch,fp32,bf16-torch,bf16   # oneDNN vs torch's kernels
    python benchmarks/bilm_throughput.py --entry runner     # through BiLMRunner.embed_sentences (words in)

Random weights, sentences of `--length` tokens (+ <S>, </S>), fp32 by default. For every
(configuration, batch size, precision) one JSON line: tokens/s, achieved GFLOP/s (2 FLOPs per
multiply-add, boundary tokens not counted), that as a fraction of the square-matmul rate of the same
precision on the same kernels, measured in the same run (`common.matmul_rate`), and the tokens/s as a
ratio to the first precision listed (measured in the same run). "fp32-torch" and "bf16-torch" are those
precisions through torch's own products (what the CPU ran before oneDNN's packed products).
`--entry bilm` (default) times the module's forward on character ids; `--entry runner` times what `embed`
and the Python API run: words -> character ids -> batching -> forward -> per-sentence numpy arrays.
"""

import argparse
import time
from typing import Callable

import torch

from common import (
    best_time,
    bilm_flops_per_token,
    check_benchmark_precision,
    describe_machine,
    emit,
    matmul_rate,
    products_named,
)
from spacy_elmo import chars
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.options import full_options, small_options
from spacy_elmo.bilm.precision import Products
from spacy_elmo.bilm.runner import BiLMRunner

CONFIGS = {"full": full_options, "small": small_options}
WORDS = "the of and to in a is that for it as was with be by on not he I this are or his from at which".split()


def make_sentences(batch_size: int, length: int) -> list[list[str]]:
    generator = torch.Generator().manual_seed(batch_size * 1000 + length)
    picks = torch.randint(len(WORDS), (batch_size, length), generator=generator).tolist()
    return [[WORDS[i] + ("s" if (r + c) % 3 == 0 else "") for c, i in enumerate(row)] for r, row in enumerate(picks)]


def make_batch(batch_size: int, length: int) -> torch.Tensor:
    return torch.from_numpy(chars.batch_to_ids(make_sentences(batch_size, length)))


def bilm_work(bilm: BiLM, ids: torch.Tensor, products: Products) -> Callable[[], object]:
    return lambda: bilm(ids, products=products)


def runner_work(runner: BiLMRunner, sentences: list[list[str]]) -> Callable[[], object]:
    return lambda: runner.embed_sentences(sentences)


def time_work(work: Callable[[], object], min_seconds: float, sync: Callable[[], None]) -> float:
    """Best time of `work` after a warm-up, repeated for about `min_seconds` (2 to 20 times)."""
    with torch.no_grad():
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
    parser.add_argument(
        "--precision", default="fp32", help="comma-separated: fp32, bf16, fp16, int8, fp32-torch, bf16-torch"
    )
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
    precisions = [check_benchmark_precision(p) for p in args.precision.split(",")]
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    machine = describe_machine(device)
    size = 8192 if device.startswith("cuda") else 2048
    rates = {p: matmul_rate(device, p, n=size) for p in precisions}
    for precision, rate in rates.items():
        emit(
            {"bench": f"matmul_{precision}", "gflops": round(rate, 1), "date": time.strftime("%Y-%m-%d"), **machine},
            args.output,
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
            baseline = None
            for precision in precisions:
                if args.entry == "bilm":
                    ids = make_batch(batch_size, args.length).to(device)
                    work = bilm_work(bilm, ids, products_named(precision))
                else:
                    # one batch of all the sentences, as the bilm entry has
                    runner = BiLMRunner(bilm, token_budget=batch_size * (args.length + 2))
                    runner.products = products_named(precision)
                    work = runner_work(runner, make_sentences(batch_size, args.length))
                seconds = time_work(work, args.min_seconds, sync)
                tokens_per_s = batch_size * args.length / seconds
                baseline = baseline or tokens_per_s
                achieved = tokens_per_s * flops / 1e9
                emit(
                    {
                        "bench": "bilm_inference",
                        "entry": args.entry,
                        "config": name,
                        "precision": precision,
                        "compiled": args.compile,
                        "dedupe": args.dedupe,
                        "batch_size": batch_size,
                        "length": args.length,
                        "tokens_per_s": round(tokens_per_s, 1),
                        f"ratio_to_{precisions[0]}": round(tokens_per_s / baseline, 2),
                        "gflops": round(achieved, 1),
                        "fraction_of_matmul": round(achieved / rates[precision], 3),
                        "matmul_gflops": round(rates[precision], 1),
                        "mflop_per_token": round(flops / 1e6, 1),
                        "device": machine["device"],
                    },
                    args.output,
                )
        # the matmul rates again, to show the machine did not change under us
        for precision in precisions:
            after = matmul_rate(device, precision, n=size)
            emit({"bench": f"matmul_{precision}_after", "config": name, "gflops": round(after, 1)}, args.output)


if __name__ == "__main__":
    main()
