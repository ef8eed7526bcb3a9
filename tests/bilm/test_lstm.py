"""The LSTM stack at CPU inference computes its input products a chunk of steps at a time, leaving out rows
that ended: the same bits as all steps at once, for every precision, with and without state."""

import pytest
import torch

from spacy_elmo import chars
from spacy_elmo.bilm import lstm
from spacy_elmo.bilm.precision import products_for

# ragged, unsorted: rows end at different steps, some before others begin their last chunk
SENTENCES = [
    "a b c d e f g h i".split(),
    "one".split(),
    "x y z w v u t".split(),
    "p q r".split(),
    "k l m n o p q r s t u v".split(),
    "seven words are in this one too".split(),
]


def run(bilm, products, state=None):
    ids = torch.from_numpy(chars.batch_to_ids(SENTENCES))
    with torch.no_grad():
        tokens = bilm.embed_tokens(ids, products)
        lengths = ids.gt(0).any(-1).sum(1)
        return bilm.lstm(tokens, lengths, initial_state=state, return_final_state=True, products=products)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_input_products_in_chunks_are_all_at_once_bit_for_bit(make_bilm, monkeypatch, precision):
    bilm = make_bilm(seed=2)
    products = products_for(precision)
    assert lstm.input_chunk_steps(len(SENTENCES), 4 * bilm.options.lstm_dim) >= 14, "one chunk by default"
    whole, whole_state = run(bilm, products)
    monkeypatch.setattr(lstm, "INPUT_CHUNK_BYTES", 1)  # a step a chunk, each with only its running rows
    assert lstm.input_chunk_steps(len(SENTENCES), 4 * bilm.options.lstm_dim) == 1
    calls = []
    bind, input_weights = products.bind, {id(w) for w in bilm.lstm.input_w}

    def counting_bind(w, like, *args, **kwargs):
        bound = bind(w, like, *args, **kwargs)
        if id(w) not in input_weights:
            return bound
        return lambda x, bias=None: calls.append(x.shape) or bound(x, bias)

    monkeypatch.setattr(products, "bind", counting_bind)
    chunked, chunked_state = run(bilm, products)
    monkeypatch.setattr(products, "bind", bind)
    # every step an input product of its own, down to the running rows
    assert len(calls) >= 2 * max(len(s) for s in SENTENCES) and min(shape[-2] for shape in calls) == lstm.MIN_GEMM_ROWS
    assert all(torch.equal(a, b) for a, b in zip(whole, chunked))
    assert torch.equal(whole_state.h, chunked_state.h) and torch.equal(whole_state.c, chunked_state.c)
    again, _ = run(bilm, products, state=chunked_state)
    monkeypatch.setattr(lstm, "INPUT_CHUNK_BYTES", 16 << 20)
    expected, _ = run(bilm, products, state=whole_state)
    assert all(torch.equal(a, b) for a, b in zip(again, expected))


def test_a_chunk_of_the_full_model_at_batch_32_stays_below_the_mmap_threshold():
    steps = lstm.input_chunk_steps(32, 4 * 4096)
    assert steps == 4 and 2 * steps * 32 * 4 * 4096 * 4 <= 16 << 20 < 32 << 20
