"""The private torch APIs run only on the supported torch range; elsewhere the public stand-ins give torch's
bits (fp32, bf16), the same bits (int8, `int_mm`), the same answers (`tensor_state`), or a clear error
(`scan`)."""

import re
from pathlib import Path

import pytest
import torch

from spacy_elmo import chars
from spacy_elmo.bilm import _torch_private
from spacy_elmo.bilm.precision import Products, TorchFloat, TorchHalf, products_for

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
    assert _torch_private.supported_torch(version) is supported


def test_an_unparsable_version_is_an_error():
    with pytest.raises(ValueError, match="not a torch version"):
        _torch_private.torch_release("nightly")


def test_the_installed_torch_is_checked_and_pyproject_names_the_range():
    assert _torch_private.ALLOWED is _torch_private.supported_torch(torch.__version__)
    torch_lines = re.findall(r"#[^\n]*|\"torch[^\"]*\"", PYPROJECT.read_text(encoding="utf-8"))
    assert any(_torch_private.supported_range() in line for line in torch_lines), (
        "pyproject.toml names the supported range"
    )


def test_outside_the_range_no_private_linear(monkeypatch):
    monkeypatch.setattr(_torch_private, "ALLOWED", False)
    for dtype in (torch.float32, torch.bfloat16):
        reason = _torch_private.linear_unavailable(dtype)
        assert reason is not None and torch.__version__ in reason and _torch_private.supported_range() in reason
    for precision, torch_strategy in (("fp32", TorchFloat), ("bf16", TorchHalf)):
        products = products_for(precision)
        assert len(products.strategies) == 1 and isinstance(products.strategies[0], torch_strategy)


def test_a_cpu_without_bf16_instructions_is_named():
    reason = _torch_private.linear_unavailable(torch.bfloat16)
    if _torch_private.ALLOWED and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert reason is not None and "avx_ne_convert" in reason
    else:
        pytest.skip(f"this CPU runs oneDNN's bf16 products, or they are off: {reason}")


def ids_of(sentences):
    return torch.from_numpy(chars.batch_to_ids(sentences))


SENTENCES = [["The", "cat", "sat", "."], ["Ünïcödé", "words", "here"], ["a"], "one two three four five six".split()]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_outside_the_range_fp32_and_bf16_are_torch_products_bit_for_bit(reference_bilm, monkeypatch, precision):
    reference = Products(precision, TorchFloat() if precision == "fp32" else TorchHalf(precision))
    ids = ids_of(SENTENCES)
    monkeypatch.setattr(_torch_private, "ALLOWED", False)
    with torch.no_grad():
        expected = reference_bilm(ids, products=reference).layers
        got = reference_bilm(ids, products=products_for(precision)).layers
    assert torch.equal(got, expected)


def test_outside_the_range_int8_gives_the_same_bits(reference_bilm, monkeypatch):
    ids = ids_of(SENTENCES)
    with torch.no_grad():
        inside = reference_bilm(ids, products=products_for("int8")).layers
        monkeypatch.setattr(_torch_private, "ALLOWED", False)
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
    assert torch.equal(_torch_private.int_mm(a, b), exact)
    monkeypatch.setattr(_torch_private, "ALLOWED", False)
    public = _torch_private.int_mm(a, b)
    assert public.dtype == torch.int32 and torch.equal(public, exact)


@pytest.mark.parametrize("counter", [True, False], ids=["version counter", "bytes"])
def test_tensor_state_changes_with_every_in_place_change(monkeypatch, counter):
    monkeypatch.setattr(_torch_private, "VERSION_COUNTER", counter)
    w = torch.nn.Parameter(torch.tensor([[1.0, 0.0], [float("nan"), 2.0]]))
    before = _torch_private.tensor_state(w)
    assert _torch_private.tensor_state(w) == before, "unchanged: the same state"
    with torch.no_grad():
        w[0, 1] = -0.0  # equal as a number, not as bits
    after = _torch_private.tensor_state(w)
    assert after != before
    with torch.no_grad():
        w.add_(1.0)
    assert _torch_private.tensor_state(w) != after
    assert _torch_private.tensor_state(w.detach().clone()) != _torch_private.tensor_state(w), "another storage"


