"""The LSTM stack at CPU inference computes its input products a chunk of steps at a time, leaving out rows
that ended: the same bits as all steps at once, for every precision, with and without state."""

import pytest
import torch

from spacy_elmo import chars
from spacy_elmo.bilm import lstm
from spacy_elmo.bilm.precision import FP32, Products, TorchHalf, products_for

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


def run_both(bilm, products, state=None, dtype=torch.float64):
    """`forward`'s CPU loop and `forward_static` (the GPU's loop) on the same ragged batch."""
    bilm = bilm.to(dtype)
    ids = torch.from_numpy(chars.batch_to_ids(SENTENCES))
    tokens = bilm.embed_tokens(ids, products)
    lengths = ids.gt(0).any(-1).sum(1)
    shrinking = bilm.lstm(tokens, lengths, initial_state=state, return_final_state=True, products=products)
    static = bilm.lstm.forward_static(tokens, lengths, state, True, 0.0, products)
    return shrinking, static


@pytest.mark.parametrize("with_state", [False, True])
def test_the_static_loop_gives_the_shrinking_loops_layers_and_final_state(make_bilm, with_state):
    """Every row running every step, masked, is the loop that drops rows as they end (float64: only the
    summation order may differ)."""
    bilm = make_bilm(seed=4)
    state = None
    if with_state:
        generator = torch.Generator().manual_seed(1)
        zero = bilm.lstm.zero_state(len(SENTENCES), torch.device("cpu"), torch.float64)
        state = lstm.LSTMState(
            torch.randn(zero.h.shape, generator=generator, dtype=torch.float64) * 0.1,
            torch.randn(zero.c.shape, generator=generator, dtype=torch.float64),
        )
    with torch.no_grad():
        (expected, expected_final), (static, static_final) = run_both(bilm, FP32, state)
    assert len(static) == len(expected) == bilm.options.n_layers
    for a, b in zip(expected, static):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(b, a, rtol=0, atol=1e-12)
    lengths = torch.tensor([len(s) + 2 for s in SENTENCES])
    past = torch.arange(static[0].shape[1]).unsqueeze(0) >= lengths.unsqueeze(1)
    assert all(bool((layer[past] == 0).all()) for layer in static), "zero past each row's length"
    torch.testing.assert_close(static_final.h, expected_final.h, rtol=0, atol=1e-12)
    torch.testing.assert_close(static_final.c, expected_final.c, rtol=0, atol=1e-12)


def test_the_static_loop_passes_the_same_gradients(make_bilm):
    bilm = make_bilm(seed=5).to(torch.float64)
    grads = []
    for static in (False, True):
        bilm.zero_grad()
        ids = torch.from_numpy(chars.batch_to_ids(SENTENCES))
        tokens = bilm.embed_tokens(ids, FP32)
        lengths = ids.gt(0).any(-1).sum(1)
        run = bilm.lstm.forward_static if static else bilm.lstm.forward
        layers, final = run(tokens, lengths, None, True, 0.0, FP32)
        (sum(layer.pow(2).sum() for layer in layers) + final.c.sum()).backward()
        grads.append([p.grad.clone() for p in bilm.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)


def test_the_static_loop_in_bf16_keeps_its_operands_and_the_half_loops_values(make_bilm):
    """bf16 operands from the first product to the last (no cast a step) stay within bf16's error of the loop
    that casts around every product."""
    bilm = make_bilm(seed=6)
    half = Products("bf16", TorchHalf("bf16"))
    with torch.no_grad():
        (expected, _), (static, _) = run_both(bilm, half, dtype=torch.float32)
    for a, b in zip(expected, static):
        assert b.dtype == torch.float32
        assert float((a - b).abs().max()) <= 2e-2 * float(a.abs().max())
