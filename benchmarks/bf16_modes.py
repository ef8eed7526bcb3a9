"""bf16 two ways in one run: autocast around the fp32 products vs the bf16 products of `precision="bf16"`.

    python benchmarks/bf16_modes.py

Random weights, 20-token sentences, 2 threads, token dedup off; tokens/s, best of 3 twice.
"""

import functools
import sys
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bilm_throughput import make_batch  # noqa: E402
from common import best_time  # noqa: E402
from spacy_elmo.bilm.bilm import BiLM  # noqa: E402
from spacy_elmo.bilm.options import full_options, small_options  # noqa: E402
from spacy_elmo.bilm.precision import products_for  # noqa: E402


def tokens_per_s(work: Callable[[], object], n_tokens: int) -> float:
    work()
    return n_tokens / min(best_time(work, 3), best_time(work, 3))


def autocast_work(bilm: BiLM, ids: torch.Tensor) -> Callable[[], object]:
    def work() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bilm(ids)

    return work


def main() -> None:
    torch.set_num_threads(2)
    for name, make_options in (("full", full_options), ("small", small_options)):
        bilm = BiLM(make_options()).eval()
        bilm.reset_parameters(0)
        bilm.dedupe_tokens = False
        for batch_size in (1, 32):
            ids = make_batch(batch_size, 20)
            products = products_for("bf16")
            with torch.no_grad():
                auto = tokens_per_s(autocast_work(bilm, ids), batch_size * 20)
                ours = tokens_per_s(functools.partial(bilm, ids, products=products), batch_size * 20)
            print(f"{name} batch {batch_size}: autocast {auto:.1f} tok/s, bf16 products {ours:.1f} tok/s")


if __name__ == "__main__":
    main()
