"""What bounds the biLM's CPU rate: the machine's memory bandwidth, and each product's rate at the biLM's shapes.

    python benchmarks/bilm_bounds.py [--configs full,small] [--rows 4,32] [--precisions fp32,bf16,int8]
                                     [--threads 2] [--length 20] [--repeats 5] [--output FILE.jsonl]

Why: `bilm_breakdown.py` says which part of the forward pass holds the time; this says why that part
cannot run faster, so that a goal the biLM misses comes with its bound (issue 25). Measured in one run:
- read bandwidth: the sum of a 512 MiB float32 tensor (GB/s), the rate at which a product that reads
  its weight from memory once a step can stream it;
- the ceiling: the 2048^3 product rate of each precision on the biLM's kernels (`common.matmul_rate`);
- for each configuration, row count (4: a single sentence, padded to `lstm.MIN_GEMM_ROWS`; 32: a batch)
  and precision, one direction's products through the precision's own `Products`, on the forward
  pass's shapes: the input product of a chunk of steps (`lstm.input_chunk_steps` of them, at most
  length + 2) (steps * rows, P) x (P, 4C), a step's recurrent
  product (rows, P) x (P, 4C) plus the step's input product, and its projection (rows, C) x (C, P).
  For each: time, GFLOP/s (GOP/s for int8), the fraction of the ceiling, and the rate at which it
  streams its weight (the prepared weight's bytes over the time) as a fraction of the read bandwidth;
- the elementwise gate work of a step (`lstm.lstm_cell` plus the projection clip) in ns per cell
  element, and tanh and sigmoid alone, which set it.
A product near the read bandwidth and far below the ceiling is bound by memory: only fewer bytes a
weight (a lower precision) or more rows a step (a larger batch) make it faster. (A weight that fits in
the caches, the small configuration's, can stream faster than memory: the fraction is then above 1.)
"""

import argparse
import itertools
from typing import Callable

import torch

from bilm_throughput import CONFIGS
from common import best_time, describe_machine, emit, matmul_rate
from spacy_elmo.bilm.lstm import input_chunk_steps, lstm_cell
from spacy_elmo.bilm.options import BiLMOptions
from spacy_elmo.bilm.precision import Products, products_for

WEIGHT_BYTES = {"fp32": 4, "bf16": 2, "int8": 1}


