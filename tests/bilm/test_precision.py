"""Precision of the biLM's products: each within its stated bound of fp32, float32 out, batch independent
bit for bit, int8 inference-only and CPU-only, bad values named."""

import copy
import pickle

import numpy
import pytest
import torch

import spacy_elmo.bilm.precision as precision_module
import spacy_elmo.bilm.runner as runner_module
from spacy_elmo import BiLM, chars
from spacy_elmo.bilm import _torch_private, int8
from spacy_elmo.bilm.int8 import Int8
from spacy_elmo.bilm.options import full_options
from spacy_elmo.bilm.precision import (
    FP32,
    PRECISIONS,
    OneDNN,
    OneDNNRoundedToBf16,
    Products,
    TorchHalf,
    check_device,
    check_precision,
    pack_for_onednn,
    products_for,
    slower_than_fp32_here,
)
from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.io import resolve as loading

# max |layer - fp32 layer| / max |fp32 layer|, per layer (README "Speed and precision": measured
# 0.007 for bf16 and 0.022 for int8 on the shipped model)
BOUNDS = {"bf16": 3e-2, "int8": 5e-2}


@pytest.fixture(scope="module")
def shipped_bilm():
    return loading.load_model("").bilm


def relative_errors(reference: list[numpy.ndarray], got: list[numpy.ndarray]) -> list[float]:
    errors = []
    for layer in range(reference[0].shape[0]):
        ref = numpy.concatenate([r[layer] for r in reference if r.size])
        out = numpy.concatenate([g[layer] for g in got if g.size])
        errors.append(float(numpy.abs(out - ref).max() / numpy.abs(ref).max()))
    return errors


@pytest.mark.parametrize("precision", ["bf16", "int8"])
# the shipped model over 90 sentences: 10-30 s where the CPU has no bf16/int8 instructions
@pytest.mark.parametrize("model", ["fixture", pytest.param("shipped", marks=pytest.mark.slow)])
def test_layers_within_the_bound_of_fp32(request, reference_bilm, all_sentences, precision, model):
    bilm = reference_bilm if model == "fixture" else request.getfixturevalue("shipped_bilm")
    sentences = all_sentences * (1 if model == "fixture" else 3)
    reference = BiLMRunner(bilm).embed_sentences(sentences)
    got = BiLMRunner(bilm, precision=precision).embed_sentences(sentences)
    assert all(g.dtype == numpy.float32 for g in got)
    errors = relative_errors(reference, got)
    assert max(errors) <= BOUNDS[precision], errors
    assert min(errors) > 0, "the precision changed nothing: its products did not run"


@pytest.mark.parametrize("precision", ["bf16", "int8"])
@pytest.mark.parametrize("token_budget", [1, 60, 100000])
def test_batch_independent_bit_for_bit(reference_bilm, all_sentences, precision, token_budget):
    alone = [BiLMRunner(reference_bilm, precision=precision).embed_batch([s])[0] for s in all_sentences]
    runner = BiLMRunner(reference_bilm, precision=precision, token_budget=token_budget)
    for sentence, a, b in zip(all_sentences, alone, runner.embed_sentences(all_sentences)):
        assert numpy.array_equal(a, b), f"{sentence}: max diff {numpy.abs(a - b).max()}"


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_the_shipped_model_is_batch_independent_bit_for_bit(shipped_bilm, all_sentences, precision):
    """At the shipped model's widths (512 and more), where oneDNN's bf16 kernel depends on the row count on
    AMX CPUs (the fixture's widths are too small to show it)."""
    alone = [BiLMRunner(shipped_bilm, precision=precision).embed_batch([s])[0] for s in all_sentences]
    runner = BiLMRunner(shipped_bilm, precision=precision, token_budget=100000)
    for sentence, a, b in zip(all_sentences, alone, runner.embed_sentences(all_sentences)):
        assert numpy.array_equal(a, b), f"{sentence}: max diff {numpy.abs(a - b).max()}"


def test_token_layer_follows_the_precision(reference_bilm):
    fp32 = BiLMRunner(reference_bilm).embed_tokens(["the", "cat", "Ünïcödé"])
    int8 = BiLMRunner(reference_bilm, precision="int8").embed_tokens(["the", "cat", "Ünïcödé"])
    assert int8.dtype == numpy.float32 and not numpy.array_equal(fp32, int8)
    assert numpy.abs(int8 - fp32).max() <= BOUNDS["int8"] * numpy.abs(fp32).max()


