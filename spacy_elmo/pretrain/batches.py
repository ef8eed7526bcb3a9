"""Training and evaluation batches from a token stream, built with array indexing only.

Training: the stream is tiled into windows of `window` tokens; an epoch visits every window once in an
order and from an offset drawn from (seed, epoch), so a resumed run continues with the very same batches.
For a window starting at s the forward LM predicts tokens[s+1 : s+T+1] and the backward LM tokens[s-1 : s+T-1].

Evaluation: whole sentences (`<S>` ... `</S>`), each starting from a zero state as the biLM is used
for embedding; length-sorted batches padded with "no token" (id 0) and targets -100 (ignored).
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional

import numpy
import torch

from ..bilm.batching import token_budget_batches

IGNORE = -100


@dataclass
class LMBatch:
    """char_ids (B, T, max_chars) long; next_ids / prev_ids (B, T) long softmax targets (-100 = none)."""

    char_ids: torch.Tensor
    next_ids: torch.Tensor
    prev_ids: torch.Tensor

    @property
    def n_tokens(self) -> int:
        return int(self.char_ids.shape[0] * self.char_ids.shape[1])

    def to(self, device: torch.device) -> "LMBatch":
        """On `device`; to a GPU from pinned memory, so that the copy does not hold up the host."""
        tensors = [self.char_ids, self.next_ids, self.prev_ids]
        if device.type == "cuda":
            tensors = [t.pin_memory() for t in tensors]
        return LMBatch(*(t.to(device, non_blocking=True) for t in tensors))


@dataclass
class WindowBatcher:
    """Fixed-length training windows over a token stream, deterministic in (seed, epoch, index); each of
    `world_size` processes gets its contiguous share of every global batch."""

    tokens: numpy.ndarray
    type_chars: numpy.ndarray
    type_to_vocab: numpy.ndarray
    window: int
    batch_size: int
    seed: int = 0
    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        window, batch_size, world_size = self.window, self.batch_size, self.world_size
        if window < 1 or batch_size < 1:
            raise ValueError(f"training.window ({window}) and training.batch_size ({batch_size}) must be >= 1")
        if batch_size % world_size:
            raise ValueError(
                f"training.batch_size ({batch_size}) must be divisible by the number of processes ({world_size})"
            )
        self.type_to_vocab = numpy.asarray(self.type_to_vocab, dtype=numpy.int64)
        self._plan: Optional[tuple[int, int, numpy.ndarray]] = None  # (epoch, offset, order) of the last batch
        # starts s = 1 + offset + k*T need s - 1 >= 0 and s + T + 1 <= N for every offset < T
        self.n_windows = max(0, (len(self.tokens) - 2 - (window - 1)) // window)
        self.steps_per_epoch = self.n_windows // batch_size
        if self.steps_per_epoch < 1:
            raise ValueError(
                f"the training corpus has {len(self.tokens)} tokens: too few for one batch of "
                f"{batch_size} windows of {window} (lower training.batch_size or training.window)"
            )

    def _epoch_plan(self, epoch: int) -> tuple[int, numpy.ndarray]:
        """The epoch's window offset and window order, drawn once an epoch (a permutation of every window)."""
        if self._plan is None or self._plan[0] != epoch:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            offset = int(torch.randint(self.window, (1,), generator=generator))
            self._plan = (epoch, offset, torch.randperm(self.n_windows, generator=generator).numpy())
        return self._plan[1], self._plan[2]

    def batch(self, epoch: int, index: int) -> LMBatch:
        """Batch `index` of `epoch` (this process's share of it)."""
        if not 0 <= index < self.steps_per_epoch:
            raise IndexError(f"batch {index} of an epoch of {self.steps_per_epoch}")
        offset, order = self._epoch_plan(epoch)
        share = self.batch_size // self.world_size
        rows = order[index * self.batch_size + self.rank * share : index * self.batch_size + (self.rank + 1) * share]
        starts = 1 + offset + rows.astype(numpy.int64) * self.window
        positions = starts[:, None] + numpy.arange(self.window)[None, :]
        types = numpy.asarray(self.tokens[positions])
        before = numpy.asarray(self.tokens[positions - 1])
        after = numpy.asarray(self.tokens[positions + 1])
        return LMBatch(
            char_ids=torch.from_numpy(self.type_chars[types].astype(numpy.int64)),
            next_ids=torch.from_numpy(self.type_to_vocab[after]),
            prev_ids=torch.from_numpy(self.type_to_vocab[before]),
        )


def sentence_batches(
    tokens: numpy.ndarray,
    type_chars: numpy.ndarray,
    type_to_vocab: numpy.ndarray,
    token_budget: int = 4096,
    max_tokens: Optional[int] = None,
) -> Iterator[LMBatch]:
    """Framed sentences of a stream in length-sorted padded batches (for perplexity); `max_tokens` keeps the
    first sentences up to that many tokens (a fixed, reproducible subset)."""
    tokens = numpy.asarray(tokens)
    type_to_vocab = numpy.asarray(type_to_vocab, dtype=numpy.int64)
    starts = numpy.flatnonzero(tokens == 0)
    ends = numpy.flatnonzero(tokens == 1) + 1
    if len(starts) != len(ends) or numpy.any(ends <= starts):
        raise ValueError("token stream is not a sequence of <S> ... </S> sentences")
    lengths = ends - starts
    if max_tokens is not None:
        keep = int(numpy.searchsorted(numpy.cumsum(lengths), max_tokens, side="right"))
        starts, lengths = starts[: max(keep, 1)], lengths[: max(keep, 1)]
    batches = token_budget_batches(lengths.tolist(), token_budget, max_batch_size=None)
    last = len(tokens) - 1
    for batch in batches:
        rows = numpy.asarray(batch, dtype=numpy.int64)
        width = int(lengths[rows[0]])
        steps = numpy.arange(width)[None, :]
        row_len = lengths[rows][:, None]
        positions = numpy.minimum(starts[rows][:, None] + steps, last)
        valid = steps < row_len
        types = tokens[positions]
        chars = type_chars[types].astype(numpy.int64) * valid[..., None]
        next_ids = numpy.where(steps < row_len - 1, type_to_vocab[tokens[numpy.minimum(positions + 1, last)]], IGNORE)
        prev_ids = numpy.where(valid & (steps >= 1), type_to_vocab[tokens[positions - 1]], IGNORE)
        yield LMBatch(torch.from_numpy(chars), torch.from_numpy(next_ids), torch.from_numpy(prev_ids))
