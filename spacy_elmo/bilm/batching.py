"""The one token-budget batcher: which sentences run through the biLM together.

A batch costs its padded size (rows x longest row), so batches are cut where the next row would take
that over the budget; a row longer than the budget gets a batch of its own (nothing is ever dropped).
Sorted by length (the default), rows of similar length share a batch and little is padding; unsorted,
the given order is kept (stateful embedding, where row i continues row i of the previous batch).
Used by the pipe, `embed` and the pretraining's evaluation batches.
"""

from collections.abc import Sequence
from typing import Optional

DEFAULT_TOKEN_BUDGET = 4096
DEFAULT_MAX_BATCH_SIZE = 1024


def token_budget_batches(
    lengths: Sequence[int],
    token_budget: int,
    max_batch_size: Optional[int] = DEFAULT_MAX_BATCH_SIZE,
    sort: bool = True,
) -> list[list[int]]:
    """Indices of `lengths` in batches whose padded size stays within `token_budget`.

    sort: longest first (stable among equal lengths), else in the order given.
    max_batch_size: at most this many rows a batch (None: no limit).
    """
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
