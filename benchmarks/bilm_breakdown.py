"""Where the biLM's CPU time goes: tokens/s, the fraction of the precision's product ceiling, and the parts.

    python benchmarks/bilm_breakdown.py [--configs full,small] [--batch-sizes 1,32] [--precisions fp32,bf16,int8]
                                        [--threads 2] [--length 20] [--repeats 3] [--input-chunks off,on]
                                        [--output FILE.jsonl]

Why: to close the gap between the biLM's rate and the machine's (issue 25), first see which part holds it.
For each (configuration, batch size, precision), random weights (seed 0), sentences of `--length` tokens
(+ <S>, </S>), stateless, the biLM's forward on character ids:
- whole: the forward pass; tokens/s (boundaries not counted) and its share of the ceiling, the square
  2048^3 product rate of that precision on the biLM's own kernels measured in the same run
  (`common.matmul_rate`), with `common.bilm_flops_per_token`;
- char CNN: `BiLM.embed_tokens` (dedup, CNN, highway, projection), on the same ids;
- input products: each layer's input products, (2, T*rows, P) x (2, P, 4C), in the LSTM's chunks of steps;
- recurrent products: each step's (2, rows, P) x (2, P, 4C) with the step's input product as bias;
- projection products: each step's (2, rows, C) x (2, C, P);
- gate work: each step's elementwise cell (sigmoids, tanh, clips) and the projection clip;
- LSTM rest: the LSTM stack's time minus its four parts (sorting rows, reversing, stacking and padding
  steps, the skip connection);
- rest: the whole minus the char CNN and the LSTM stack (the layer stack, masks).
Each part runs alone on the shapes the forward pass gives it, with the same products and prepared weights,
best of `--repeats` after a warm-up; a part's share is its time over the whole's (the rests can come out
slightly negative within noise). Rows below `lstm.MIN_GEMM_ROWS` are padded to it, as the LSTM does.
"""

import argparse
import itertools
from typing import Callable

import torch

from bilm_throughput import CONFIGS, make_batch
from common import best_time, bilm_flops_per_token, describe_machine, emit, matmul_rate
from spacy_elmo.bilm import lstm as lstm_module
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.lstm import MIN_GEMM_ROWS
from spacy_elmo.bilm.precision import Products, products_for

CHUNK_BYTES = lstm_module.INPUT_CHUNK_BYTES
LSTM_PARTS = ("input_products", "recurrent_products", "projection_products", "gate_work")
PARTS = ("char_cnn", "input_products", "recurrent_products", "projection_products", "gate_work", "lstm_rest", "rest")


