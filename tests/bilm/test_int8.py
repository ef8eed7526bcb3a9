"""int8 products: exact integers, scaled per row and per column, so oneDNN's packed product and `_int_mm`
give the same bits, a row's result does not depend on the rows beside it, and runs are reproducible."""

import numpy
import pytest
import torch

from spacy_elmo import chars
from spacy_elmo.bilm import _torch_private
from spacy_elmo.bilm.int8 import Int8, Int8Weight, int8_product
from spacy_elmo.bilm.precision import products_for
from spacy_elmo.bilm.runner import BiLMRunner

SENTENCES = [["The", "cat", "sat", "."], ["Ünïcödé", "words", "here"], ["a"], "one two three four five six".split()]


def ids_of(sentences):
    return torch.from_numpy(chars.batch_to_ids(sentences))


@pytest.mark.parametrize("rows", [1, 4, 37, 704])
@pytest.mark.parametrize("bias_rows", [0, 1, "M"])
def test_packed_int8_products_are_the_unpacked_ones_bit_for_bit(rows, bias_rows):
    """oneDNN's packed int8 product (column scales applied as it writes) rounds as `_int_mm` + scaling."""
    if _torch_private.qlinear_unavailable() is not None:
        pytest.skip(_torch_private.qlinear_unavailable())
    generator = torch.Generator().manual_seed(rows)
    w = torch.randn(512, 2048 + 96, generator=generator)  # a tail after the column blocks
    x = torch.randn(rows, 512, generator=generator) * torch.rand(rows, 1, generator=generator) * 4
    bias = None if bias_rows == 0 else torch.randn(rows if bias_rows == "M" else 1, w.shape[1], generator=generator)
    packed, plain = Int8Weight(w, pack=True), Int8Weight(w, pack=False)
    assert packed.packed is not None and plain.packed is None
    expected = int8_product(x, plain, bias)
    assert torch.equal(int8_product(x, packed, bias), expected)
    out = torch.empty_like(expected)
    assert int8_product(x, packed, bias, out=out) is out and torch.equal(out, expected)
    # and a row's result does not depend on the rows beside it
    assert torch.equal(int8_product(x[:1], packed, None if bias is None else bias[:1]), expected[:1])


def test_a_weight_onednn_cannot_pack_for_int8_keeps_int_mm(reference_bilm, monkeypatch):
    ids = ids_of(SENTENCES)
    with torch.no_grad():
        packed = reference_bilm(ids, products=products_for("int8")).layers

        def cannot_pack(rows):
            raise RuntimeError("simulated: no int8 kernels for this weight")

        monkeypatch.setattr(_torch_private, "pack_int8", cannot_pack)
        products = products_for("int8")
        unpacked = reference_bilm(ids, products=products).layers
    assert all(
        w.packed is None for ws in products._prepared.values() for w in (ws[2] if isinstance(ws[2], list) else [ws[2]])
    )
    assert torch.equal(packed, unpacked)


def test_int8_packs_for_onednn_only_on_avx512_cpus(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(_torch_private, "ALLOWED", True)  # the CPU is asked only inside the torch version gate
    assert "AVX2" in _torch_private.qlinear_unavailable()
    weight = products_for("int8").strategies[0].prepare(torch.randn(8, 16))
    assert weight.packed is None  # `_int_mm`'s products: the same bits, measured where int8 pays


def test_int8_outputs_are_reproducible_and_weights_untouched(reference_bilm, all_sentences):
    before = {k: v.clone() for k, v in reference_bilm.state_dict().items()}
    first = BiLMRunner(reference_bilm, precision="int8").embed_sentences(all_sentences)
    second = BiLMRunner(reference_bilm, precision="int8").embed_sentences(all_sentences)
    assert all(numpy.array_equal(a, b) for a, b in zip(first, second))
    after = reference_bilm.state_dict()
    assert all(torch.equal(before[k], after[k]) and after[k].dtype == torch.float32 for k in before)


@pytest.mark.parametrize("pack", [False, True])
def test_a_product_per_direction_is_each_directions_product_bit_for_bit(pack):
    """`Int8.multiply` quantizes both directions' rows at once and adds the bias at once: the same bits as
    a direction at a time; and a (..., K) input multiplies as its rows would."""
    if pack and _torch_private.qlinear_unavailable() is not None:
        pytest.skip(_torch_private.qlinear_unavailable())
    generator = torch.Generator().manual_seed(8)
    w = torch.randn(2, 24, 40, generator=generator)
    x = torch.randn(2, 7, 24, generator=generator)
    bias = torch.randn(2, 1, 40, generator=generator)
    strategy = Int8(pack)
    directions = strategy.prepare(w)
    assert isinstance(directions, list) and len(directions) == 2
    expected = torch.stack([int8_product(x[d], directions[d], bias[d]) for d in range(2)])
    assert torch.equal(strategy.multiply(x, directions, bias), expected)
    one = strategy.prepare(w[0])
    rows = int8_product(x.reshape(-1, 24), one, bias[0]).view(2, 7, 40)
    assert torch.equal(strategy.multiply(x, one, bias[0]), rows)
