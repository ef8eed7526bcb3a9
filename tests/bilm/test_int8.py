"""int8 products: exact integers, scaled per row and per column, so oneDNN's packed product, fbgemm's and
`_int_mm` give the same bits, a row's result does not depend on the rows beside it, and runs are
reproducible; the kernel and the weights' levels follow the CPU."""

import numpy
import pytest
import torch

from spacy_elmo import chars
from spacy_elmo.bilm import _torch_private, int8
from spacy_elmo.bilm.int8 import Int8, Int8Weight, int8_product
from spacy_elmo.bilm.precision import Products, products_for, slower_than_fp32_here
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


@pytest.fixture
def fresh_probe():
    """`fbgemm_exact` probed again under the test's faked CPU, and again after it."""
    int8.fbgemm_exact.cache_clear()
    yield
    int8.fbgemm_exact.cache_clear()


def fake_cpu(monkeypatch, capability: str, fbgemm: bool = True) -> None:
    """torch's kernels `capability`; fbgemm's operators present or not."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(_torch_private, "ALLOWED", True)  # the CPU is asked only inside the torch version gate
    if not fbgemm:
        monkeypatch.setattr(_torch_private, "fbgemm_unavailable", lambda: "simulated: no fbgemm")


@pytest.mark.parametrize(
    "capability,unavailable,kernel,levels,packed_by",
    [
        ("AVX512", _torch_private.qlinear_unavailable, "onednn", 127.0, "packed"),  # oneDNN's 8-bit products
        ("AVX2", _torch_private.fbgemm_unavailable, "fbgemm", 63.0, "fbgemm"),  # fbgemm's on 7-bit weights
    ],
)
def test_each_cpu_gets_its_kernel_and_weight_levels(
    monkeypatch, fresh_probe, capability, unavailable, kernel, levels, packed_by
):
    if unavailable() is not None:
        pytest.skip(unavailable())
    fake_cpu(monkeypatch, capability)
    strategy = products_for("int8").strategies[0]
    assert (strategy.kernel, strategy.levels, strategy.kernels) == (kernel, levels, "int8")
    weight = strategy.prepare(torch.randn(8, 16))
    held = {"packed": weight.packed, "fbgemm": weight.fbgemm, "rows": weight.rows}
    assert [name for name, value in held.items() if value is not None] == [packed_by]
    assert slower_than_fp32_here("int8") is None


def test_avx2_cpus_without_fbgemm_keep_int_mm_and_say_it_is_slow(monkeypatch, fresh_probe):
    fake_cpu(monkeypatch, "AVX2", fbgemm=False)
    strategy = products_for("int8").strategies[0]
    assert (strategy.kernel, strategy.levels) == ("int_mm", 63.0)
    weight = strategy.prepare(torch.randn(8, 16))
    assert weight.rows is not None and int(weight.rows.abs().max()) == 63
    reason = slower_than_fp32_here("int8")
    assert reason is not None and "AVX2" in reason and "simulated: no fbgemm" in reason


def test_a_saturating_fbgemm_is_not_used(monkeypatch, fresh_probe):
    """`vpmaddubsw` without VNNI: int16 sums of pairs of products, clipped; the probe sees it."""
    if _torch_private.fbgemm_unavailable() is not None:
        pytest.skip(_torch_private.fbgemm_unavailable())
    real = _torch_private.fbgemm_linear

    def saturating(quantized, packed, zero_point):
        return real(quantized, packed, zero_point).clamp(-32768, 32767)  # as a saturated sum would be clipped

    fake_cpu(monkeypatch, "AVX2")
    monkeypatch.setattr(_torch_private, "fbgemm_linear", saturating)
    assert not int8.fbgemm_exact(63.0)
    assert products_for("int8").strategies[0].kernel == "int_mm"


def test_an_unknown_int8_kernel_is_named():
    with pytest.raises(ValueError, match=r"int8 kernel must be one of 'onednn', 'fbgemm', 'int_mm', got 'vnni'"):
        Int8(kernel="vnni")


@pytest.mark.parametrize("levels", [63.0, 127.0])
@pytest.mark.parametrize("rows", [1, 4, 37, 704])
@pytest.mark.parametrize("bias_rows", [0, 1, "M"])
def test_fbgemm_products_are_the_int_mm_ones_bit_for_bit(levels, rows, bias_rows):
    """fbgemm's product (column scales applied as it writes) rounds as `_int_mm` + scaling, at the weight
    levels where it is exact here; and a row's result does not depend on the rows beside it."""
    if not int8.fbgemm_exact(levels):
        pytest.skip(f"fbgemm's products are not exact here for weights up to {levels}")
    generator = torch.Generator().manual_seed(rows)
    w = torch.randn(512, 2048 + 96, generator=generator)
    x = torch.randn(rows, 512, generator=generator) * torch.rand(rows, 1, generator=generator) * 4
    bias = None if bias_rows == 0 else torch.randn(rows if bias_rows == "M" else 1, w.shape[1], generator=generator)
    fbgemm, plain = Int8Weight(w, fbgemm=True, levels=levels), Int8Weight(w, levels=levels)
    assert fbgemm.fbgemm is not None and plain.fbgemm is None and plain.packed is None
    assert int(plain.rows.abs().max()) == int(levels)
    expected = int8_product(x, plain, bias)
    assert torch.equal(int8_product(x, fbgemm, bias), expected)
    out = torch.empty_like(expected)
    assert int8_product(x, fbgemm, bias, out=out) is out and torch.equal(out, expected)
    assert torch.equal(int8_product(x[:1], fbgemm, None if bias is None else bias[:1]), expected[:1])


@pytest.mark.parametrize("kernel", ["fbgemm", "onednn"])
def test_every_kernel_gives_the_int_mm_bits_in_the_biLM(reference_bilm, kernel):
    """The kernels differ in speed only: the biLM's outputs, at either weight level, are `_int_mm`'s."""
    available = _torch_private.fbgemm_unavailable() if kernel == "fbgemm" else _torch_private.qlinear_unavailable()
    if available is not None:
        pytest.skip(available)
    ids = ids_of(SENTENCES)
    for levels in (63.0, 127.0):
        if kernel == "fbgemm" and not int8.fbgemm_exact(levels):
            continue
        with torch.no_grad():
            expected = reference_bilm(ids, products=Products("int8", Int8(kernel="int_mm", levels=levels))).layers
            got = reference_bilm(ids, products=Products("int8", Int8(kernel=kernel, levels=levels))).layers
        assert torch.equal(got, expected), f"weights up to {levels}"


def test_a_weight_fbgemm_cannot_pack_keeps_int_mm(reference_bilm, monkeypatch):
    if not int8.fbgemm_exact(63.0):
        pytest.skip("fbgemm's products are not exact here for 7-bit weights")
    ids = ids_of(SENTENCES)

    def cannot_pack(rows, scales):
        raise RuntimeError("simulated: fbgemm cannot pack this weight")

    with torch.no_grad():
        expected = reference_bilm(ids, products=Products("int8", Int8(kernel="fbgemm", levels=63.0))).layers
        monkeypatch.setattr(_torch_private, "pack_fbgemm", cannot_pack)
        products = Products("int8", Int8(kernel="fbgemm", levels=63.0))
        got = reference_bilm(ids, products=products).layers
    prepared = [w for ws in products._prepared.values() for w in (ws[2] if isinstance(ws[2], list) else [ws[2]])]
    assert prepared and all(w.fbgemm is None and w.rows is not None for w in prepared)
    assert torch.equal(got, expected)
