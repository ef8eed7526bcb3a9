import numpy
import pytest
import torch

from spacy_elmo import chars
from spacy_elmo.pretrain.batches import IGNORE, WindowBatcher, sentence_batches


def make_stream(n_sentences=40, seed=0):
    """A synthetic framed stream over types 0..29 (0 = <S>, 1 = </S>)."""
    rng = numpy.random.default_rng(seed)
    tokens = []
    for _ in range(n_sentences):
        tokens += [0, *rng.integers(2, 30, size=int(rng.integers(1, 12))).tolist(), 1]
    types = ["<S>", "</S>", *[f"w{i}" for i in range(2, 30)]]
    return numpy.asarray(tokens, dtype=numpy.int32), types


def test_windows_hold_the_right_characters_and_shifted_targets():
    tokens, types = make_stream()
    type_chars = chars.tokens_to_ids(types).astype(numpy.int16)
    to_vocab = numpy.arange(len(types), dtype=numpy.int32) + 100  # a visible mapping
    batcher = WindowBatcher(tokens, type_chars, to_vocab, window=7, batch_size=4, seed=3)
    batch = batcher.batch(epoch=1, index=2)
    assert batch.char_ids.shape == (4, 7, 50) and batch.char_ids.dtype == torch.int64
    for row in range(4):
        # recover the window's start from its characters, then check every target
        decoded = chars.ids_to_text(batch.char_ids[row].numpy())
        starts = [s for s in range(1, len(tokens) - 8) if [types[t] for t in tokens[s : s + 7]] == decoded]
        assert starts
        s = starts[0]
        assert batch.next_ids[row].tolist() == (tokens[s + 1 : s + 8] + 100).tolist()
        assert batch.prev_ids[row].tolist() == (tokens[s - 1 : s + 6] + 100).tolist()


def test_schedule_is_a_function_of_seed_epoch_index_and_covers_each_window_once():
    tokens, types = make_stream(200)
    type_chars = chars.tokens_to_ids(types).astype(numpy.int16)
    ident = numpy.arange(len(types), dtype=numpy.int32)
    a = WindowBatcher(tokens, type_chars, ident, window=5, batch_size=8, seed=1)
    b = WindowBatcher(tokens, type_chars, ident, window=5, batch_size=8, seed=1)
    assert torch.equal(a.batch(2, 3).char_ids, b.batch(2, 3).char_ids)
    assert not torch.equal(a.batch(2, 3).char_ids, a.batch(3, 3).char_ids)
    offset, order = a._epoch_plan(0)
    assert sorted(order.tolist()) == list(range(a.n_windows))


def test_data_parallel_shares_make_up_the_global_batch():
    tokens, types = make_stream(100)
    type_chars = chars.tokens_to_ids(types).astype(numpy.int16)
    ident = numpy.arange(len(types), dtype=numpy.int32)
    whole = WindowBatcher(tokens, type_chars, ident, window=6, batch_size=4, seed=0).batch(0, 1)
    parts = [WindowBatcher(tokens, type_chars, ident, 6, 4, 0, rank=r, world_size=2).batch(0, 1) for r in range(2)]
    assert torch.equal(torch.cat([p.char_ids for p in parts]), whole.char_ids)
    assert torch.equal(torch.cat([p.next_ids for p in parts]), whole.next_ids)
    with pytest.raises(ValueError, match="divisible"):
        WindowBatcher(tokens, type_chars, ident, 6, 5, 0, rank=0, world_size=2)


def test_sentence_batches_frame_every_sentence_and_mask_padding():
    tokens, types = make_stream(30)
    type_chars = chars.tokens_to_ids(types).astype(numpy.int16)
    ident = numpy.arange(len(types), dtype=numpy.int32)
    n_targets = 0
    n_sentences = 0
    for batch in sentence_batches(tokens, type_chars, ident, token_budget=40):
        real = batch.char_ids.gt(0).any(-1)
        lengths = real.sum(1)
        for row, m in enumerate(lengths.tolist()):
            assert batch.next_ids[row, : m - 1].ge(0).all() and batch.next_ids[row, m - 1 :].eq(IGNORE).all()
            assert batch.prev_ids[row, 0] == IGNORE and batch.prev_ids[row, 1:m].ge(0).all()
            assert batch.next_ids[row, m - 2] == 1 and batch.prev_ids[row, 1] == 0  # </S> and <S>
            n_targets += m - 1
        n_sentences += len(lengths)
    assert n_sentences == 30
    assert n_targets == len(tokens) - 30