def test_token_cache_is_not_shared_across_precisions(make_bilm):
    bilm = make_bilm()
    bilm.set_token_cache(100)
    sentences = [["a", "b", "c"]]
    with torch.no_grad():
        fp32 = BiLMRunner(bilm).embed_sentences(sentences)[0]
        int8 = BiLMRunner(bilm, precision="int8").embed_sentences(sentences)[0]
        fp32_again = BiLMRunner(bilm).embed_sentences(sentences)[0]
    assert not numpy.array_equal(fp32[0], int8[0])
    assert numpy.array_equal(fp32, fp32_again)


def test_bf16_fine_tuning_reaches_the_float32_weights(make_bilm):
    bilm = make_bilm().train()
    runner = BiLMRunner(bilm, precision="bf16")
    ids = torch.from_numpy(chars.batch_to_ids([["a", "b"], ["c"]]))
    runner.run(ids).sum().backward()
    grads = [p.grad for p in bilm.lstm.parameters()]
    assert all(g is not None and g.dtype == torch.float32 and g.abs().sum() > 0 for g in grads)


def test_int8_refuses_gradients(make_bilm):
    bilm = make_bilm().train()
    ids = torch.from_numpy(chars.batch_to_ids([["a", "b"]]))
    with pytest.raises(RuntimeError, match="int8.*inference"):
        BiLMRunner(bilm, precision="int8").run(ids)


@pytest.mark.parametrize("bad", ["fp64", "int4", "FP32", "", None, 16])
def test_bad_precision_names_the_allowed_ones(make_bilm, bad):
    with pytest.raises(ValueError) as error:
        BiLMRunner(make_bilm(), precision=bad)
    for allowed in PRECISIONS:
        assert repr(allowed) in str(error.value)
    assert repr(bad) in str(error.value)


def test_fp16_is_gpu_only():
    check_device("fp16", torch.device("cuda"))
    with pytest.raises(ValueError, match="^precision: 'fp16' is for GPUs.*use precision 'bf16' or 'fp32'"):
        check_device("fp16", torch.device("cpu"))


def test_int8_is_cpu_only():
    check_device("int8", torch.device("cpu"))
    with pytest.raises(ValueError, match="CPU only.*bf16"):
        check_device("int8", torch.device("cuda"))
    for precision in ("fp32", "bf16", "fp16"):
        check_device(precision, torch.device("cuda"))


def test_each_precision_has_its_own_prepared_weights():
    assert check_precision("bf16") == "bf16"
    assert products_for("int8") is not products_for("int8")
    assert products_for("fp32").precision == "fp32"


def onednn_skip(dtype: torch.dtype = torch.float32) -> pytest.MarkDecorator:
    """Skip where oneDNN cannot run the products in `dtype` here, saying why (a torch version outside the
    supported range, a build without oneDNN, a CPU without the instructions of oneDNN's bf16 products)."""
    reason = _torch_private.linear_unavailable(dtype)
    return pytest.mark.skipif(reason is not None, reason=f"oneDNN's {dtype} products: {reason}")


needs_onednn = onednn_skip(torch.float32)


def ids_of(sentences):
    return torch.from_numpy(chars.batch_to_ids(sentences))


@pytest.mark.parametrize(
    "precision",
    [pytest.param("fp32", marks=onednn_skip(torch.float32)), pytest.param("bf16", marks=onednn_skip(torch.bfloat16))],
)
def test_cpu_inference_runs_packed_onednn_products(reference_bilm, all_sentences, precision):
    runner = BiLMRunner(reference_bilm, precision=precision)
    assert isinstance(runner.products.strategies[0], OneDNN) and runner.products.kernels == f"onednn-{precision}"
    runner.embed_sentences(all_sentences[:3])
    prepared = [entry[-1] for entry in runner.products._prepared.values()]
    options = reference_bilm.options
    # convolutions, highway carry and transform, token projection; LSTM input, recurrent, projection
    n_weights = len(options.filters) + 2 * options.n_highway + 1 + 3 * options.n_layers
    assert len(prepared) == n_weights, "every weight of the biLM packed once"
    assert all(p is not None for p in prepared), "a weight failed its batch-independence probe"


