"""The one token-budget batcher (a batch costs rows x longest row; nothing is ever dropped), and the one
cut into overlapping windows (`windows`), shared by the pipe and `embed` so both give the same vectors.
"""

from collections.abc import Sequence
from typing import Optional

import numpy

# A token budget of 0 means the device's default; a GPU's keeps it busy (benchmarks/RESULTS.md, "GPU").
DEFAULT_TOKEN_BUDGET = 4096
GPU_TOKEN_BUDGET = 32768
DEFAULT_MAX_BATCH_SIZE = 1024
DEFAULT_WINDOW_SIZE = 128
DEFAULT_WINDOW_CONTEXT = 16


def token_budget_batches(
    lengths: Sequence[int],
    token_budget: int,
    max_batch_size: Optional[int] = DEFAULT_MAX_BATCH_SIZE,
    sort: bool = True,
) -> list[list[int]]:
    """Indices of `lengths` in batches whose padded size stays within `token_budget`, longest first (stable)
    unless not `sort`; at most `max_batch_size` rows a batch."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i]) if sort else range(len(lengths))
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for index in order:
        grown = max(width, int(lengths[index]), 1)
        full = max_batch_size is not None and len(current) >= max_batch_size
        if current and (full or (len(current) + 1) * grown > token_budget):
            batches.append(current)
            current, grown = [], max(int(lengths[index]), 1)
        current.append(index)
        width = grown
    if current:
        batches.append(current)
    return batches


def check_window(window_size: int, window_context: int) -> None:
    if window_size < 1:
        raise ValueError(f"window_size must be >= 1, got {window_size}")
    if window_context < 0 or 2 * window_context >= window_size:
        raise ValueError(
            f"window_context must be >= 0 and less than half of window_size ({window_size}), got {window_context}"
        )


def windows(n: int, window_size: int, window_context: int) -> list[tuple]:
    """(start, end, keep_start, keep_end) over range(n): keeps tile [0, n), each window <= window_size."""
    if n <= window_size:
        return [(0, n, 0, n)] if n else []
    stride = window_size - 2 * window_context
    out = []
    for keep_start in range(0, n, stride):
        keep_end = min(keep_start + stride, n)
        start = max(keep_start - window_context, 0)
        end = min(keep_end + window_context, n)
        out.append((start, end, keep_start - start, keep_end - start))
    return out


def token_slice(start: int, end: int) -> slice:
    """Where tokens start..end of a row sit in a biLM's output: after `<S>`."""
    return slice(1 + start, 1 + end)


class SentenceRunner:
    """What `embed_windowed` needs of a runner (`BiLMRunner`, `OnnxRunner`), and what it gives them."""

    stateful: bool
    token_budget: int
    max_batch_size: Optional[int]

    def embed_batch(self, sentences: Sequence[Sequence[str]]) -> list[numpy.ndarray]:
        raise NotImplementedError

    def embed_sentences(self, sentences: Sequence[Sequence[str]]) -> list[numpy.ndarray]:
        """Any number of sentences, in length-sorted batches under the token budget (stateless only)."""
        return embed_windowed(self, sentences, window_size=None)


def embed_windowed(
    runner: SentenceRunner,
    sentences: Sequence[Sequence[str]],
    window_size: Optional[int],
    window_context: int = 0,
) -> list[numpy.ndarray]:
    """Sentences -> one (L+1, n_tokens, 2P) array each, in length-sorted batches under the runner's token budget.
    A sentence longer than `window_size` tokens is cut into the pipe's overlapping windows and stitched back,
    so memory is bounded by the window and the budget, not by the longest sentence."""
    if runner.stateful:
        raise ValueError("stateful embedding keeps the caller's batches: call embed_batch per batch")
    # pieces: (sentence index, start, end, keep_start, keep_end)
    pieces: list[tuple[int, int, int, int, int]] = []
    for index, sentence in enumerate(sentences):
        n = len(sentence)
        cuts = [(0, n, 0, n)] if window_size is None or n <= window_size else windows(n, window_size, window_context)
        pieces.extend((index, *cut) for cut in cuts)
    results: list[Optional[numpy.ndarray]] = [None] * len(sentences)
    lengths = [end - start + 2 for _, start, end, _, _ in pieces]
    for batch in token_budget_batches(lengths, runner.token_budget, runner.max_batch_size):
        words = [sentences[pieces[i][0]][pieces[i][1] : pieces[i][2]] for i in batch]
        for i, array in zip(batch, runner.embed_batch(words)):
            index, start, end, keep_start, keep_end = pieces[i]
            if keep_start == 0 and end - start == len(sentences[index]):
                results[index] = array  # the whole sentence in one piece
                continue
            if results[index] is None:
                shape = (array.shape[0], len(sentences[index]), array.shape[2])
                results[index] = numpy.empty(shape, dtype=array.dtype)
            results[index][:, start + keep_start : start + keep_end] = array[:, keep_start:keep_end]  # type: ignore[index]
    return results  # type: ignore[return-value]
