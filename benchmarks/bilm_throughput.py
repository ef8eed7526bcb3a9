"""biLM inference throughput (tokens/s) and its share of the machine's own matrix-product rate.

    python benchmarks/bilm_throughput.py [--device cpu|cuda] [--configs full,small] [--batch-sizes 1,32,128]
    python benchmarks/bilm_throughput.py --precision fp32,bf16,int8 --threads 1
    python benchmarks/bilm_throughput.py --entry runner    # through BiLMRunner.embed_sentences (words in)
    python benchmarks/bilm_throughput.py --device cuda --configs full --batch-sizes 1024 --profile
    python benchmarks/bilm_throughput.py --device cuda --no-cuda-graphs    # the GPU's LSTM loop launched eagerly

Random weights, sentences of `--length` tokens (+ <S>, </S>), fp32 by default. For every
(configuration, batch size, precision) one JSON line: tokens/s, achieved GFLOP/s (2 FLOPs per
multiply-add, boundary tokens not counted), that as a fraction of torch's square-matmul rate at the same
precision measured in the same run (`common.matmul_rate`), and the tokens/s as a ratio to the first
precision listed (same run). `--entry bilm` (default) times `BiLMRunner.run` on character ids; `--entry
runner` times what `embed` and the Python API run: words -> ids -> batching -> forward -> numpy arrays.
`--profile` also prints torch.profiler's top operators of one forward at each point.
"""

import argparse
import time
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from common import SMOKE_HELP, best_time, bilm_flops_per_token, describe_machine, emit, matmul_rate
from spacy_elmo import BiLM, BiLMRunner
from spacy_elmo.bilm.options import full_options, small_options

CONFIGS = {"full": full_options, "small": small_options}
WORDS = "the of and to in a is that for it as was with be by on not he I this are or his from at which".split()


def make_sentences(batch_size: int, length: int) -> list[list[str]]:
    generator = torch.Generator().manual_seed(batch_size * 1000 + length)
    picks = torch.randint(len(WORDS), (batch_size, length), generator=generator).tolist()
    return [[WORDS[i] + ("s" if (r + c) % 3 == 0 else "") for c, i in enumerate(row)] for r, row in enumerate(picks)]


def time_work(work: Callable[[], object], min_seconds: float, sync: Callable[[], None]) -> float:
    """Best time of `work` after a warm-up, repeated for about `min_seconds` (2 to 20 times)."""
    with torch.no_grad():
        work()  # warm-up
        once = best_time(work, 1, sync)
        repeats = max(2, int(min_seconds / max(once, 1e-3)))
        return best_time(work, min(repeats, 20), sync)


def print_profile(work: Callable[[], object], device: str, sync: Callable[[], None]) -> None:
    """Where one call's time goes: torch.profiler's top operators by device time, then by CPU time."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with torch.no_grad(), profile(activities=activities) as prof:
        work()
        sync()
    table = prof.key_averages()
    if device.startswith("cuda"):
        print(table.table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60))
    print(table.table(sort_by="cpu_time_total", row_limit=18, max_name_column_width=60))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--configs", default="full,small")
    parser.add_argument("--batch-sizes", default="1,32,128")
    parser.add_argument("--length", type=int, default=20, help="tokens a sentence, boundaries excluded")
    parser.add_argument("--min-seconds", type=float, default=3.0, help="time each point at least this long")
    parser.add_argument("--output", default="", help="append JSON lines to this file too")
    parser.add_argument("--precision", default="fp32", help="comma-separated: fp32, bf16, fp16, int8")
    parser.add_argument("--compile", action="store_true", help="torch.compile the LSTM cell")
    parser.add_argument("--no-cuda-graphs", action="store_true", help="run the GPU's LSTM loop without CUDA graphs")
    parser.add_argument("--entry", default="bilm", choices=["bilm", "runner"], help="what is timed (see above)")
    parser.add_argument(
        "--dedupe",
        action="store_true",
        help="let the biLM run each distinct token of a batch through the CNN once (off by default: the "
        "FLOP count assumes every token does, and these sentences repeat few word types)",
    )
    parser.add_argument("--profile", action="store_true", help="print torch.profiler's table at each point")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = the runner's default)")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.configs, args.batch_sizes, args.length, args.min_seconds = "small", "2", 5, 0.0
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    precisions = args.precision.split(",")
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    machine = describe_machine(device)
    size = 256 if args.smoke else 8192 if device.startswith("cuda") else 2048
    rates = {p: matmul_rate(device, p, n=size) for p in precisions}
    for precision, rate in rates.items():
        emit(
            {"bench": f"matmul_{precision}", "gflops": round(rate, 1), "date": time.strftime("%Y-%m-%d"), **machine},
            args.output,
        )
    for name in args.configs.split(","):
        options = CONFIGS[name]()
        bilm = BiLM(options).eval()
        bilm.reset_parameters(0)
        bilm.to(device)
        if args.compile:
            bilm.lstm.compile_cell()
        bilm.lstm.cuda_graphs.enabled = not args.no_cuda_graphs
        bilm.dedupe_tokens = args.dedupe
        flops = bilm_flops_per_token(options)
        for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
            baseline = None
            sentences = make_sentences(batch_size, args.length)
            ids = torch.from_numpy(bilm.batch_to_ids(sentences)).to(device)
            for precision in precisions:
                # one batch of all the sentences in both entries
                runner = BiLMRunner(
                    bilm, precision=precision, token_budget=batch_size * (args.length + 2), n_threads=args.threads
                )
                work: Callable[[], object] = (
                    (lambda r=runner, i=ids: r.run(i))
                    if args.entry == "bilm"
                    else (lambda r=runner, s=sentences: r.embed_sentences(s))
                )
                seconds = time_work(work, args.min_seconds, sync)
                if args.profile:
                    print_profile(work, device, sync)
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
                        "cuda_graphs": device.startswith("cuda") and not args.no_cuda_graphs,
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
