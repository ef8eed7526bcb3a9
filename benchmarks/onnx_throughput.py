"""ONNX Runtime against the torch path: biLM tokens/s on the same character ids, side by side in one run.

    python benchmarks/onnx_throughput.py [--configs small,full] [--batch-sizes 1,32] [--threads 1,2]

Random weights (seed 0), sentences of `--length` tokens (+ <S>, </S>), stateless. For every (configuration,
batch size, threads): the torch forward at fp32 and bf16 (`BiLM.forward` with that precision's products,
each distinct token of a batch once through the CNN, as the graph does too) and the exported graph through
ONNX Runtime (CPU, intra-op threads = torch threads), best of `--repeats` after a warm-up; ratios are
against torch fp32 of the same run.
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy
import torch

from common import best_time, describe_machine, emit
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.options import full_options, small_options
from spacy_elmo.bilm.precision import products_for
from spacy_elmo.onnx.export import INPUT_NAME, export_onnx

CONFIGS = {"full": full_options, "small": small_options}
WORDS = "the of and to in a is that for it as was with be by on not he I this are or his from at which".split()


def sentences(batch_size: int, length: int) -> list[list[str]]:
    generator = torch.Generator().manual_seed(batch_size * 1000 + length)
    picks = torch.randint(len(WORDS), (batch_size, length), generator=generator).tolist()
    return [[WORDS[i] + ("s" if (r + c) % 3 == 0 else "") for c, i in enumerate(row)] for r, row in enumerate(picks)]


def main() -> None:
    import onnxruntime

    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", default="small,full")
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs.split(","):
            bilm = BiLM(CONFIGS[config]())
            bilm.reset_parameters(0)
            bilm.eval()
            graph = export_onnx(bilm, Path(tmp) / f"{config}.onnx")
            fp32, bf16 = products_for("fp32"), products_for("bf16")  # once: their prepared weights are kept
            for threads in (int(t) for t in args.threads.split(",")):
                torch.set_num_threads(threads)
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                session = onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
                for batch_size in (int(b) for b in args.batch_sizes.split(",")):
                    ids = bilm.batch_to_ids(sentences(batch_size, args.length)).astype(numpy.int64)
                    tensor = torch.from_numpy(ids)
                    runs = {
                        "torch-fp32": lambda b=bilm, t=tensor, p=fp32: b(t, products=p),
                        "torch-bf16": lambda b=bilm, t=tensor, p=bf16: b(t, products=p),
                        "onnxruntime": lambda s=session, i=ids: s.run(None, {INPUT_NAME: i}),
                    }
                    seconds = {}
                    with torch.no_grad():
                        for name, run in runs.items():
                            run()  # warm-up (and weights prepared)
                            seconds[name] = best_time(run, args.repeats)
                    n_tokens = batch_size * args.length
                    emit(
                        {
                            "bench": "onnx_throughput",
                            "config": config,
                            "batch_size": batch_size,
                            "threads": threads,
                            "tokens_per_s": {k: round(n_tokens / v, 1) for k, v in seconds.items()},
                            "over_torch_fp32": {k: round(seconds["torch-fp32"] / v, 3) for k, v in seconds.items()},
                            "date": time.strftime("%Y-%m-%d"),
                            "device": describe_machine()["device"],
                        },
                        args.output,
                    )


if __name__ == "__main__":
    main()
