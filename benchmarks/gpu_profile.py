"""Where one biLM forward's time goes on a GPU: torch.profiler's top operators (issue 38).

python benchmarks/gpu_profile.py [--batch-size 1024] [--length 20] [--precision fp32]
"""

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.options import full_options
from spacy_elmo.bilm.runner import BiLMRunner


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--precision", default="fp32")
    args = parser.parse_args()
    bilm = BiLM(full_options()).eval()
    bilm.reset_parameters(0)
    bilm.to("cuda")
    runner = BiLMRunner(bilm, precision=args.precision, token_budget=10**8)
    words = [f"w{i % 5000}x" for i in range(args.batch_size * args.length)]
    batch = [words[i * args.length : (i + 1) * args.length] for i in range(args.batch_size)]
    ids = torch.from_numpy(bilm.batch_to_ids(batch)).to("cuda")
    for _ in range(2):
        runner.run(ids)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        runner.run(ids)
        torch.cuda.synchronize()
    table = prof.key_averages()
    print(table.table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60))
    print(table.table(sort_by="cpu_time_total", row_limit=18, max_name_column_width=60))


if __name__ == "__main__":
    main()