@needs_onednn
@pytest.mark.parametrize("model", ["fixture", "shipped"])
def test_packed_fp32_within_float_rounding_of_torch_products(
    request, reference_bilm, all_sentences, model, monkeypatch
):
    bilm = reference_bilm if model == "fixture" else request.getfixturevalue("shipped_bilm")
    ids = ids_of(all_sentences)
    calls = []
    real = _torch_private.linear

    def counted(x, packed, bias):
        calls.append(x.shape[0])
        return real(x, packed, bias)

    monkeypatch.setattr(_torch_private, "linear", counted)
    with torch.no_grad():
        plain = bilm(ids, products=FP32).layers
        assert not calls, "torch's products called oneDNN's packed product"
        products = products_for("fp32")
        bilm(ids, products=products)  # packs (and probes) every weight once
        calls.clear()
        packed = bilm(ids, products=products).layers
    # (on some CPUs, e.g. an AMX Xeon, both give the same bits on the fixture: count the calls instead)
    assert calls, "the packed products did not run"
    scale = float(plain.abs().max())
    assert float((packed - plain).abs().max()) <= 1e-6 * max(scale, 1.0)


@needs_onednn
def test_packed_products_with_gradients_are_torch_products(make_bilm):
    bilm = make_bilm().train()
    ids = ids_of([["a", "b"], ["c"]])
    plain = bilm(ids, products=FP32).layers
    packed = bilm(ids, products=products_for("fp32")).layers
    assert packed.requires_grad and torch.equal(packed, plain)
    packed.sum().backward()
    assert all(p.grad is not None for p in bilm.lstm.parameters())


@needs_onednn
def test_a_weight_that_fails_the_probe_keeps_torch_products(reference_bilm, all_sentences, monkeypatch):
    monkeypatch.setattr(precision_module, "pack_for_onednn", lambda w, dtype, block_rows=None: None)
    ids = ids_of(all_sentences)
    with torch.no_grad():
        plain = reference_bilm(ids, products=FP32).layers
        fallen_back = reference_bilm(ids, products=products_for("fp32")).layers
    assert torch.equal(fallen_back, plain)


@needs_onednn
def test_a_weight_onednn_cannot_pack_keeps_torch_products(reference_bilm, all_sentences, monkeypatch):
    def refuse(w, dtype):  # as bf16 on a CPU without the instructions oneDNN's bf16 path needs
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert")

    monkeypatch.setattr(_torch_private, "pack", refuse)
    ids = ids_of(all_sentences)
    with torch.no_grad():
        plain = reference_bilm(ids, products=FP32).layers
        fallen_back = reference_bilm(ids, products=products_for("fp32")).layers
    assert torch.equal(fallen_back, plain)


@needs_onednn
@pytest.mark.parametrize("differs", ["long products", "a short product's tail block"])
def test_probe_refuses_a_kernel_whose_rows_depend_on_the_batch(monkeypatch, differs):
    real = _torch_private.linear

    def row_count_dependent(x, packed, bias):  # another rounding for some shapes, as BLAS has below 4 rows
        out = real(x, packed, bias).clone()
        if differs == "long products" and x.shape[0] > 40:
            out += 1e-3
        if differs == "a short product's tail block" and x.shape[0] == 37:
            out[32:] += 1e-3
        return out

    w = torch.randn(16, 24)
    assert isinstance(pack_for_onednn(w, torch.float32), torch.Tensor)
    monkeypatch.setattr(_torch_private, "linear", row_count_dependent)
    assert pack_for_onednn(w, torch.float32) is None


def test_token_cache_keeps_packed_and_torch_products_apart(make_bilm):
    bilm = make_bilm().eval()
    bilm.set_token_cache(100)
    ids = ids_of([["a", "b", "c"]])
    with torch.no_grad():
        first = bilm(ids, products=FP32).layers
        bilm(ids, products=products_for("fp32"))
        again = bilm(ids, products=FP32).layers
    assert torch.equal(first, again)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_products_copy_and_pickle_without_their_prepared_weights(reference_bilm, all_sentences, precision):
    runner = BiLMRunner(reference_bilm, precision=precision)
    if precision != "fp16":
        runner.embed_sentences(all_sentences[:2])  # weights prepared (oneDNN's packed ones cannot be copied)
    for clone in (copy.deepcopy(runner.products), pickle.loads(pickle.dumps(runner.products))):
        assert clone.precision == precision and getattr(clone, "_prepared", {}) == {}


