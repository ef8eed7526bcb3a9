"""Sampled softmax with a log-uniform (Zipf) proposal, as used to train the reference biLM.

With a vocabulary sorted by frequency, P(k) = (log(k + 2) - log(k + 1)) / log(V + 1) is close to the
unigram distribution, so the negatives are mostly the words the model confuses most often. One set of
`n` negatives (drawn with replacement) is shared by every position of a step. Each logit is corrected
by minus the log of its expected count (log(n * P(k))) so that the sampled loss estimates the full
softmax, and a negative that happens to be a row's own target is masked out ("accidental hit").
"""

import math
from typing import Optional

import torch
from torch import nn


class LogUniformSampler:
    """Draws negative word ids (0 = most frequent) and their log expected counts."""

    def __init__(self, n_vocab: int, n_samples: int) -> None:
        if n_vocab < 1 or n_samples < 1:
            raise ValueError(f"sampled softmax needs n_vocab >= 1 and n_negatives >= 1, got {n_vocab}, {n_samples}")
        self.n_vocab = n_vocab
        self.n_samples = n_samples
        k = torch.arange(n_vocab, dtype=torch.float64)
        probs = (torch.log(k + 2) - torch.log(k + 1)) / math.log(n_vocab + 1)
        self.log_expected = torch.log(probs * n_samples).float()

    def sample(self, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        u = torch.rand(self.n_samples, generator=generator, dtype=torch.float64)
        ids = torch.floor(torch.exp(u * math.log(self.n_vocab + 1))).long() - 1
        return ids.clamp_(0, self.n_vocab - 1)


def sampled_softmax_nll(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    samples: torch.Tensor,
    log_expected: torch.Tensor,
) -> torch.Tensor:
    """Per-row sampled NLL: hidden (N, P), targets (N,), samples (S,), log_expected (V,) -> (N,)."""
    log_expected = log_expected.to(hidden.device)
    true_w = weight.index_select(0, targets)
    true_logit = (hidden * true_w).sum(-1) + bias.index_select(0, targets) - log_expected.index_select(0, targets)
    sample_logits = nn.functional.linear(hidden, weight.index_select(0, samples), bias.index_select(0, samples))
    sample_logits = sample_logits - log_expected.index_select(0, samples)
    hits = targets.unsqueeze(1) == samples.unsqueeze(0)
    sample_logits = sample_logits.float().masked_fill(hits, float("-inf"))
    logits = torch.cat([true_logit.float().unsqueeze(1), sample_logits], dim=1)
    return torch.logsumexp(logits, dim=1) - logits[:, 0]


def full_softmax_nll(
    hidden: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    logits = nn.functional.linear(hidden, weight, bias).float()
    return nn.functional.cross_entropy(logits, targets, reduction="none")


def directional_nll(
    top: torch.Tensor,
    next_ids: torch.Tensor,
    prev_ids: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    samples: Optional[torch.Tensor] = None,
    log_expected: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Summed NLL of the forward LM (next tokens, forward half of the top layer (B, T, 2P)) and the backward LM
    (previous tokens, backward half), and the number of targets each; negative targets are skipped."""
    P = top.shape[-1] // 2
    sums = []
    count = 0
    for half, targets in ((top[..., :P], next_ids), (top[..., P:], prev_ids)):
        keep = targets >= 0
        hidden = half[keep]
        gold = targets[keep]
        if samples is None:
            nll = full_softmax_nll(hidden, gold, weight, bias)
        else:
            if log_expected is None:
                raise ValueError("a sampled softmax needs the log expected counts of its sampler")
            nll = sampled_softmax_nll(hidden, gold, weight, bias, samples, log_expected)
        sums.append(nll.sum())
        count = int(gold.shape[0])
    return sums[0], sums[1], count
