"""The language-model head: one softmax over the word vocabulary, shared by both directions, stored as in
bilm-tf's checkpoint (`softmax/W` (V, P), `softmax/b` (V,))."""

from typing import Optional

import torch
from torch import nn


class SoftmaxHead(nn.Module):
    def __init__(self, n_vocab: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_vocab, dim))
        self.bias = nn.Parameter(torch.zeros(n_vocab))

    @property
    def n_vocab(self) -> int:
        return self.weight.shape[0]

    def reset_parameters(self, generator: Optional[torch.Generator] = None) -> None:
        with torch.no_grad():
            self.weight.normal_(0.0, self.weight.shape[1] ** -0.5, generator=generator)
            self.bias.zero_()
