"""The one token-budget batcher (pipe, embed, perplexity batches)."""

import random

import pytest

from spacy_elmo.bilm.batching import token_budget_batches


def test_length_sorted_batches_respect_budget():
    lengths = [5, 50, 3, 49, 10, 1, 2]
    batches = token_budget_batches(lengths, token_budget=60)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 60


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("sort", [True, False])
def test_every_index_once_within_budget_and_as_few_cuts_as_greedy(seed, sort):
    rng = random.Random(seed)
    lengths = [rng.randint(0, 40) for _ in range(rng.randint(0, 60))]
    budget = rng.choice([1, 10, 64, 500])
    batches = token_budget_batches(lengths, budget, max_batch_size=None, sort=sort)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    if sort:
        assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)
        # stable: equal lengths keep their order
        assert all(flat[k] < flat[k + 1] for k in range(len(flat) - 1) if lengths[flat[k]] == lengths[flat[k + 1]])
    else:
        assert flat == list(range(len(lengths)))
    for k, batch in enumerate(batches):
        width = max(max(lengths[i] for i in batch), 1)
        assert len(batch) == 1 or len(batch) * width <= budget
        if k + 1 < len(batches):  # a batch is cut only when the next row would not fit
            nxt = batches[k + 1][0]
            assert (len(batch) + 1) * max(width, lengths[nxt], 1) > budget


def test_row_limit():
    batches = token_budget_batches([2] * 10, token_budget=1000, max_batch_size=3)
    assert [len(b) for b in batches] == [3, 3, 3, 1]
    assert [len(b) for b in token_budget_batches([2] * 10, token_budget=1000, max_batch_size=None)] == [10]


def test_empty():
    assert token_budget_batches([], token_budget=10) == []