@pytest.mark.parametrize("precision", [p for p in PRECISIONS if p != "fp16"])
@pytest.mark.parametrize("directions", [None, 2])
def test_a_bound_product_is_the_product_bit_for_bit(precision, directions):
    """`bind` (the LSTM's per-step products) chooses and prepares as `product` does, once."""
    generator = torch.Generator().manual_seed(3)
    shape = (37, 24) if directions is None else (directions, 37, 24)
    w = torch.nn.Parameter(torch.randn(*shape[:-2], 24, 40, generator=generator))
    x = torch.randn(*shape, generator=generator)
    bias = torch.randn(*shape[:-1], 40, generator=generator)
    products = products_for(precision)
    with torch.no_grad():
        bound = products.bind(w, x)
        for b in (None, bias):
            assert torch.equal(bound(x, b), products.product(x, w, bias=b))
        # fp32 prepares (packs) a weight only through oneDNN; torch's own fp32 product uses it as it is
        prepares = precision != "fp32" or _torch_private.linear_unavailable(torch.float32) is None
        assert len(products._prepared) == int(prepares), "the weight prepared once, for both"


def test_a_bound_product_under_gradients_reaches_the_weight():
    generator = torch.Generator().manual_seed(4)
    w = torch.nn.Parameter(torch.randn(2, 8, 12, generator=generator))
    x = torch.randn(2, 5, 8, generator=generator)
    for products in (products_for("fp32"), products_for("bf16")):
        w.grad = None
        products.bind(w, x)(x).sum().backward()
        expected = x.transpose(1, 2).sum(-1, keepdim=True).expand(2, 8, 12)
        assert w.grad is not None
        assert torch.allclose(w.grad, expected, atol=0.1 if products.precision == "bf16" else 1e-5)
    with pytest.raises(RuntimeError, match="int8.*inference"):
        products_for("int8").bind(w, x)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("per_row_bias", [False, True])
def test_a_rows_onednn_product_does_not_depend_on_the_rows_beside_it(precision, per_row_bias):
    """What the LSTM's input products in chunks of steps rely on: a row's bits, biased either way, are the
    same in a long product and in a short one."""
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    if _torch_private.linear_unavailable(dtype) is not None:
        pytest.skip(_torch_private.linear_unavailable(dtype))
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


def run_int8_as_avx2_does(monkeypatch) -> None:
    """Runners' int8 as an AVX2 CPU runs it: 7-bit weights through fbgemm's products (or `_int_mm`'s,
    the same bits, where fbgemm is not exact here)."""
    kernel = "fbgemm" if int8.fbgemm_exact(int8.SEVEN_BIT_LEVELS) else "int_mm"
    real = runner_module.products_for

    def avx2_products(precision: str) -> Products:
        if precision != "int8":
            return real(precision)
        return Products(precision, Int8(kernel=kernel, levels=int8.SEVEN_BIT_LEVELS))

    monkeypatch.setattr(runner_module, "products_for", avx2_products)


def full_size_bilm():
    bilm = BiLM(full_options()).eval()
    bilm.reset_parameters(0)
    return bilm


@pytest.mark.parametrize("int8_kernels", ["this CPU's", "AVX2's"])
# the full configuration: about 90 million weights; the shipped model over 90 sentences
@pytest.mark.parametrize(
    "model", [pytest.param("shipped", marks=pytest.mark.slow), pytest.param("full", marks=pytest.mark.slow)]
)
def test_int8_within_the_bound_of_fp32_on_real_widths(request, all_sentences, monkeypatch, int8_kernels, model):
    bilm = request.getfixturevalue("shipped_bilm") if model == "shipped" else full_size_bilm()
    sentences = all_sentences * 3 if model == "shipped" else all_sentences[:8]
    if int8_kernels == "AVX2's":
        run_int8_as_avx2_does(monkeypatch)
    reference = BiLMRunner(bilm).embed_sentences(sentences)
    got = BiLMRunner(bilm, precision="int8").embed_sentences(sentences)
    errors = relative_errors(reference, got)
    assert max(errors) <= BOUNDS["int8"], errors
    assert min(errors) > 0, "the precision changed nothing: its products did not run"