def read_bandwidth(repeats: int, mib: int = 512) -> float:
    """GB/s of summing a float32 tensor far larger than the caches."""
    data = torch.ones(mib * (1 << 20) // 4)
    data.sum()
    return data.numel() * 4 / best_time(lambda: data.sum(), repeats) / 1e9


def repeated(n: int, work: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        for _ in range(n):
            work()
        return None

    return run


def seconds_each(work: Callable[[], object], repeats: int, calls: int) -> float:
    """Best time of one call of `work`, timed over `calls` calls in a row (after a warm-up)."""
    work()
    return best_time(repeated(calls, work), repeats) / calls


def product_bounds(
    options: BiLMOptions, rows: int, length: int, products: Products, repeats: int
) -> dict[str, dict[str, float]]:
    """Seconds, FLOPs and weight elements of one direction's input, recurrent and projection products."""
    P, C = options.projection_dim, options.lstm_dim
    generator = torch.Generator().manual_seed(0)
    w_in = torch.randn(P, 4 * C, generator=generator) * P**-0.5
    w_rec = torch.randn(P, 4 * C, generator=generator) * P**-0.5
    w_proj = torch.randn(C, P, generator=generator) * C**-0.5
    bias = torch.randn(4 * C, generator=generator)
    steps = min(length + 2, input_chunk_steps(rows, 4 * C))  # the LSTM's chunk of input products
    inputs = torch.randn(steps * rows, P, generator=generator)
    h = torch.randn(rows, P, generator=generator)
    pre = torch.randn(rows, 4 * C, generator=generator)
    m = torch.rand(rows, C, generator=generator)
    shapes = {
        "input": (lambda: products.product(inputs, w_in, bias=bias), steps * rows, P, 4 * C, 10),
        "recurrent": (lambda: products.product(h, w_rec, bias=pre), rows, P, 4 * C, 50),
        "projection": (lambda: products.product(m, w_proj), rows, C, P, 50),
    }
    result = {}
    for name, (work, m_rows, k, n, calls) in shapes.items():
        result[name] = {
            "seconds": seconds_each(work, repeats, calls),
            "flops": 2.0 * m_rows * k * n,
            "weight_elements": float(k * n),
        }
    return result


def gate_seconds(options: BiLMOptions, rows: int, repeats: int) -> dict[str, float]:
    """ns per cell element (both directions, `rows` rows) of a step's gate work, and of tanh and sigmoid."""
    C = options.lstm_dim
    generator = torch.Generator().manual_seed(1)
    gates = torch.randn(2, rows, 4 * C, generator=generator)
    c = torch.randn(2, rows, C, generator=generator)
    h = torch.randn(2, rows, options.projection_dim, generator=generator)
    clip = options.proj_clip if options.proj_clip is not None else 1e30

    def step() -> object:
        lstm_cell(gates, c, options.cell_clip)
        return h.clamp(-clip, clip)

    elements = 2 * rows * C
    return {
        "gate_ns_per_element": 1e9 * seconds_each(step, repeats, 50) / elements,
        "tanh_ns_per_element": 1e9 * seconds_each(lambda: torch.tanh(c), repeats, 50) / elements,
        "sigmoid_ns_per_element": 1e9 * seconds_each(lambda: torch.sigmoid(c), repeats, 50) / elements,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="full,small")
    parser.add_argument("--rows", default="4,32")
    parser.add_argument("--precisions", default="fp32,bf16,int8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    precisions = args.precisions.split(",")
    machine = describe_machine("cpu")
    bandwidth = read_bandwidth(args.repeats)
    ceilings = {p: matmul_rate("cpu", p) for p in precisions}
    emit({"bench": "bilm_bounds", "read_gb_per_s": round(bandwidth, 1), "ceilings": ceilings, **machine}, args.output)
    table = []
    with torch.no_grad():
        for config, rows in itertools.product(args.configs.split(","), (int(r) for r in args.rows.split(","))):
            options = CONFIGS[config]()
            gates = gate_seconds(options, rows, args.repeats)
            emit({"bench": "bilm_bounds", "config": config, "rows": rows, **gates}, args.output)
            for precision in precisions:
                parts = product_bounds(options, rows, args.length, products_for(precision), args.repeats)
                for name, part in parts.items():
                    rate = part["flops"] / part["seconds"] / 1e9
                    streamed = part["weight_elements"] * WEIGHT_BYTES[precision] / part["seconds"] / 1e9
                    record = {
                        "bench": "bilm_bounds",
                        "config": config,
                        "rows": rows,
                        "precision": precision,
                        "product": name,
                        "us": round(1e6 * part["seconds"], 1),
                        "weight_mib": round(part["weight_elements"] * WEIGHT_BYTES[precision] / (1 << 20), 2),
                        "gflops": round(rate, 1),
                        "of_ceiling": round(rate / ceilings[precision], 3),
                        "weight_gb_per_s": round(streamed, 1),
                        "of_read_bandwidth": round(streamed / bandwidth, 3),
                    }
                    emit(record, args.output)
                    table.append(record)
    print()
    print(f"read bandwidth {bandwidth:.1f} GB/s; ceilings " + ", ".join(f"{p} {r:.0f}" for p, r in ceilings.items()))
    header = "config | rows | precision | product | weight MiB | us | GFLOP/s | of ceiling | weight GB/s"
    header += " | of read bandwidth"
    print(f"| {header} |")
    print("|---" * 10 + "|")
    for r in table:
        print(
            f"| {r['config']} | {r['rows']} | {r['precision']} | {r['product']} | {r['weight_mib']} | {r['us']:,.1f} | "
            f"{r['gflops']:,.1f} | "
            f"{r['of_ceiling']:.2f} | {r['weight_gb_per_s']:.1f} | {r['of_read_bandwidth']:.2f} |"
        )


if __name__ == "__main__":
    main()
