"""Shared by the benchmarks: the machine's own matrix-product rate, FLOP counts, machine description."""

import json
import os
import platform
import time
from typing import Callable

import torch

from spacy_elmo.bilm import _onednn
from spacy_elmo.bilm.options import BiLMOptions
from spacy_elmo.bilm.precision import FP32, Products, TorchHalf, check_precision, pack_for_onednn, products_for

# A precision through torch's own products (what the CPU ran before oneDNN's packed ones): the baselines.
TORCH_KERNELS: dict[str, Callable[[], Products]] = {
    "fp32-torch": lambda: FP32,
    "bf16-torch": lambda: Products("bf16", TorchHalf("bf16")),
}


def check_benchmark_precision(name: str) -> str:
    """A precision, or one of TORCH_KERNELS' names."""
    return name if name in TORCH_KERNELS else check_precision(name, "--precision")


def products_named(name: str) -> Products:
    """The products of a precision, or of one of TORCH_KERNELS' baselines."""
    return TORCH_KERNELS[name]() if name in TORCH_KERNELS else products_for(name)


def describe_machine(device: str = "cpu") -> dict[str, object]:
    info: dict[str, object] = {"python": platform.python_version(), "torch": torch.__version__}
    if device.startswith("cuda"):
        info["device"] = torch.cuda.get_device_name(torch.device(device))
    else:
        model = "unknown CPU"
        try:
            for line in open("/proc/cpuinfo", encoding="utf-8"):
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        info["device"] = f"{model}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"
    return info


def best_time(fn: Callable[[], object], repeats: int, sync: Callable[[], None] = lambda: None) -> float:
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def matmul_rate(device: str = "cpu", precision: str = "fp32", n: int = 2048, repeats: int = 5) -> float:
    """Best-of-N GFLOP/s (for int8: GOP/s) of a square matrix product at a precision ("fp32", "bf16",
    "fp16", "int8"), on the kernels the biLM's products of that precision run on (on the CPU: oneDNN with
    a packed weight for fp32, bf16 and int8 (its int8 linear product, float32 out; `_onednn.int_mm` where
    that is missing)); "fp32-torch" / "bf16-torch": torch's
    own `@` (MKL for fp32 on the CPU). The ceiling the biLM is measured against."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    work: Callable[[], object]
    if precision == "int8" and device == "cpu" and _onednn.qlinear_unavailable() is None:
        shifted = torch.randint(0, 256, (n, n), dtype=torch.uint8)
        packed = _onednn.pack_int8(torch.randint(-127, 128, (n, n), dtype=torch.int8))
        scales, zero_points = torch.ones(n), torch.zeros(n, dtype=torch.int32)

        def work() -> object:
            return _onednn.qlinear(shifted, packed, scales, zero_points)
    elif precision == "int8":
        a8 = torch.randint(-127, 128, (n, n), device=device, dtype=torch.int8)
        b8 = torch.randint(-127, 128, (n, n), device=device, dtype=torch.int8).t().contiguous().t()

        def work() -> object:
            return _onednn.int_mm(a8, b8)
    else:
        name = precision.removesuffix("-torch")
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        packed = None
        if device == "cpu" and name in ("fp32", "bf16") and name == precision and not _onednn.linear_unavailable(dtype):
            packed = pack_for_onednn(b.float(), dtype)

        if packed is not None:
            weight = packed

            def work() -> object:
                return _onednn.linear(a, weight, None)
        else:

            def work() -> object:
                return a @ b

    for _ in range(2):
        work()
    seconds = best_time(work, repeats, sync)
    return 2 * n**3 / seconds / 1e9


def bilm_flops_per_token(options: BiLMOptions) -> float:
    """FLOPs (2 per multiply-add) of one token through the biLM, inference, boundaries excluded."""
    o = options
    chars = o.max_characters_per_token
    cnn = sum(2 * width * o.char_embedding_dim * n * (chars - width + 1) for width, n in o.filters)
    F = o.n_filters
    highway = o.n_highway * 2 * (2 * F * F)
    projection = 2 * F * o.projection_dim
    per_layer_direction = 2 * (2 * o.projection_dim * 4 * o.lstm_dim) + 2 * o.lstm_dim * o.projection_dim
    lstm = 2 * o.n_layers * per_layer_direction
    return float(cnn + highway + projection + lstm)


def emit(record: dict[str, object], path: str = "") -> None:
    line = json.dumps(record)
    print(line, flush=True)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
