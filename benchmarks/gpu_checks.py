"""GPU acceptance checks for the biLM (issue 6), run unattended on a CUDA machine.

    python benchmarks/gpu_checks.py [--output results/gpu_checks.jsonl]

1. fp32 on the GPU against the CPU, the paper's full configuration (random weights): max abs diff.
2. bf16 products (precision="bf16") against fp32 on the GPU: relative Frobenius error.
3. A batch forced to run out of memory (per-process memory fraction lowered) is split and completes
   with the same outputs as an unconstrained run.
Each prints one JSON line with "ok" against the issue's bounds (1e-5, 2e-2, equal at 1e-5).
"""

import argparse

import numpy
import torch

from common import describe_machine, emit
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.options import full_options
from spacy_elmo.bilm.runner import BiLMRunner

WORDS = "the bank raised its rates while we sat on the river bank watching boats drift by in spring".split()


def sentences(n: int, length: int):
    return [[WORDS[(i * 7 + j) % len(WORDS)] for j in range(length - (i % 5))] for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_checks.py needs a CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 parity means real fp32 products
    torch.backends.cudnn.allow_tf32 = False
    device = describe_machine("cuda")["device"]
    cpu = BiLM(full_options()).eval()
    cpu.reset_parameters(0)
    gpu = BiLM(full_options()).eval()
    gpu.load_state_dict(cpu.state_dict())
    gpu.to("cuda")
    batch = sentences(16, 20)
    ref = BiLMRunner(cpu).embed_sentences(batch)
    got = BiLMRunner(gpu).embed_sentences(batch)
    diff = max(float(numpy.abs(a - b).max()) for a, b in zip(ref, got))
    emit(
        {"check": "fp32_gpu_vs_cpu", "max_abs_diff": diff, "bound": 1e-5, "ok": diff <= 1e-5, "device": device},
        args.output,
    )
    bf16 = BiLMRunner(gpu, precision="bf16").embed_sentences(batch)
    rel = max(float(numpy.linalg.norm(a - b) / numpy.linalg.norm(a)) for a, b in zip(got, bf16))
    emit(
        {"check": "bf16_vs_fp32", "max_relative": rel, "bound": 2e-2, "ok": rel <= 2e-2, "device": device}, args.output
    )
    big = sentences(2048, 40)
    expected = BiLMRunner(gpu, token_budget=8192).embed_sentences(big[:64])
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    used = torch.cuda.memory_allocated()
    # leave room for the weights and a small batch only: a 2048-sentence batch cannot fit
    torch.cuda.set_per_process_memory_fraction(min(1.0, (used + 2 * 1024**3) / total))
    embedder = BiLMRunner(gpu, token_budget=10**7)
    out = embedder.embed_sentences(big)
    torch.cuda.set_per_process_memory_fraction(1.0)
    same = max(float(numpy.abs(a - b).max()) for a, b in zip(expected, out[:64]))
    emit(
        {
            "check": "oom_split",
            "n_splits": embedder.n_splits,
            "n_sentences": len(out),
            "max_abs_diff": same,
            "ok": embedder.n_splits > 0 and len(out) == len(big) and same <= 1e-5,
            "device": device,
        },
        args.output,
    )


if __name__ == "__main__":
    main()