def test_outside_the_range_a_changed_weight_is_prepared_again(monkeypatch):
    """`Tensor._version`'s public stand-in: an exact comparison, so no stale prepared weight and no
    needless preparing."""
    monkeypatch.setattr(_torch_private, "ALLOWED", False)
    monkeypatch.setattr(_torch_private, "VERSION_COUNTER", False)
    generator = torch.Generator().manual_seed(5)
    w = torch.nn.Parameter(torch.randn(16, 24, generator=generator))
    x = torch.randn(8, 16, generator=generator)
    products = products_for("int8")
    with torch.no_grad():
        first = products.product(x, w)
        prepared = products._prepared[("int8", id(w))][2]
        assert torch.equal(products.product(x, w), first)
        assert products._prepared[("int8", id(w))][2] is prepared, "unchanged: prepared once"
        w.mul_(2.0)
        assert torch.equal(products.product(x, w), products_for("int8").product(x, w))
        assert not torch.equal(products.product(x, w), first)


def test_scan_is_a_loop_over_the_first_dimension():
    if _torch_private.scan_unavailable() is not None:
        pytest.skip(_torch_private.scan_unavailable())

    def step(carry, x):
        carry = carry * 0.5 + x
        return carry, carry.clone()

    xs = torch.randn(5, 3, generator=torch.Generator().manual_seed(6))
    last, ys = _torch_private.scan(step, torch.zeros(3), xs)
    carry, expected = torch.zeros(3), []
    for x in xs:
        carry, y = step(carry, x)
        expected.append(y)
    assert torch.allclose(ys, torch.stack(expected)) and torch.allclose(last, carry)


def test_outside_the_range_scan_refuses_and_says_why(monkeypatch):
    monkeypatch.setattr(_torch_private, "ALLOWED", False)
    reason = _torch_private.scan_unavailable()
    assert reason is not None and torch.__version__ in reason and _torch_private.supported_range() in reason
    with pytest.raises(RuntimeError, match="ONNX.*scan.*outside"):
        _torch_private.scan(lambda carry, x: (carry, x), torch.zeros(1), torch.zeros(2, 1))


def test_outside_the_range_no_fbgemm_and_int8_keeps_int_mm(monkeypatch):
    monkeypatch.setattr(_torch_private, "ALLOWED", False)
    reason = _torch_private.fbgemm_unavailable()
    assert reason is not None and torch.__version__ in reason and _torch_private.supported_range() in reason
    assert products_for("int8").strategies[0].kernel == "int_mm"


@pytest.mark.parametrize("rows", [1, 5, 300])
def test_fbgemm_linear_is_the_exact_product_scaled_per_column(rows):
    """7-bit weights (exact on every fbgemm kernel: pairs of uint8 x int8 products fit int16) by codes q
    taken as q + 128, the int32 sum times each column's scale, in float32; the global engine restored."""
    if _torch_private.fbgemm_unavailable() is not None:
        pytest.skip(_torch_private.fbgemm_unavailable())
    generator = torch.Generator().manual_seed(rows)
    weights = torch.randint(-63, 64, (96, 512), generator=generator, dtype=torch.int8)
    weights[0], weights[1] = 63, -63  # the largest sums, either sign
    scales = torch.rand(96, generator=generator) + 0.5
    quantized = torch.randint(-127, 128, (rows, 512), generator=generator).float()
    quantized[0] = 127.0
    engine = torch.backends.quantized.engine
    packed = _torch_private.pack_fbgemm(weights, scales)
    assert torch.backends.quantized.engine == engine
    got = _torch_private.fbgemm_linear(quantized, packed, 128)
    exact = (quantized.double() @ weights.t().double()).float() * scales
    assert got.dtype == torch.float32 and torch.equal(got, exact)


def test_a_saturating_private_int_mm_is_not_used(monkeypatch):
    """Where `torch._int_mm` clips (oneDNN's products without VNNI), `int_mm` stays exact in float64."""
    _torch_private.private_int_mm_is_exact.cache_clear()
    monkeypatch.setattr(torch, "_int_mm", lambda a, b: (a.long() @ b.long()).clamp(-32768, 32767).to(torch.int32))
    try:
        assert not _torch_private.int_mm_exact()
        a = torch.full((4, 64), 127, dtype=torch.int8)
        b = torch.full((64, 8), 127, dtype=torch.int8)
        assert torch.equal(_torch_private.int_mm(a, b), torch.full((4, 8), 64 * 127 * 127, dtype=torch.int32))
    finally:
        _torch_private.private_int_mm_is_exact.cache_clear()
