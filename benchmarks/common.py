"""Shared by the benchmarks: the machine's matrix-product rate, FLOP counts, machine description, output."""

import json
import math
import os
import platform
import time
from typing import Callable

import torch

from spacy_elmo import BiLMOptions

SMOKE_HELP = "a tiny size that runs in seconds on a CPU (what tests/test_benchmarks.py runs)"


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
    """Best-of-N GFLOP/s (int8: GOP/s) of torch's own square matrix product at a precision: the ceiling
    the biLM is measured against. The package's CPU products may run faster kernels (oneDNN on packed
    weights), so a share above 1 is possible; NaN where torch has no such product here."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    work: Callable[[], object]
    if precision == "int8":
        a8 = torch.randint(-127, 128, (n, n), device=device, dtype=torch.int8)
        b8 = torch.randint(-127, 128, (n, n), device=device, dtype=torch.int8).t().contiguous().t()
        int_mm = getattr(torch, "_int_mm", None)
        if int_mm is None:
            return math.nan

        def work() -> object:
            return int_mm(a8, b8)
    else:
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)

        def work() -> object:
            return a @ b

    try:
        for _ in range(2):
            work()
    except RuntimeError:
        return math.nan
    return 2 * n**3 / best_time(work, repeats, sync) / 1e9


def bilm_flops_per_token(options: BiLMOptions) -> float:
    """FLOPs (2 per multiply-add) of one token through the biLM, inference, boundaries excluded."""
    o = options
    chars = o.max_characters_per_token
    cnn = sum(2 * width * o.char_embedding_dim * n * (chars - width + 1) for width, n in o.filters)
    highway = o.n_highway * 2 * (2 * o.n_filters * o.n_filters)
    projection = 2 * o.n_filters * o.projection_dim
    per_layer_direction = 2 * (2 * o.projection_dim * 4 * o.lstm_dim) + 2 * o.lstm_dim * o.projection_dim
    lstm = 2 * o.n_layers * per_layer_direction
    return float(cnn + highway + projection + lstm)


def emit(record: dict[str, object], path: str = "") -> None:
    line = json.dumps(record)
    print(line, flush=True)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
