"""Run by torchrun from test_distributed.py: one DDP step, then the process group torn down.

Writes this rank's thread names after `end_distributed` to OUT_DIR/rank_N.txt: gloo's threads must be
gone by then, or the rank tears them down at exit, which can abort it after a successful run.
"""

import os
import sys
from pathlib import Path

import torch
from torch import nn

from spacy_elmo.pretrain.distributed import data_parallel, end_distributed, init_distributed


def thread_names() -> list[str]:
    names = []
    for task in sorted(os.listdir("/proc/self/task")):
        try:
            with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as handle:
                names.append(handle.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return names


if __name__ == "__main__":
    device = torch.device("cpu")
    rank, world = init_distributed(device)
    model = data_parallel(nn.Linear(4, 2), device, world)
    model(torch.ones(3, 4)).sum().backward()
    del model
    end_distributed()
    (Path(sys.argv[1]) / f"rank_{rank}.txt").write_text("\n".join(thread_names()), encoding="utf-8")