def step_loop(n_steps: int, step: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        for _ in range(n_steps):
            step()
        return None

    return run


def layer_part_times(
    bilm: BiLM, layer: int, n_steps: int, rows: int, products: Products, timed: Callable[[Callable[[], object]], float]
) -> dict[str, float]:
    """One LSTM layer's parts, both directions, on random inputs of the forward pass's shapes."""
    o, lstm = bilm.options, bilm.lstm
    w_in, w_rec, w_proj = lstm.input_w[layer], lstm.recurrent_w[layer], lstm.proj_w[layer]
    bias = (lstm.bias[layer] + lstm.forget_bias).unsqueeze(1)
    generator = torch.Generator().manual_seed(layer)
    x = torch.randn(2, n_steps * rows, o.projection_dim, generator=generator)
    h = torch.randn(2, rows, o.projection_dim, generator=generator)
    m = torch.rand(2, rows, o.lstm_dim, generator=generator)
    c = torch.randn(2, rows, o.lstm_dim, generator=generator)
    gates = products.product(x, w_in, bias=bias).view(2, n_steps, rows, 4 * o.lstm_dim)[:, 0]

    def gate_step() -> object:
        lstm.cell(gates, c, o.cell_clip)
        return h.clamp(-o.proj_clip, o.proj_clip) if o.proj_clip is not None else None

    frames = x.view(2, n_steps, rows, o.projection_dim)
    batch_sizes = [rows] * n_steps

    return {
        # as the LSTM computes them at CPU inference: a chunk of steps at a time
        "input_products": timed(lambda: list(lstm._input_products(frames, w_in, bias, batch_sizes, False, products))),
        "recurrent_products": timed(step_loop(n_steps, lambda: products.product(h, w_rec, bias=gates))),
        "projection_products": timed(step_loop(n_steps, lambda: products.product(m, w_proj))),
        "gate_work": timed(step_loop(n_steps, gate_step)),
    }


def part_times(bilm: BiLM, ids: torch.Tensor, products: Products, repeats: int) -> dict[str, float]:
    """Seconds per batch for the whole forward and each part (see the module docstring)."""
    o, lstm = bilm.options, bilm.lstm
    time = {}

    def timed(work: Callable[[], object]) -> float:
        work()  # warm-up: prepared weights, allocator
        return best_time(work, repeats)

    time["whole"] = timed(lambda: bilm(ids, products=products))
    tokens = bilm.embed_tokens(ids, products)
    lengths = ids.gt(0).any(-1).sum(1)
    time["char_cnn"] = timed(lambda: bilm.embed_tokens(ids, products))
    time["lstm"] = timed(lambda: lstm(tokens, lengths, products=products))
    n_steps, rows = ids.shape[1], max(ids.shape[0], MIN_GEMM_ROWS)
    for part in LSTM_PARTS:
        time[part] = 0.0
    for layer in range(o.n_layers):
        for part, seconds in layer_part_times(bilm, layer, n_steps, rows, products, timed).items():
            time[part] += seconds
    time["lstm_rest"] = time["lstm"] - sum(time[p] for p in LSTM_PARTS)
    time["rest"] = time["whole"] - time["char_cnn"] - time["lstm"]
    return time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="full,small")
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--precisions", default="fp32,bf16,int8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default="")
    parser.add_argument(
        "--input-chunks",
        default="on",
        help="on, off or off,on: the LSTM's input products a chunk of steps at a time (lstm.INPUT_CHUNK_BYTES) "
        "or all steps at once; both: each shape run both ways, one after the other, for a same-run comparison",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    precisions = args.precisions.split(",")
    ceilings = {p: matmul_rate("cpu", p) for p in precisions}
    machine = describe_machine("cpu")
    rows = []
    with torch.no_grad():
        for config in args.configs.split(","):
            bilm = BiLM(CONFIGS[config]())
            bilm.reset_parameters(0)
            bilm.eval()
            flops = bilm_flops_per_token(bilm.options)
            for batch_size in (int(b) for b in args.batch_sizes.split(",")):
                ids = make_batch(batch_size, args.length)
                n_tokens = batch_size * args.length
                for precision, chunks in itertools.product(precisions, args.input_chunks.split(",")):
                    lstm_module.INPUT_CHUNK_BYTES = CHUNK_BYTES if chunks == "on" else 1 << 62
                    products = products_for(precision)
                    seconds = part_times(bilm, ids, products, args.repeats)
                    rate = n_tokens / seconds["whole"]
                    record = {
                        "bench": "bilm_breakdown",
                        "config": config,
                        "batch_size": batch_size,
                        "precision": precision,
                        "input_chunks": chunks,
                        "threads": args.threads,
                        "tokens_per_s": round(rate, 1),
                        "ceiling_gflops": round(ceilings[precision], 1),
                        "fraction_of_ceiling": round(rate * flops / 1e9 / ceilings[precision], 3),
                        "ms_per_batch": round(1e3 * seconds["whole"], 2),
                        "share": {p: round(seconds[p] / seconds["whole"], 3) for p in PARTS},
                        **machine,
                    }
                    emit(record, args.output)
                    rows.append(record)
    print()
    header = "| config | batch | precision | input chunks | tokens/s | of ceiling | ms/batch | "
    print(header + " | ".join(PARTS) + " |")
    print("|---" * (7 + len(PARTS)) + "|")
    for r in rows:
        shares = " | ".join(f"{100 * r['share'][p]:.0f}%" for p in PARTS)
        print(
            f"| {r['config']} | {r['batch_size']} | {r['precision']} | {r['input_chunks']} | "
            f"{r['tokens_per_s']:,.0f} | "
            f"{r['fraction_of_ceiling']:.2f} | {r['ms_per_batch']} | {shares} |"
        )


if __name__ == "__main__":
    main()