@pytest.mark.parametrize("model", ["fixture", pytest.param("shipped", marks=pytest.mark.slow)])
def test_avx2_int8_is_batch_independent_bit_for_bit(request, reference_bilm, all_sentences, monkeypatch, model):
    """A sentence alone and in batches of 2, 7 and 32 (runs of every length, rows ending at every step)."""
    bilm = reference_bilm if model == "fixture" else request.getfixturevalue("shipped_bilm")
    run_int8_as_avx2_does(monkeypatch)
    sentences = (all_sentences * 2)[:40]
    runner = BiLMRunner(bilm, precision="int8", token_budget=100000)
    alone = [runner.embed_batch([s])[0] for s in sentences]
    for size in (2, 7, 32):
        batched = [
            a for start in range(0, len(sentences), size) for a in runner.embed_batch(sentences[start : start + size])
        ]
        for sentence, a, b in zip(sentences, alone, batched):
            assert numpy.array_equal(a, b), f"batches of {size}, {sentence}: max diff {numpy.abs(a - b).max()}"


def without_bf16_instructions(monkeypatch) -> None:
    """oneDNN here as on a CPU without bf16 instructions: its float32 products only."""
    real = _torch_private.linear_unavailable

    def unavailable(dtype: torch.dtype):
        return "simulated: no bf16 instructions" if dtype == torch.bfloat16 else real(dtype)

    monkeypatch.setattr(_torch_private, "linear_unavailable", unavailable)


@needs_onednn
def test_bf16_without_bf16_instructions_runs_rounded_operands_at_fp32_speed(reference_bilm, all_sentences, monkeypatch):
    """Not torch's emulated bf16 products (many times slower than fp32): oneDNN's float32 ones, on operands
    rounded to bf16; within bf16's bound of fp32, batch independent bit for bit."""
    without_bf16_instructions(monkeypatch)
    products = products_for("bf16")
    assert isinstance(products.strategies[0], OneDNNRoundedToBf16) and isinstance(products.strategies[1], TorchHalf)
    assert slower_than_fp32_here("bf16") is None
    reference = BiLMRunner(reference_bilm).embed_sentences(all_sentences)
    runner = BiLMRunner(reference_bilm, precision="bf16", token_budget=100000)
    got = runner.embed_sentences(all_sentences)
    errors = relative_errors(reference, got)
    assert max(errors) <= BOUNDS["bf16"], errors
    assert min(errors) > 0, "the precision changed nothing: its products did not run"
    assert runner.products.kernels == "onednn-fp32-bf16-rounded"
    for sentence, batched in zip(all_sentences[:10], got):
        assert numpy.array_equal(runner.embed_batch([sentence])[0], batched), sentence


@needs_onednn
def test_rounded_bf16_products_are_float32_products_of_bf16_values():
    generator = torch.Generator().manual_seed(9)
    w = torch.randn(2, 64, 96, generator=generator)
    x = torch.randn(2, 37, 64, generator=generator)
    bias = torch.randn(2, 1, 96, generator=generator)
    strategy = OneDNNRoundedToBf16()
    got = strategy.multiply(x, strategy.prepare(w), bias)
    rounded = [t.to(torch.bfloat16).double() for t in (x, w, bias)]
    exact = torch.baddbmm(rounded[2], rounded[0], rounded[1])  # bf16 products are exact; sums in float64
    assert got.dtype == torch.float32
    assert float((got.double() - exact).abs().max()) <= 1e-5 * float(exact.abs().max())
    assert not torch.equal(got, torch.baddbmm(bias, x, w)), "the operands were rounded"


def test_bf16_without_bf16_instructions_or_onednn_is_said_to_be_slow(monkeypatch):
    monkeypatch.setattr(_torch_private, "linear_unavailable", lambda dtype: "simulated: no oneDNN")
    assert slower_than_fp32_here("bf16") == "simulated: no oneDNN"
    products = products_for("bf16")
    assert len(products.strategies) == 1 and isinstance(products.strategies[0], TorchHalf)


def test_bf16_with_bf16_instructions_keeps_onednns_bf16_products():
    if _torch_private.linear_unavailable(torch.bfloat16) is not None:
        pytest.skip(_torch_private.linear_unavailable(torch.bfloat16))
    strategy = products_for("bf16").strategies[0]
    assert type(strategy) is OneDNN and strategy.kernels == "onednn-bf16"
