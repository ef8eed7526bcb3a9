"""The private torch operators run only on the supported torch range; elsewhere the public products give
torch's bits (fp32, bf16) and the same bits (int8)."""

import re
from pathlib import Path

import pytest
import torch

from spacy_elmo.bilm import _onednn
from spacy_elmo.bilm.precision import Int8Weight, Products, TorchFloat, TorchHalf, int8_product, products_for

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.mark.parametrize(
    "version,supported",
    [
        ("2.12.1", False),
        ("2.13.0+cpu", True),
        ("2.13.0", True),
        ("2.14.1", True),
        ("2.14.0a0+git1234abc", True),
        ("2.15.0", False),
        ("3.0.0", False),
        ("1.13.1", False),
    ],
)
def test_supported_torch_versions(version, supported):
    assert _onednn.supported_torch(version) is supported


def test_an_unparsable_version_is_an_error():
    with pytest.raises(ValueError, match="not a torch version"):
        _onednn.torch_release("nightly")


def test_the_installed_torch_is_checked_and_pyproject_names_the_range():
    assert _onednn.ALLOWED is _onednn.supported_torch(torch.__version__)
    torch_lines = re.findall(r"#[^\n]*|\"torch[^\"]*\"", PYPROJECT.read_text(encoding="utf-8"))
    assert any(_onednn.supported_range() in line for line in torch_lines), "pyproject.toml names the supported range"


def test_outside_the_range_no_private_linear(monkeypatch):
    monkeypatch.setattr(_onednn, "ALLOWED", False)
    for dtype in (torch.float32, torch.bfloat16):
        reason = _onednn.linear_unavailable(dtype)
        assert reason is not None and torch.__version__ in reason and _onednn.supported_range() in reason
    for precision, torch_strategy in (("fp32", TorchFloat), ("bf16", TorchHalf)):
        products = products_for(precision)
        assert len(products.strategies) == 1 and isinstance(products.strategies[0], torch_strategy)


def test_a_cpu_without_bf16_instructions_is_named():
    reason = _onednn.linear_unavailable(torch.bfloat16)
    if _onednn.ALLOWED and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert reason is not None and "avx_ne_convert" in reason
    else:
        pytest.skip(f"this CPU runs oneDNN's bf16 products, or they are off: {reason}")


def ids_of(sentences):
    from spacy_elmo import chars

    return torch.from_numpy(chars.batch_to_ids(sentences))


SENTENCES = [["The", "cat", "sat", "."], ["Ünïcödé", "words", "here"], ["a"], "one two three four five six".split()]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_outside_the_range_fp32_and_bf16_are_torch_products_bit_for_bit(reference_bilm, monkeypatch, precision):
    reference = Products(precision, TorchFloat() if precision == "fp32" else TorchHalf(precision))
    ids = ids_of(SENTENCES)
    monkeypatch.setattr(_onednn, "ALLOWED", False)
    with torch.no_grad():
        expected = reference_bilm(ids, products=reference).layers
        got = reference_bilm(ids, products=products_for(precision)).layers
    assert torch.equal(got, expected)


def test_outside_the_range_int8_gives_the_same_bits(reference_bilm, monkeypatch):
    ids = ids_of(SENTENCES)
    with torch.no_grad():
        inside = reference_bilm(ids, products=products_for("int8")).layers
        monkeypatch.setattr(_onednn, "ALLOWED", False)
        outside = reference_bilm(ids, products=products_for("int8")).layers
    assert torch.equal(inside, outside)


@pytest.mark.parametrize("shape", [(4, 16, 8), (37, 512, 2048), (5, 4096, 96)])
def test_public_int_mm_is_exact(monkeypatch, shape):
    m, k, n = shape
    generator = torch.Generator().manual_seed(k)
    a = torch.randint(-128, 128, (m, k), generator=generator, dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=generator, dtype=torch.int8).t()
    a[0], b[:, 0] = -128, -128  # the largest products, summed over all of K
    exact = (a.long() @ b.long()).to(torch.int32)
    assert torch.equal(_onednn.int_mm(a, b), exact)
    monkeypatch.setattr(_onednn, "ALLOWED", False)
    public = _onednn.int_mm(a, b)
    assert public.dtype == torch.int32 and torch.equal(public, exact)


@pytest.mark.parametrize("rows", [1, 4, 37, 704])
@pytest.mark.parametrize("bias_rows", [0, 1, "M"])
def test_packed_int8_products_are_the_unpacked_ones_bit_for_bit(rows, bias_rows):
    """oneDNN's packed int8 product (column scales applied as it writes) rounds as `_int_mm` + scaling."""
    if _onednn.qlinear_unavailable() is not None:
        pytest.skip(_onednn.qlinear_unavailable())
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

        monkeypatch.setattr(_onednn, "pack_int8", cannot_pack)
        products = products_for("int8")
        unpacked = reference_bilm(ids, products=products).layers
    assert all(
        w.packed is None for ws in products._prepared.values() for w in (ws[2] if isinstance(ws[2], list) else [ws[2]])
    )
    assert torch.equal(packed, unpacked)


def test_int8_packs_for_onednn_only_on_avx512_cpus(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(_onednn, "ALLOWED", True)  # the CPU is asked only inside the torch version gate
    assert "AVX2" in _onednn.qlinear_unavailable()
    weight = products_for("int8").strategies[0].prepare(torch.randn(8, 16))
    assert weight.packed is None  # `_int_mm`'s products: the same bits, measured where int8 pays


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("per_row_bias", [False, True])
def test_a_rows_onednn_product_does_not_depend_on_the_rows_beside_it(precision, per_row_bias):
    """What the LSTM's input products in chunks of steps rely on: a row's bits, biased either way, are the
    same in a long product and in a short one."""
    from spacy_elmo.bilm.precision import OneDNN

    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    if _onednn.linear_unavailable(dtype) is not None:
        pytest.skip(_onednn.linear_unavailable(dtype))
    generator = torch.Generator().manual_seed(7)
    rows = 2 * 256 + 37
    x = torch.randn(rows, 512, generator=generator)
    w = torch.randn(512, 1024 + 48, generator=generator)
    bias = torch.randn(rows if per_row_bias else 1, w.shape[1], generator=generator)
    strategy = OneDNN(precision)
    prepared = strategy.prepare(w)
    whole = strategy.multiply(x, prepared, bias)
    pieces = [
        strategy.multiply(x[s : s + 5], prepared, bias[s : s + 5] if per_row_bias else bias) for s in (0, 300, 540)
    ]
    for start, piece in zip((0, 300, 540), pieces):
        assert torch.equal(whole[start : start + 5], piece)
    out = torch.empty_like(whole)
    assert torch.equal(strategy.multiply_matrix(x, prepared, bias, out), whole)
